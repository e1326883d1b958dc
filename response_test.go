package kev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// TestResponseRoundTrip decodes the bodies the predictor's responses marshal to (every golden request, in plain
// and truncate mode, with and without cached tokens) and checks that the decoded response equals the original and
// marshals to the same bytes.
func TestResponseRoundTrip(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	for _, truncate := range []bool{false, true} {
		p := loadGolden(t, s, Options{TruncateStates: truncate})
		for i, sr := range reqs {
			resp, err := p.Do(context.Background(), fromSysRequest(sr))
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				n := 7
				resp.Usage.CachedTokens = &n
			}
			body, err := json.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			var got Response
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("request %d: %v\n%s", i, err, body)
			}
			if !reflect.DeepEqual(&got, resp) {
				t.Errorf("request %d: decoded %+v, want %+v", i, got, *resp)
			}
			again, err := json.Marshal(&got)
			if err != nil || string(again) != string(body) {
				t.Errorf("request %d: re-marshalled\n%s\nwant\n%s (%v)", i, again, body, err)
			}
			for _, a := range resp.Answers {
				if b, ok := got.Answer(a.ID); !ok || !reflect.DeepEqual(b, a.Answer) {
					t.Errorf("request %d: Answer(%q) = %v, %v; want %v", i, a.ID, b, ok, a.Answer)
				}
			}
		}
	}
}

// TestResponseDecodeErrors checks that bodies that do not fit give a *ResponseError naming the place.
func TestResponseDecodeErrors(t *testing.T) {
	for _, c := range []struct{ body, field string }{
		{`[]`, ""},
		{`{"model":1}`, "model"},
		{`{"answers":{"a":{"type":"noul","noul":"x"}}}`, "answers.a.noul"},
		{`{"answers":{"a":{"type":"maybe"}}}`, "answers.a.type"},
		{`{"answers":{"a":{"type":"choice","probabilities":[]}}}`, "answers.a.probabilities"},
		{`{"usage":{"input_tokens":1.5}}`, "usage.input_tokens"},
		{`{"truncated":"no"}`, "truncated"},
		{`{"model":`, ""},
	} {
		var r Response
		err := r.UnmarshalJSON([]byte(c.body))
		var re *ResponseError
		if !errors.As(err, &re) || re.Field != c.field {
			t.Errorf("%s: %v, want a *ResponseError at %q", c.body, err, c.field)
		}
	}
}

// TestAnswerString checks the one-line form of each answer type and the lookup by id.
func TestAnswerString(t *testing.T) {
	answers := []AnswerEntry{
		{ID: "urgent", Answer: Answer{Type: TypeNoul, Noul: 0.3775}},
		{ID: "team", Answer: Answer{Type: TypeChoice, Choice: "shipping", Confidence: 0.52,
			Probabilities: []Prob{{"returns", 0.24}, {"shipping", 0.76}}}},
		{ID: "tone", Answer: Answer{Type: TypeScore, Score: 1.42, Confidence: 0.31,
			Probabilities: []Prob{{"0", 0.12}, {"1", 0.34}, {"2", 0.54}}}},
	}
	want := []string{
		"urgent: noul 0.3775",
		"team: choice shipping (confidence 0.52: returns 0.24, shipping 0.76)",
		"tone: score 1.42 (confidence 0.31: 0 0.12, 1 0.34, 2 0.54)",
	}
	for i, a := range answers {
		if got := fmt.Sprint(a); got != want[i] {
			t.Errorf("Sprint = %q, want %q", got, want[i])
		}
	}
	if a, ok := Lookup(answers, "team"); !ok || a.Choice != "shipping" {
		t.Errorf("Lookup(team) = %v, %v", a, ok)
	}
	if _, ok := Lookup(answers, "nope"); ok {
		t.Error("Lookup(nope) found an answer")
	}
}

// FuzzResponseUnmarshal reads any bytes as a response body without panicking: an error is a *ResponseError, and a
// body it reads marshals and reads back to the same response.
func FuzzResponseUnmarshal(f *testing.F) {
	for _, s := range []string{
		`{"model":"kev-latest","answers":{"a":{"type":"noul","noul":0.5}},"usage":{"input_tokens":3,"output_tokens":4},"latency_ms":1.5}`,
		`{"answers":{"t":{"type":"choice","choice":"x","confidence":0.1,"probabilities":{"x":0.6,"y":0.4}}},"truncated":true}`,
		`{"answers":{"s":{"type":"score","score":1.2,"legend":{"0":"lo","1":"hi"},"probabilities":{"0":0.4,"1":0.6},"confidence":0.2}}}`,
		`[]`, `{"usage":{"input_tokens_details":{"cached_tokens":2}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Response
		err := r.UnmarshalJSON(data)
		if err != nil {
			var re *ResponseError
			if !errors.As(err, &re) {
				t.Fatalf("%q: %T %v, want a *ResponseError", data, err, err)
			}
			return
		}
		body, err := json.Marshal(&r)
		if err != nil {
			return // NaN or infinite numbers: refused, as Kev's server refuses them
		}
		var again Response
		if err := again.UnmarshalJSON(body); err != nil {
			t.Fatalf("%s: re-reading %s: %v", data, body, err)
		}
		if b2, _ := json.Marshal(&again); string(b2) != string(body) {
			t.Fatalf("%s: %s then %s", data, body, b2)
		}
	})
}
