package systemone_test

import (
	"errors"
	"fmt"

	"github.com/kevgo/kev/internal/systemone"
)

// Questions are built with Noul, Choice and Score; the request renders into the text the model reads.
func Example_buildQuestions() {
	req := systemone.NewRequest("My running shoes arrived in the wrong size. Can I swap them for a size 10?",
		systemone.NoulWith("billing", "Is this about a charge?", "About charges", "Not about charges"),
		systemone.Choice("department", "Which team should handle this?",
			systemone.Opt("returns", "Exchanges, refunds, wrong or damaged items"),
			systemone.Opt("shipping", "Delivery status, delays, lost packages"),
			systemone.Opt("billing", "")),
		systemone.Score("urgency", "How urgent is this?", "can wait", "this week", "today"),
	)
	rec, err := systemone.ToRecord(req, systemone.RecordOptions{})
	if err != nil {
		panic(err)
	}
	for _, q := range rec.Questions {
		fmt.Printf("%s %q -> %q\n", q.ID, q.Options, q.Keys)
	}
	// Output:
	// billing ["no: Not about charges" "yes: About charges"] -> ["false" "true"]
	// department ["returns: Exchanges, refunds, wrong or damaged items" "shipping: Delivery status, delays, lost packages" "billing"] -> ["returns" "shipping" "billing"]
	// urgency ["can wait" "this week" "today"] -> ["0" "1" "2"]
}

// Structured content (objects, arrays, numbers) is parsed from JSON text and rendered as labelled text.
func ExampleParseContent() {
	state, err := systemone.ParseContent([]byte(`{"ticket": {"channel": "email", "tags": ["refund", "urgent"]}, "amount": 1e2}`))
	if err != nil {
		panic(err)
	}
	req := &systemone.Request{State: state, Questions: []systemone.QuestionEntry{systemone.Noul("refund", "Is a refund asked for?")}}
	rec, _ := systemone.ToRecord(req, systemone.RecordOptions{})
	fmt.Println(rec.State)
	// Output:
	// ticket:
	//   channel: email
	//   tags:
	//     - refund
	//     - urgent
	// amount: 100.0
}

// DecodeRequest reads a request body as Kev's server does; structured content becomes labelled text.
func ExampleDecodeRequest() {
	req, err := systemone.DecodeRequest([]byte(`{"state": {"ticket": {"channel": "email", "body": "hi"}, "amount": 1.50},
		"questions": {"tone": {"type": "choice", "instructions": "Tone?", "criteria": {"calm": null, "angry": "Hostile"}}}}`))
	if err != nil {
		panic(err)
	}
	rec, _ := systemone.ToRecord(req, systemone.RecordOptions{})
	fmt.Println(req.Model)
	fmt.Println(rec.State)
	fmt.Printf("%q\n", rec.Questions[0].Options)

	_, err = systemone.DecodeRequest([]byte(`{"state": "x", "questions": {"q": {"type": "score", "criteria": []}}}`))
	var ve *systemone.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(len(ve.Errors), "problems; the score's:", ve.Errors[len(ve.Errors)-1].Path())
	}
	// Output:
	// kev-latest
	// ticket:
	//   channel: email
	//   body: hi
	// amount: 1.5
	// ["calm" "angry: Hostile"]
	// 5 problems; the score's: questions.q.Score.criteria
}

// A response marshals to the exact bytes of Kev's HTTP API: compact JSON, Python float repr, Kev's key order.
func ExampleResponse_MarshalJSON() {
	rec, _ := systemone.ToRecord(systemone.NewRequest("I was charged twice.",
		systemone.Noul("billing", "About billing?"),
		systemone.Score("urgency", "How urgent?", "can wait", "today")), systemone.RecordOptions{})
	answers, _ := systemone.ToAnswers(rec, [][]float32{{0.0421, 0.9579}, {0.25, 0.75}})
	resp := &systemone.Response{Model: "jev-latest", Answers: answers, Usage: systemone.Usage{InputTokens: 40, OutputTokens: 61}, LatencyMS: 21}
	b, _ := resp.MarshalJSON()
	fmt.Println(string(b))
	// Output:
	// {"model":"jev-latest","answers":{"billing":{"type":"noul","noul":0.9579},"urgency":{"type":"score","score":0.75,"legend":{"0":"can wait","1":"today"},"probabilities":{"0":0.25,"1":0.75},"confidence":0.5}},"usage":{"input_tokens":40,"output_tokens":61},"latency_ms":21.0}
}
