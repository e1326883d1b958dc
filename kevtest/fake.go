package kevtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/internal/systemone"
)

// Fake is a kev.Asker that answers without a model: each question gets the probabilities Probs sets for its id,
// or equal ones when Probs has none, and the answer is made from them as a predictor makes it (rounded to 4
// decimals, the most likely option, the expected level, the confidence). Requests are validated as a predictor
// validates them. It records the requests it answers. A Fake is safe for concurrent use once Probs is set.
type Fake struct {
	// Probs maps a question id to its probabilities: for a noul question one number, P(yes); for a choice one per
	// option, for a score one per level, in order.
	Probs map[string][]float64

	mu       sync.Mutex
	requests []*kev.Request
}

// ProbsError reports probabilities in Fake.Probs that do not fit their question.
type ProbsError struct {
	ID     string // the question's id
	Want   int    // probabilities the question takes
	Got    int    // probabilities Probs gives
	Reason string // what is wrong, when not the count
}

// Error names the question and what does not fit.
func (e *ProbsError) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("kevtest: Fake.Probs[%q]: %s", e.ID, e.Reason)
	}
	return fmt.Sprintf("kevtest: Fake.Probs[%q] has %d probabilities, the question takes %d", e.ID, e.Got, e.Want)
}

// Ask answers questions about a state, as kev.Predictor.Ask does.
func (f *Fake) Ask(ctx context.Context, state any, questions ...kev.QuestionEntry) ([]kev.AnswerEntry, error) {
	req := &kev.Request{Questions: questions}
	if s, ok := state.(string); ok {
		req.State = kev.Text(s)
	} else {
		v, err := kev.ValueOf(state)
		if err != nil {
			return nil, err
		}
		req.State = v
	}
	resp, err := f.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	return resp.Answers, nil
}

// Do answers a System One request, as kev.Predictor.Do does: an invalid request is a *kev.ValidationError; usage
// and latency are zero.
func (f *Fake) Do(ctx context.Context, req *kev.Request) (*kev.Response, error) {
	if req == nil {
		return nil, errors.New("kevtest: Do: nil request")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var checked kev.Request
	if err := checked.UnmarshalJSON(body); err != nil {
		return nil, err // the predictor's *kev.ValidationError
	}
	sr, err := systemone.DecodeRequest(body)
	if err != nil {
		return nil, err
	}
	rec, err := systemone.ToRecord(sr, systemone.RecordOptions{})
	if err != nil {
		return nil, err
	}
	probs := make([][]float32, len(rec.Questions))
	for k, q := range rec.Questions {
		if probs[k], err = f.probs(q.ID, q.Type, len(q.Keys)); err != nil {
			return nil, err
		}
	}
	answers, err := systemone.ToAnswers(rec, probs)
	if err != nil {
		return nil, err
	}
	out, err := (&systemone.Response{Model: sr.ModelName(), Answers: answers}).MarshalJSON()
	if err != nil {
		return nil, err
	}
	resp := &kev.Response{}
	if err := resp.UnmarshalJSON(out); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	return resp, nil
}

// probs returns the probabilities of question id, of type typ with n keys.
func (f *Fake) probs(id string, typ systemone.QuestionType, n int) ([]float32, error) {
	ps, ok := f.Probs[id]
	if !ok {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1 / float32(n)
		}
		return out, nil
	}
	if typ == systemone.TypeNoul {
		if len(ps) != 1 {
			return nil, &ProbsError{ID: id, Want: 1, Got: len(ps)}
		}
		if ps[0] < 0 || ps[0] > 1 {
			return nil, &ProbsError{ID: id, Reason: fmt.Sprintf("P(yes) %v is not in [0, 1]", ps[0])}
		}
		return []float32{float32(1 - ps[0]), float32(ps[0])}, nil
	}
	if len(ps) != n {
		return nil, &ProbsError{ID: id, Want: n, Got: len(ps)}
	}
	out := make([]float32, n)
	for i, p := range ps {
		if p < 0 || p > 1 {
			return nil, &ProbsError{ID: id, Reason: fmt.Sprintf("probability %v is not in [0, 1]", p)}
		}
		out[i] = float32(p)
	}
	return out, nil
}

// Requests returns the requests the fake has answered, in order.
func (f *Fake) Requests() []*kev.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*kev.Request(nil), f.requests...)
}

var _ kev.Asker = (*Fake)(nil)
