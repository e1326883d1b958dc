package kev_test

import (
	"context"
	"fmt"

	"github.com/kevgo/kev"
)

// A predictor loads a checkpoint once and answers questions about any text; here the small random test
// checkpoint, so the numbers mean nothing but are exact.
func ExamplePredictor_Ask() {
	p, err := kev.Load(context.Background(), "testdata/golden/tiny-a/kev", kev.Options{Base: "testdata/golden/tiny-a/base"})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	answers, err := p.Ask(context.Background(), "My running shoes arrived in the wrong size. Also I was charged twice.",
		kev.Noul("billing", "Is the customer asking about a charge?"),
		kev.Choice("department", "Which team should handle this?",
			kev.Opt("returns", "Exchanges, refunds, wrong or damaged items"),
			kev.Opt("shipping", "Delivery status, delays, lost packages"),
			kev.Opt("billing", "Charges, invoices, payment problems")),
		kev.Score("urgency", "How urgent is this?", "can wait", "this week", "today"))
	if err != nil {
		panic(err)
	}
	for _, a := range answers {
		b, _ := a.Answer.MarshalJSON()
		fmt.Printf("%s %s\n", a.ID, b)
	}
	// Output:
	// billing {"type":"noul","noul":0.4406}
	// department {"type":"choice","choice":"shipping","confidence":0.2462,"probabilities":{"returns":0.3581,"shipping":0.4974,"billing":0.1444}}
	// urgency {"type":"score","score":1.5212,"legend":{"0":"can wait","1":"this week","2":"today"},"probabilities":{"0":0.1355,"1":0.2078,"2":0.6567},"confidence":0.2817}
}

// A device list loads one replica of the model per entry, each with its own batcher and prefix cache; requests go
// to the replica that will answer soonest. "cuda:0,1" or "cuda:all" puts one on each GPU; here two on the CPU.
func ExampleDevice_replicas() {
	p, err := kev.Load(context.Background(), "testdata/golden/tiny-a/kev",
		kev.Options{Base: "testdata/golden/tiny-a/base", Device: "cpu,cpu"})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	if _, err := p.Ask(context.Background(), "I was charged twice.", kev.Noul("billing", "About a charge?")); err != nil {
		panic(err)
	}
	st := p.Stats()
	fmt.Println(p.Info().Replicas, "replicas;", st.Batches.Requests, "request answered")
	for i, r := range st.Replicas {
		fmt.Printf("replica %d on %s: %d\n", i, r.Device, r.Batches.Requests)
	}
	// Output:
	// 2 replicas; 1 request answered
	// replica 0 on cpu: 1
	// replica 1 on cpu: 0
}
