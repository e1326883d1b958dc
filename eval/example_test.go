package eval_test

import (
	"context"
	"fmt"
	"os"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/eval"
)

// Score the bundled test checkpoint on eight labelled tickets, asking every choice and score question in three
// option orders and fitting the pointer temperature. The checkpoint has random weights, so the numbers say
// nothing about Kev, but they are exact; on a real checkpoint the same call measures it on your data.
func ExampleRun() {
	p, err := kev.Load(context.Background(), "../testdata/golden/tiny-a/kev", kev.Options{Base: "../testdata/golden/tiny-a/base"})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	f, err := os.Open("testdata/tickets.jsonl")
	if err != nil {
		panic(err)
	}
	defer f.Close()
	rep, err := eval.Run(context.Background(), p, f, eval.Options{Rotations: 3, FitTemperature: true})
	if err != nil {
		panic(err)
	}
	o := rep.Overall
	fmt.Printf("n=%d accuracy %.4f Brier %.4f log loss %.4f ECE %.4f\n", o.N, o.Accuracy, o.Brier, o.LogLoss, o.ECE)
	for _, q := range rep.Questions {
		fmt.Printf("%s (%s): accuracy %.4f log loss %.4f\n", q.ID, q.Type, q.Accuracy, q.LogLoss)
	}
	fmt.Printf("order sensitivity removed: max |Δp| %.4f over %d questions\n", rep.Rotations.MaxDelta, rep.Rotations.Questions)
	t := rep.Temperature
	fmt.Printf("temperature %.2f → %.2f (at the edge of the search: %v): log loss %.4f → %.4f\n", t.From, t.Fitted, t.AtBound,
		t.Before.LogLoss, t.After.LogLoss)
	// A random head is best near uniform, so its fit runs to the largest temperature searched.

	// Output:
	// n=20 accuracy 0.3500 Brier 0.7246 log loss 1.1450 ECE 0.2937
	// billing (noul): accuracy 0.6667 log loss 0.7770
	// team (choice): accuracy 0.2857 log loss 1.3053
	// urgency (score): accuracy 0.1429 log loss 1.3001
	// order sensitivity removed: max |Δp| 0.5731 over 14 questions
	// temperature 2.41 → 38.56 (at the edge of the search: true): log loss 1.1450 → 0.9848
}
