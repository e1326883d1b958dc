package kevtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/kevtest"
)

// WriteModel puts the bundled test checkpoint where kev.Load can read it; in a test, Checkpoint does the same into
// t.TempDir() and NewPredictor loads it as well.
func ExampleWriteModel() {
	dir, err := os.MkdirTemp("", "kev-model-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	checkpoint, base, err := kevtest.WriteModel(dir)
	if err != nil {
		panic(err)
	}
	p, err := kev.Load(context.Background(), checkpoint, kev.Options{Base: base, Progress: io.Discard})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	answers, err := p.Ask(context.Background(), "My running shoes arrived in the wrong size. Also I was charged twice.",
		kev.Noul("billing", "Is the customer asking about a charge?"))
	if err != nil {
		panic(err)
	}
	fmt.Println(answers[0])
	// Output:
	// billing: noul 0.4406
}

// A Fake answers the probabilities it is given, without a model: for the code paths that depend on what the model
// says (a confident choice, an unsure one).
func ExampleFake() {
	f := &kevtest.Fake{Probs: map[string][]float64{
		"billing":    {0.9},
		"department": {0.1, 0.2, 0.7},
	}}
	var asker kev.Asker = f // what the code under test takes
	answers, err := asker.Ask(context.Background(), "I was charged twice.",
		kev.Noul("billing", "Is the customer asking about a charge?"),
		kev.Choice("department", "Which team should handle this?",
			kev.Opt("returns", ""), kev.Opt("shipping", ""), kev.Opt("billing", "")),
		kev.Score("urgency", "How urgent is this?", "can wait", "today"))
	if err != nil {
		panic(err)
	}
	for _, a := range answers {
		fmt.Println(a)
	}
	fmt.Println(len(f.Requests()), "request")

	_, err = asker.Ask(context.Background(), "x", kev.Choice("department", "Which team?"))
	var ve *kev.ValidationError
	fmt.Println(errors.As(err, &ve))
	// Output:
	// billing: noul 0.9
	// department: choice billing (confidence 0.55: returns 0.1, shipping 0.2, billing 0.7)
	// urgency: score 0.5 (confidence 0: 0 0.5, 1 0.5)
	// 1 request
	// true
}
