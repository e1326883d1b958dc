package eval

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/kevgo/kev"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// TestComputeByHand checks every metric on small sets worked out by hand.
func TestComputeByHand(t *testing.T) {
	noul := Item{Question: "billing", Type: kev.TypeNoul, Keys: []string{"false", "true"}, Expected: 1, Probs: []float64{0.2, 0.8}}
	choice := Item{Question: "team", Type: kev.TypeChoice, Keys: []string{"a", "b", "c"}, Expected: 1, Probs: []float64{0.5, 0.3, 0.2}}
	score := Item{Question: "urgency", Type: kev.TypeScore, Keys: []string{"0", "1", "2"}, Expected: 1, Probs: []float64{0.1, 0.6, 0.3}}
	f64 := func(x float64) *float64 { return &x }
	for _, tc := range []struct {
		name  string
		items []Item
		want  Metrics
	}{
		{"noul right", []Item{noul}, Metrics{N: 1, Accuracy: 1, Brier: 0.08, LogLoss: -math.Log(0.8), ECE: 0.2, Confidence: 0.8}},
		// The choice's top class "a" is wrong: Brier 0.5² + 0.7² + 0.2² = 0.78; macro-F1 over {a, b}: 0.
		{"choice wrong", []Item{choice}, Metrics{N: 1, Accuracy: 0, MacroF1: f64(0), Brier: 0.78, LogLoss: -math.Log(0.3), ECE: 0.5, Confidence: 0.5}},
		// Three questions, each alone in its bin (0.8 → [0.8, 0.9), 0.5, 0.6): ECE = (0.2 + 0.5 + 0.4)/3.
		{"three types", []Item{noul, choice, score}, Metrics{N: 3, Accuracy: 2.0 / 3, MacroF1: f64(0),
			Brier: (0.08 + 0.78 + 0.26) / 3, LogLoss: (-math.Log(0.8) - math.Log(0.3) - math.Log(0.6)) / 3,
			ECE: (0.2 + 0.5 + 0.4) / 3, Confidence: (0.8 + 0.5 + 0.6) / 3}},
		// Two right at 0.8 and 0.85 share a bin: |1 − 0.825| = 0.175.
		{"shared bin", []Item{noul, {Type: kev.TypeNoul, Expected: 0, Probs: []float64{0.85, 0.15}}}, Metrics{N: 2, Accuracy: 1,
			Brier: (0.08 + 2*0.15*0.15) / 2, LogLoss: (-math.Log(0.8) - math.Log(0.85)) / 2, ECE: 0.175, Confidence: 0.825}},
		// A certain miss: log loss is floored, not infinite; confidence 1 falls in the last bin.
		{"certain miss", []Item{{Type: kev.TypeNoul, Expected: 0, Probs: []float64{0, 1}}}, Metrics{N: 1, Accuracy: 0, Brier: 2,
			LogLoss: -math.Log(LogLossFloor), ECE: 1, Confidence: 1}},
		{"empty", nil, Metrics{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(tc.items)
			if got.N != tc.want.N || !near(got.Accuracy, tc.want.Accuracy, 1e-15) || !near(got.Brier, tc.want.Brier, 1e-15) ||
				!near(got.LogLoss, tc.want.LogLoss, 1e-14) || !near(got.ECE, tc.want.ECE, 1e-15) || !near(got.Confidence, tc.want.Confidence, 1e-15) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			if (got.MacroF1 == nil) != (tc.want.MacroF1 == nil) || got.MacroF1 != nil && !near(*got.MacroF1, *tc.want.MacroF1, 1e-15) {
				t.Errorf("macro-F1 %v, want %v", got.MacroF1, tc.want.MacroF1)
			}
		})
	}
}

func TestMacroF1ByHand(t *testing.T) {
	for _, tc := range []struct {
		want, got []string
		f1        float64
	}{
		// a: TP 1, FP 1, FN 1 → 1/2; b: TP 1, FP 1 → 2/3; c: FN 1 → 0.
		{[]string{"a", "a", "b", "c"}, []string{"a", "b", "b", "a"}, (0.5 + 2.0/3 + 0) / 3},
		{[]string{"x", "y"}, []string{"x", "y"}, 1},
		{[]string{"x"}, []string{"y"}, 0},
		{nil, nil, 0},
	} {
		if got := MacroF1(tc.want, tc.got); !near(got, tc.f1, 1e-15) {
			t.Errorf("MacroF1(%q, %q) = %v, want %v", tc.want, tc.got, got, tc.f1)
		}
	}
}

func TestReliabilityEdges(t *testing.T) {
	bins := Reliability([]float64{0, 0.05, 0.1, 0.95, 1}, []bool{true, false, true, true, false})
	if bins[0].N != 2 || bins[1].N != 1 || bins[9].N != 2 || bins[0].Accuracy != 0.5 || bins[9].Confidence != 0.975 {
		t.Errorf("bins %+v", bins)
	}
}

