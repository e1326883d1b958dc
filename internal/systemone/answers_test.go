package systemone

import (
	"math"
	"reflect"
	"testing"

	"github.com/kevgo/kev/internal/pyjson"
)

func specRecord() *Record {
	return &Record{Questions: []RecordQuestion{
		{ID: "n", Type: TypeNoul, Keys: []string{"false", "true"}},
		{ID: "c", Type: TypeChoice, Keys: []string{"a", "b", "c"}},
		{ID: "s", Type: TypeScore, Keys: []string{"0", "1", "2"}, Legend: []LegendEntry{{"0", "lo"}, {"1", "mid"}, {"2", "hi"}}},
	}}
}

func TestToAnswersSpecVector(t *testing.T) {
	ans, err := ToAnswers(specRecord(), [][]float32{{0.3, 0.7}, {0.8, 0.15, 0.05}, {0.1, 0.3, 0.6}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := pyjson.Compact(AnswersValue(ans))
	want := `{"n":{"type":"noul","noul":0.7},` +
		`"c":{"type":"choice","choice":"a","confidence":0.7,"probabilities":{"a":0.8,"b":0.15,"c":0.05}},` +
		`"s":{"type":"score","score":1.5,"legend":{"0":"lo","1":"mid","2":"hi"},"probabilities":{"0":0.1,"1":0.3,"2":0.6},"confidence":0.25}}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if c := ans[1].Answer.Confidence; c != pyjson.Round((0.8-1.0/3)/(1-1.0/3), 4) {
		t.Fatalf("choice confidence %v", c)
	}
}

func TestConfidenceEdgeCases(t *testing.T) {
	eq := func(name string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	eq("choice [1]", ChoiceConfidence([]float64{1}), 1)
	eq("score [1]", ScoreConfidence([]float64{1}), 1)
	eq("choice [.5 .5]", ChoiceConfidence([]float64{0.5, 0.5}), 0)
	if c := ChoiceConfidence([]float64{1, 0, 0}); math.Abs(c-1) > 1e-12 {
		t.Errorf("choice [1 0 0] = %v", c)
	}
	eq("score [0 1 0]", ScoreConfidence([]float64{0, 1, 0}), 1)
	eq("score [0 0 0 1]", ScoreConfidence([]float64{0, 0, 0, 1}), 1)
	for l := 2; l <= 10; l++ {
		p := make([]float64, l)
		for i := range p {
			p[i] = 1 / float64(l)
		}
		eq("score uniform", ScoreConfidence(p), 0)
	}
	eq("score [.5 0 .5]", ScoreConfidence([]float64{0.5, 0, 0.5}), 0)
	eq("score unnormalised", ScoreConfidence([]float64{2, 6, 0}), ScoreConfidence([]float64{0.25, 0.75, 0}))
	eq("choice zeros", ChoiceConfidence([]float64{0, 0}), 0)
	eq("score zeros", ScoreConfidence([]float64{0, 0, 0}), 0)
	eq("score spec", pyjson.Round(ScoreConfidence([]float64{0.1, 0.3, 0.6}), 4), 0.25)
}

func TestScoreConfidenceTypeSafeExamples(t *testing.T) {
	for _, tc := range []struct {
		p    []float64
		want float64
	}{
		{[]float64{0, 0.57, 0.43}, 0.35}, {[]float64{0, 0.14, 0.86, 0, 0}, 0.89}, {[]float64{0, 0, 0.48, 0.52}, 0.52},
		{[]float64{0, 0.74, 0.26}, 0.61}, {[]float64{0, 0, 0, 1}, 1},
	} {
		if got := pyjson.Round(ScoreConfidence(tc.p), 2); math.Abs(got-tc.want) >= 0.011 {
			t.Errorf("ScoreConfidence(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// TestObservedOutputs checks the formulas on outputs a deployed Kev-4B returned.
func TestObservedOutputs(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func([]float64) float64
		p    []float64
		want float64
	}{
		{"department", ChoiceConfidence, []float64{0.5877, 0.1796, 0.2328}, 0.3815},
		{"frustration", ScoreConfidence, []float64{0.0571, 0.6902, 0.2527}, 0.5353},
		// The observed probabilities were rounded ({"0": 0.0158, "1": 0.9842}); the confidence came from unrounded
		// ones, such as these, which round to the same.
		{"two levels", ScoreConfidence, []float64{0.01576, 0.98424}, 0.9685},
		{"five flat", ScoreConfidence, []float64{0.2, 0.2, 0.2, 0.2, 0.2}, 0},
	} {
		if got := pyjson.Round(tc.f(tc.p), 4); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRoundedSumsWithinTolerance(t *testing.T) {
	for _, k := range []int{40, 255} {
		p := make([]float32, k)
		keys := make([]string, k)
		for i := range p {
			keys[i] = levelKey(i)
			p[i] = float32(1.0 / float64(k))
			if k == 40 {
				p[i] = float32(0.21 / 39)
			}
		}
		if k == 40 {
			p[0] = 0.79
		}
		rec := &Record{Questions: []RecordQuestion{{ID: "c", Type: TypeChoice, Keys: keys}}}
		ans, err := ToAnswers(rec, [][]float32{p})
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, pr := range ans[0].Answer.Probabilities {
			sum += pr.P
		}
		if len(ans[0].Answer.Probabilities) != k || math.Abs(sum-1) >= 0.02 {
			t.Errorf("K=%d: %d entries, sum %v", k, len(ans[0].Answer.Probabilities), sum)
		}
	}
}

// TestAnswersMatchPython checks answers against CPython (testdata/gen_semantics.py) on random float32
// distributions of 1..255 options: rounding, float repr, key order, compensated sums, and both JSON forms.
func TestAnswersMatchPython(t *testing.T) {
	s := loadSemantics(t)
	if len(s.Answers) < 100 {
		t.Fatalf("%d cases", len(s.Answers))
	}
	for i, c := range s.Answers {
		q := RecordQuestion{ID: "q", Type: c.Type, Keys: c.Keys}
		if c.Type == TypeScore {
			for j, k := range c.Keys {
				q.Legend = append(q.Legend, LegendEntry{Key: k, Text: "level " + levelKey(j) + " ✓"})
			}
		}
		ans, err := ToAnswers(&Record{Questions: []RecordQuestion{q}}, [][]float32{c.Probs})
		if err != nil {
			t.Fatal(err)
		}
		v := ans[0].Answer.Value()
		got, err := pyjson.Compact(v)
		if err != nil || string(got) != c.Compact {
			t.Errorf("case %d compact\n got %s\nwant %s", i, got, c.Compact)
		}
		if got := pyjson.Dumps(v); got != c.Dumps {
			t.Errorf("case %d dumps\n got %s\nwant %s", i, got, c.Dumps)
		}
	}
}

func TestToAnswersErrors(t *testing.T) {
	if _, err := ToAnswers(specRecord(), [][]float32{{0.3, 0.7}}); err == nil {
		t.Error("missing question probabilities accepted")
	}
	if _, err := ToAnswers(specRecord(), [][]float32{{0.3, 0.7}, {1}, {0.1, 0.3, 0.6}}); err == nil {
		t.Error("wrong option count accepted")
	}
}

func TestOneLevelScoreAnswer(t *testing.T) {
	req, err := DecodeRequest([]byte(`{"state": "I was charged twice.", "model": "jev-latest", "questions": {
		"billing": {"type": "noul", "criteria": {"true": "About charges", "false": "Not about charges"}},
		"urgency": {"type": "score", "instructions": "How urgent is this?", "criteria": ["today"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := record(t, req)
	ans, err := ToAnswers(rec, [][]float32{{0.2, 0.8}, {1}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ans[1].Answer.MarshalJSON()
	if want := `{"type":"score","score":0.0,"legend":{"0":"today"},"probabilities":{"0":1.0},"confidence":1.0}`; string(b) != want {
		t.Fatalf("got %s", b)
	}
}

func TestResponseJSON(t *testing.T) {
	ans, err := ToAnswers(specRecord(), [][]float32{{0.3, 0.7}, {0.8, 0.15, 0.05}, {0.1, 0.3, 0.6}})
	if err != nil {
		t.Fatal(err)
	}
	r := &Response{Model: "jev-latest", Answers: ans[:1], Usage: Usage{InputTokens: 102, OutputTokens: 213}, LatencyMS: 12}
	if got, want := r.String(), `{"model":"jev-latest","answers":{"n":{"type":"noul","noul":0.7}},"usage":{"input_tokens":102,"output_tokens":213},"latency_ms":12.0}`; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	tr, cached := false, 9
	r = &Response{Model: "m", Answers: []AnswerEntry{{ID: "é", Answer: ans[0].Answer}},
		Usage: Usage{InputTokens: 5, OutputTokens: 6, StateTokens: 3, StateTokensUsed: 3, CachedTokens: &cached}, LatencyMS: 0.1, Truncated: &tr}
	want := `{"model":"m","answers":{"é":{"type":"noul","noul":0.7}},"usage":{"input_tokens":5,"output_tokens":6,"input_tokens_details":{"cached_tokens":9},"state_tokens":3,"state_tokens_used":3},"latency_ms":0.1,"truncated":false}`
	if b, err := r.MarshalJSON(); err != nil || string(b) != want {
		t.Fatalf("got  %s (%v)\nwant %s", b, err, want)
	}
	r.LatencyMS = math.NaN()
	if _, err := r.MarshalJSON(); err == nil {
		t.Fatal("NaN latency marshalled")
	}
}

func TestOutputTokens(t *testing.T) {
	tok := newFakeTokenizer()
	ans := []AnswerEntry{{ID: "é", Answer: Answer{Type: TypeNoul, Noul: 0.25}}}
	// json.dumps: {"\u00e9": {"type": "noul", "noul": 0.25}}, one fake token per byte.
	if got, want := OutputTokens(tok, ans), len(`{"\u00e9": {"type": "noul", "noul": 0.25}}`); got != want {
		t.Fatalf("output tokens %d, want %d", got, want)
	}
}

func TestPySum(t *testing.T) {
	// Compensated: 0.1 ten times is exactly 1.0 in Python 3.12's sum, not 0.9999999999999999.
	xs := make([]float64, 10)
	for i := range xs {
		xs[i] = 0.1
	}
	if got := pySum(xs); got != 1.0 {
		t.Fatalf("pySum = %v", got)
	}
	if got := pySum([]float64{1e100, 1, -1e100}); got != 1 {
		t.Fatalf("pySum = %v", got)
	}
	if !reflect.DeepEqual(normalize([]float64{0, 0}), []float64{0.5, 0.5}) {
		t.Fatal("normalize zeros")
	}
}
