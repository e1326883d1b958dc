package kev_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kevgo/kev"
)

// Load reads a checkpoint directory (or a hub name) and its base model once; the predictor then answers any
// number of requests, from any number of goroutines. Here the small random test checkpoint on the CPU.
func ExampleLoad() {
	ctx := context.Background()
	p, err := kev.Load(ctx, "testdata/golden/tiny-a/kev", kev.Options{Base: "testdata/golden/tiny-a/base", Offline: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()
	info := p.Info()
	fmt.Println(info.Base, info.Device, info.DType, info.LoRA)
	// Output: Qwen/Qwen3.5-Tiny-A-Base cpu float32 8
}

// Structured state comes from Go values: maps (keys sorted), Objects (order kept), slices, numbers, strings and
// booleans. String shows the text the model reads, rendered exactly as Kev renders it.
func ExampleValueOf() {
	state, err := kev.ValueOf(kev.Object{
		{Key: "ticket", Value: map[string]any{"channel": "email", "tags": []string{"refund", "urgent"}}},
		{Key: "amount", Value: 100.0},
		{Key: "vip", Value: true},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(state)
	b, _ := json.Marshal(state)
	fmt.Println(string(b))
	// Output:
	// ticket:
	//   channel: email
	//   tags:
	//     - refund
	//     - urgent
	// amount: 100.0
	// vip: True
	// {"ticket":{"channel":"email","tags":["refund","urgent"]},"amount":100.0,"vip":true}
}

// A request body is read as Kev's server reads it; what does not fit the schema is a *ValidationError whose
// problems name the field.
func ExampleRequest_UnmarshalJSON() {
	var req kev.Request
	err := json.Unmarshal([]byte(`{"state": {"body": "hi", "amount": 1.50},
		"questions": {"tone": {"type": "choice", "instructions": "Tone?", "criteria": {"calm": null, "angry": "Hostile"}}}}`), &req)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s; %d question, options %s and %s\n", req.State, len(req.Questions),
		req.Questions[0].Question.Options[0].Name, req.Questions[0].Question.Options[1].Name)

	err = json.Unmarshal([]byte(`{"state": "x", "questions": {"urgency": {"type": "score", "criteria": []}}}`), &req)
	var ve *kev.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(err)
	}
	// Output:
	// body: hi
	// amount: 1.5; 1 question, options calm and angry
	// kev: invalid request: questions.urgency.criteria: list should have at least 1 item after validation, not 0
}

// A response marshals to the exact bytes of Kev's HTTP API: compact JSON, Python float repr, Kev's key order.
func ExampleResponse_MarshalJSON() {
	resp := &kev.Response{
		Model: "jev-latest",
		Answers: []kev.AnswerEntry{
			{ID: "billing", Answer: kev.Answer{Type: kev.TypeNoul, Noul: 0.9579}},
			{ID: "team", Answer: kev.Answer{Type: kev.TypeChoice, Choice: "billing", Confidence: 0.5,
				Probabilities: []kev.Prob{{Key: "billing", P: 0.75}, {Key: "returns", P: 0.25}}}},
		},
		Usage:     kev.Usage{InputTokens: 40, OutputTokens: 61},
		LatencyMS: 21,
	}
	b, _ := resp.MarshalJSON()
	fmt.Println(string(b))
	// Output:
	// {"model":"jev-latest","answers":{"billing":{"type":"noul","noul":0.9579},"team":{"type":"choice","choice":"billing","confidence":0.5,"probabilities":{"billing":0.75,"returns":0.25}}},"usage":{"input_tokens":40,"output_tokens":61},"latency_ms":21.0}
}