// The fixture (scripts/golden/eval_metrics.py): probability tables and the metrics scikit-learn (accuracy, macro-F1,
// log loss, Brier), numpy (ECE, reliability bins) and scipy (the temperature) computed from them.
type fixture struct {
	ComputedWith map[string]string `json:"computed_with"`
	Cases        []struct {
		Type          kev.QuestionType   `json:"type"`
		Keys          []string           `json:"keys"`
		Probabilities [][]float32        `json:"probabilities"`
		Expected      []int              `json:"expected"`
		Metrics       map[string]float64 `json:"metrics"`
	} `json:"cases"`
	Overall     map[string]float64 `json:"overall"`
	Reliability []struct {
		N          int     `json:"n"`
		Confidence float64 `json:"confidence"`
		Accuracy   float64 `json:"accuracy"`
	} `json:"reliability"`
	Temperature map[string]float64 `json:"temperature"`
}

func readFixture(t testing.TB) (*fixture, [][]Item) {
	t.Helper()
	data, err := os.ReadFile("testdata/metrics.json")
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var groups [][]Item
	for _, c := range f.Cases {
		var items []Item
		for i, p := range c.Probabilities {
			q := normalized(p)
			items = append(items, Item{Line: i + 1, Question: string(c.Type) + "-q", Type: c.Type, Keys: c.Keys, Expected: c.Expected[i],
				Probs: q, Orders: [][]float64{q}})
		}
		groups = append(groups, items)
	}
	return &f, groups
}

// TestAgainstScikitLearn compares every metric with the fixture's, to 1e-12.
func TestAgainstScikitLearn(t *testing.T) {
	f, groups := readFixture(t)
	t.Logf("fixture computed with %v", f.ComputedWith)
	var all []Item
	for i, c := range f.Cases {
		got := Compute(groups[i])
		m := c.Metrics
		check := func(name string, g float64) {
			if !near(g, m[name], 1e-12) {
				t.Errorf("%s %s = %.17g, reference %.17g", c.Type, name, g, m[name])
			}
		}
		if got.N != int(m["n"]) {
			t.Errorf("%s n = %d, reference %v", c.Type, got.N, m["n"])
		}
		check("accuracy", got.Accuracy)
		check("brier", got.Brier)
		check("log_loss", got.LogLoss)
		check("ece", got.ECE)
		if f1, ok := m["macro_f1"]; ok {
			if got.MacroF1 == nil || !near(*got.MacroF1, f1, 1e-12) {
				t.Errorf("%s macro_f1 = %v, reference %v", c.Type, got.MacroF1, f1)
			}
		}
		all = append(all, groups[i]...)
	}
	got := Compute(all)
	for name, g := range map[string]float64{"accuracy": got.Accuracy, "brier": got.Brier, "log_loss": got.LogLoss, "ece": got.ECE} {
		if !near(g, f.Overall[name], 1e-12) {
			t.Errorf("overall %s = %.17g, reference %.17g", name, g, f.Overall[name])
		}
	}
	bins := Reliability(TopConfidence(all))
	if len(bins) != len(f.Reliability) {
		t.Fatalf("%d bins, reference %d", len(bins), len(f.Reliability))
	}
	for i, b := range bins {
		r := f.Reliability[i]
		if b.N != r.N || !near(b.Confidence, r.Confidence, 1e-12) || !near(b.Accuracy, r.Accuracy, 1e-12) {
			t.Errorf("bin %d: %+v, reference %+v", i, b, r)
		}
	}
}

// TestFitTemperatureAgainstScipy: the fitted temperature and the log loss at it agree with scipy's bounded Brent
// search on the same objective.
func TestFitTemperatureAgainstScipy(t *testing.T) {
	f, groups := readFixture(t)
	var all []Item
	for _, g := range groups {
		all = append(all, g...)
	}
	ref := f.Temperature
	fit, err := FitTemperature(all, ref["from"])
	if err != nil {
		t.Fatal(err)
	}
	if !near(fit.Fitted, ref["fitted"], 1e-5*ref["fitted"]) {
		t.Errorf("fitted %.10g, scipy %.10g", fit.Fitted, ref["fitted"])
	}
	if !near(fit.Before.LogLoss, ref["log_loss_before"], 1e-12) || !near(fit.After.LogLoss, ref["log_loss_after"], 1e-10) {
		t.Errorf("log loss %.15g → %.15g, scipy %.15g → %.15g", fit.Before.LogLoss, fit.After.LogLoss, ref["log_loss_before"], ref["log_loss_after"])
	}
	if fit.After.Accuracy != fit.Before.Accuracy {
		t.Errorf("accuracy moved with the temperature: %v → %v", fit.Before.Accuracy, fit.After.Accuracy)
	}
	if _, err := FitTemperature(all, 0); err == nil {
		t.Error("temperature 0 accepted")
	}
	if _, err := FitTemperature(nil, 1); err == nil {
		t.Error("no items accepted")
	}
}

func TestAtTemperature(t *testing.T) {
	// p ∝ exp(z/2) for z = (0, 1, 3); at T = 0.5 it is ∝ exp(2z).
	z := []float64{0, 1, 3}
	soft := func(T float64) []float64 {
		var s float64
		out := make([]float64, len(z))
		for i, x := range z {
			out[i] = math.Exp(x / T)
			s += out[i]
		}
		for i := range out {
			out[i] /= s
		}
		return out
	}
	got := AtTemperature(soft(2), 2, 0.5)
	for i, w := range soft(0.5) {
		if !near(got[i], w, 1e-15) {
			t.Errorf("AtTemperature = %v, want %v", got, soft(0.5))
		}
	}
	if got := AtTemperature([]float64{0, 1}, 1, 3); got[0] != 0 || got[1] != 1 {
		t.Errorf("a zero probability came back: %v", got)
	}
}
