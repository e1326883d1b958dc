package systemone

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// partsModel answers parts as a predictor does (ToRecord, Encode, an admission of the encoding's tokens, ToAnswers
// with probabilities made from the row's ids) and records what it did: the state's bytes tokenised, the parts in
// flight at once, the tokens admitted per part.
type partsModel struct {
	tok *countingTokenizer

	mu       sync.Mutex
	inFlight int
	peak     int
	admitted []int
	shared   map[*sharedState]bool
	unmarked int // requests that do not report themselves as parts
	calls    atomic.Int64
}

func newPartsModel() *partsModel {
	return &partsModel{tok: &countingTokenizer{fakeTokenizer: newFakeTokenizer()}, shared: map[*sharedState]bool{}}
}

func (m *partsModel) do(ctx context.Context, req *Request) (*Response, error) {
	m.calls.Add(1)
	m.mu.Lock()
	m.inFlight++
	m.peak = max(m.peak, m.inFlight)
	m.mu.Unlock()
	defer func() { m.mu.Lock(); m.inFlight--; m.mu.Unlock() }()
	rec, err := ToRecord(req, RecordOptions{})
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	enc, err := Encode(m.tok, rec, EncodeOptions{}) // the counting tokenizer is not safe for concurrent use
	if err == nil {
		m.admitted = append(m.admitted, enc.InputTokens())
		m.shared[req.shared] = true
		if !req.Part() {
			m.unmarked++
		}
	}
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return fakeResponse(req, rec, enc)
}

// fakeResponse answers a record with probabilities that depend on its encoding: the parts' answers then agree with
// answering each question alone only if their encodings do.
func fakeResponse(req *Request, rec *Record, enc *Encoding) (*Response, error) {
	probs := make([][]float32, len(rec.Questions))
	for k, r := range enc.Rows() {
		w := make([]float32, len(r.Opts))
		sum := float32(0)
		for j, o := range r.Opts {
			w[j] = float32(1 + (r.IDs[o-1]+len(enc.StateIDs()))%7)
			sum += w[j]
		}
		for j := range w {
			w[j] /= sum
		}
		probs[k] = w
	}
	answers, err := ToAnswers(rec, probs)
	if err != nil {
		return nil, err
	}
	return &Response{Model: req.ModelName(), Answers: answers, Usage: Usage{InputTokens: enc.InputTokens()}, LatencyMS: 1}, nil
}

