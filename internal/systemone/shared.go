package systemone

import (
	"context"
	"fmt"
	"sync"

	"github.com/kevgo/kev/internal/pyjson"
)

// PartsInFlight is how many parts of one Separate or Permute request are sent at once: one, in order, as Kev's
// server sends them through its queue. A request of a thousand questions then reaches the model as one ordinary
// request at a time, each admitted by its own tokens, and a request beside it waits behind one part (the batch
// in progress), not all of them. (Four at a time answered 1,000 questions 20% sooner here, but made a small
// request beside a 255-option permute wait 1.7 s instead of 0.4 s.)
const PartsInFlight = 1

// sharedState is what the parts of one request share: the state's text and its ids, made by the first part that
// needs them and read by the others (all parts have the same state, model and options).
type sharedState struct {
	mu     sync.Mutex
	text   *renderedState
	ids    *encodedState
	budget int // the state's default render budget (stateBudget), once known; 0 before
	render int // times the state was rendered (tests)
	encode int // times it was encoded (tests)
}

// renderedState is a state's text under one set of render options.
type renderedState struct {
	dateFacts bool
	max       int
	text      string
	cut       bool
}

// encodedState is a state's ids (cut at limit) and full count under one tokenizer.
type encodedState struct {
	tok   Tokenizer
	limit int
	ids   []int
	n     int
}

// stateBudget is stateBudget(state), worked out once for all parts.
func (s *sharedState) stateBudget(state pyjson.Value) int {
	if s == nil {
		return stateBudget(state)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.budget == 0 {
		s.budget = stateBudget(state)
	}
	return s.budget
}

// renderState returns the state's text within max bytes, with date facts when asked, rendered once for all parts.
func (s *sharedState) renderState(state pyjson.Value, dateFacts bool, max int, render func(pyjson.Value) (string, bool)) (string, bool) {
	if s == nil {
		if dateFacts {
			state = withDateFacts(state, max)
		}
		return render(state)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.text; r != nil && r.dateFacts == dateFacts && r.max == max {
		return r.text, r.cut
	}
	if dateFacts {
		state = withDateFacts(state, max)
	}
	text, cut := render(state)
	s.text = &renderedState{dateFacts: dateFacts, max: max, text: text, cut: cut}
	s.render++
	return text, cut
}

// stateTokens is userTokensLimit for the state, encoded once for all parts with the same tokenizer and limit.
func (s *sharedState) stateTokens(tok Tokenizer, text string, limit int) ([]int, int) {
	if s == nil {
		return userTokensLimit(tok, text, limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.ids; e != nil && e.limit == limit && sameTokenizer(e.tok, tok) {
		return e.ids, e.n
	}
	ids, n := userTokensLimit(tok, text, limit)
	s.ids = &encodedState{tok: tok, limit: limit, ids: ids, n: n}
	s.encode++
	return ids, n
}

// sameTokenizer reports whether a and b are the same tokenizer (false for tokenizers that cannot be compared).
func sameTokenizer(a, b Tokenizer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// single returns the part of req that asks only question q; parts made from the same shared state render and
// encode it once.
func single(req *Request, q QuestionEntry, shared *sharedState) *Request {
	return &Request{Model: req.Model, State: req.State, Questions: []QuestionEntry{q}, shared: shared}
}

// doAll sends the parts in order, at most PartsInFlight at a time, and returns the responses in order, or the
// first error in order: once a part fails, no more are sent.
func doAll(ctx context.Context, do func(context.Context, *Request) (*Response, error), reqs []*Request) ([]*Response, error) {
	resps := make([]*Response, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	slots := make(chan struct{}, PartsInFlight)
	var mu sync.Mutex
	failed := false
	for i, req := range reqs {
		slots <- struct{}{}
		mu.Lock()
		stop := failed
		mu.Unlock()
		if stop || ctx.Err() != nil {
			<-slots
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			defer func() {
				if v := recover(); v != nil {
					errs[i] = fmt.Errorf("kev: panic answering a request: %v", v)
				}
				if errs[i] != nil {
					mu.Lock()
					failed = true
					mu.Unlock()
				}
			}()
			resps[i], errs[i] = do(ctx, req)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, err
		}
		if resps[i] == nil {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("kev: part %d of %d was not answered", i, len(reqs))
		}
	}
	return resps, nil
}
