package systemone

import (
	"context"

	"github.com/kevgo/kev/internal/pyjson"
)

// DetailError is an error a server answers with {"detail": Msg} and Status.
type DetailError struct {
	Status int
	Msg    string
}

func (e *DetailError) Error() string { return "kev: " + e.Msg }

// Separate answers each question of req in its own request on the same state and model (Kev's
// /v1/systemone/separate) and merges the answers in question order: input tokens and latencies add up (the sum
// rounded to 0.1 ms), output tokens count the merged answers with tok (nil: the sum of the parts' counts), and a
// truncating server's extras come from the first part. The parts render and encode the state once, and are sent
// in order, PartsInFlight at a time, each admitted by its own tokens.
func Separate(ctx context.Context, do func(context.Context, *Request) (*Response, error), req *Request, tok Tokenizer) (*Response, error) {
	if len(req.Questions) == 0 {
		return nil, &ValidationError{Errors: []FieldError{tooShort([]any{"questions"}, "Dictionary", pyjson.Object())}}
	}
	if err := checkIDs(req); err != nil {
		return nil, err
	}
	parts := make([]*Request, len(req.Questions))
	shared := &sharedState{}
	for i, q := range req.Questions {
		parts[i] = single(req, q, shared)
	}
	resps, err := doAll(ctx, do, parts)
	if err != nil {
		return nil, err
	}
	out := &Response{Model: req.ModelName()}
	latency, outTokens := 0.0, 0
	for _, p := range resps {
		out.Answers = append(out.Answers, p.Answers...)
		out.Usage.InputTokens += p.Usage.InputTokens
		outTokens += p.Usage.OutputTokens
		latency += p.LatencyMS
	}
	if tok != nil {
		outTokens = OutputTokens(tok, out.Answers)
	}
	out.Usage.OutputTokens = outTokens
	out.LatencyMS = pyjson.Round(latency, 1)
	if first := resps[0]; first.Truncated != nil {
		t := *first.Truncated
		out.Truncated = &t
		out.Usage.StateTokens, out.Usage.StateTokensUsed = first.Usage.StateTokens, first.Usage.StateTokensUsed
	}
	return out, nil
}