// alone answers every question of req in a request of its own, sharing nothing: the reference for Separate.
func alone(t *testing.T, req *Request) []AnswerEntry {
	t.Helper()
	var out []AnswerEntry
	tok := newFakeTokenizer()
	for _, q := range req.Questions {
		part := &Request{Model: req.Model, State: req.State, Questions: []QuestionEntry{q}}
		rec, err := ToRecord(part, RecordOptions{})
		if err != nil {
			t.Fatal(err)
		}
		enc, err := Encode(tok, rec, EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := fakeResponse(part, rec, enc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.Answers...)
	}
	return out
}

func manyQuestions(n int, state string) *Request {
	var b strings.Builder
	fmt.Fprintf(&b, `{"state":%q,"questions":{`, state)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"q%d":{"type":"choice","instructions":"which %d","criteria":{"a%d":"x","b":null,"c":"long option %d"}}`, i, i, i%5, i)
	}
	b.WriteString("}}")
	req, err := DecodeRequest([]byte(b.String()))
	if err != nil {
		panic(err)
	}
	return req
}

// TestSeparateSharesTheState (separate): 1,000 questions render and tokenise the state once, not once a question
// (1,000 questions used to take 116 s and 1.99 GB); the parts reach the model PartsInFlight at a time, each
// admitted by its own tokens and marked a part (Request.Part); the merged answers are those of each question asked
// alone.
func TestSeparateSharesTheState(t *testing.T) {
	state := strings.Repeat("The order shipped late. ", 40)
	req := manyQuestions(1000, state)
	m := newPartsModel()
	resp, err := Separate(context.Background(), m.do, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.shared) != 1 || m.unmarked != 0 {
		t.Fatalf("parts shared %d states, %d were not marked parts; want one, none", len(m.shared), m.unmarked)
	}
	if req.Part() || NewRequest("s").Part() {
		t.Error("a request of a client reports itself as a part")
	}
	for s := range m.shared {
		if s == nil || s.render != 1 || s.encode != 1 {
			t.Fatalf("state rendered %d times, encoded %d times, want once each", s.render, s.encode)
		}
	}
	branches := 0
	for _, q := range req.Questions {
		branches += len(q.ID) + 200 // a generous bound on a question's texts
	}
	if m.tok.bytes > len(state)+branches {
		t.Errorf("%d bytes tokenised for a %d-byte state and 1,000 short questions", m.tok.bytes, len(state))
	}
	if m.peak > PartsInFlight || m.peak < 1 {
		t.Errorf("%d parts in flight at once, want at most %d", m.peak, PartsInFlight)
	}
	if len(m.admitted) != 1000 {
		t.Fatalf("%d admissions, want one a part", len(m.admitted))
	}
	sum := 0
	for _, n := range m.admitted {
		sum += n
	}
	if resp.Usage.InputTokens != sum {
		t.Errorf("input tokens %d, the parts admitted %d", resp.Usage.InputTokens, sum)
	}
	if want := alone(t, req); !reflect.DeepEqual(resp.Answers, want) {
		t.Errorf("merged answers differ from each question asked alone")
	}
}

// TestPermuteSharesTheState (permute): n_perm runs of a 255-option question render and tokenise the state once and
// reach the model PartsInFlight at a time, marked parts.
func TestPermuteSharesTheState(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"state":"` + strings.Repeat("word ", 2000) + `","questions":{"q":{"type":"choice","criteria":{`)
	for i := range 255 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"o%d":"option %d"`, i, i)
	}
	b.WriteString("}}}}")
	req, err := DecodeRequest([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	m := newPartsModel()
	out, err := Permute(context.Background(), m.do, &PermuteRequest{Request: req, Question: "q", NPerm: 64, Seed: big.NewInt(3)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Runs) != 64 || m.calls.Load() != 64 || m.unmarked != 0 {
		t.Fatalf("%d runs, %d calls, %d not marked parts", len(out.Runs), m.calls.Load(), m.unmarked)
	}
	for s := range m.shared {
		if len(m.shared) != 1 || s.render != 1 || s.encode != 1 {
			t.Fatalf("%d shared states, rendered %d, encoded %d", len(m.shared), s.render, s.encode)
		}
	}
	if m.peak > PartsInFlight {
		t.Errorf("%d runs in flight at once, want at most %d", m.peak, PartsInFlight)
	}
}

// TestSeparateStopsAtFirstError: a part that fails stops the parts not yet sent; the error is the first in order.
func TestSeparateStopsAtFirstError(t *testing.T) {
	req := manyQuestions(200, "s")
	var calls atomic.Int64
	boom := errors.New("boom")
	do := func(ctx context.Context, r *Request) (*Response, error) {
		calls.Add(1)
		if r.Questions[0].ID == "q10" {
			return nil, boom
		}
		rec, err := ToRecord(r, RecordOptions{})
		if err != nil {
			return nil, err
		}
		enc, err := Encode(newFakeTokenizer(), rec, EncodeOptions{})
		if err != nil {
			return nil, err
		}
		return fakeResponse(r, rec, enc)
	}
	if _, err := Separate(context.Background(), do, req, nil); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
	if n := calls.Load(); n > 10+1+PartsInFlight {
		t.Errorf("%d parts sent after the 11th failed", n)
	}
}

// FuzzSeparate: for any request, Separate's merged answers are those of each question asked alone, or both fail.
func FuzzSeparate(f *testing.F) {
	f.Add(`{"state":{"a":[1,{"b":"c"}]},"questions":{"x":{"type":"noul"},"y":{"type":"score","criteria":["lo","hi"]}}}`)
	f.Add(`{"state":"s","questions":{"q":{"type":"choice","criteria":{"a":[],"b":{"c":null}}}}}`)
	f.Add(`{"state":null,"questions":{"":{"type":"noul","criteria":{"true":"yes"}}}}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := DecodeRequest([]byte(body))
		if err != nil {
			return
		}
		m := newPartsModel()
		resp, err := Separate(context.Background(), m.do, req, nil)
		var want []AnswerEntry
		var werr error
		func() {
			defer func() {
				if v := recover(); v != nil {
					werr = fmt.Errorf("%v", v)
				}
			}()
			tok := newFakeTokenizer()
			for _, q := range req.Questions {
				part := &Request{Model: req.Model, State: req.State, Questions: []QuestionEntry{q}}
				rec, err := ToRecord(part, RecordOptions{})
				if err != nil {
					werr = err
					return
				}
				enc, err := Encode(tok, rec, EncodeOptions{})
				if err != nil {
					werr = err
					return
				}
				r, err := fakeResponse(part, rec, enc)
				if err != nil {
					werr = err
					return
				}
				want = append(want, r.Answers...)
			}
		}()
		if (err == nil) != (werr == nil) {
			t.Fatalf("Separate: %v; alone: %v", err, werr)
		}
		if err == nil && !reflect.DeepEqual(resp.Answers, want) {
			t.Fatalf("answers differ")
		}
	})
}

// FuzzPermute: for any permute body, Permute answers n_perm runs through the parts path or fails with an error,
// never a panic, and never more than PartsInFlight runs at once.
func FuzzPermute(f *testing.F) {
	f.Add(`{"request":` + permuteRequest + `,"question":"q","n_perm":5,"seed":7}`)
	f.Add(`{"request":{"state":[1,2],"questions":{"q":{"type":"choice","criteria":{"a":{"x":[]},"b":"","c":0}}}},"question":"q","n_perm":64,"seed":-3}`)
	f.Add(`{"request":` + permuteRequest + `,"question":"nope","n_perm":2}`)
	f.Fuzz(func(t *testing.T, body string) {
		v, err := ParseContent([]byte(body))
		if err != nil {
			return
		}
		pr, err := PermuteRequestFromValue(v)
		if err != nil {
			return
		}
		m := newPartsModel()
		out, err := Permute(context.Background(), m.do, pr)
		if err == nil && len(out.Runs) != pr.NPerm {
			t.Fatalf("%d runs for n_perm %d", len(out.Runs), pr.NPerm)
		}
		if m.peak > PartsInFlight {
			t.Fatalf("%d runs in flight", m.peak)
		}
	})
}
