// Package eval measures how accurate and how calibrated a Kev checkpoint is on labelled requests: accuracy, macro-F1
// of choices, Brier score, log loss and expected calibration error, per question, per question type and overall; a
// reliability diagram; the pointer temperature that fits the data best; and how much the answers move with the order
// of the options.
//
// The input is JSON Lines: one System One request per line with one extra top-level field, "expected", mapping
// question ids to the expected answer — a choice's option name, a noul's true or false, a score's level index from
// 0. Kev's own labelled files are read too: its labelled records (a "label" inside each question, same values) and
// its frozen external suites (the labels as text under "_meta": {"gold": ...}). For example:
//
//	{"state": "I was charged twice for order 4417.", "questions": {
//	  "team": {"type": "choice", "criteria": {"billing": "Charges", "shipping": "Deliveries"}},
//	  "urgent": {"type": "noul", "instructions": "Does this need a reply today?"}},
//	 "expected": {"team": "billing", "urgent": true}}
//
// Run asks a predictor (a *kev.Predictor) for each line's unrounded probabilities and returns a Report (ExampleRun
// scores the bundled test checkpoint on testdata/tickets.jsonl; "kev eval" in examples/kev is the command). Every
// metric is computed from those probabilities, renormalised to sum 1 in float64, over classes: a noul has two,
// [false, true]; a choice its options; a score its levels.
//
//   - accuracy: the share of questions whose most likely class (the first on ties) is the expected one;
//   - macro-F1 (choices): per question id, the mean over the classes that are expected or predicted at least once of
//     F1 = 2TP / (2TP + FP + FN); a group of several choice questions reports the mean of their macro-F1s;
//   - Brier score: the mean over questions of Σₖ (pₖ − yₖ)², y the one-hot expected class (0 to 2);
//   - log loss: the mean of −ln p(expected), with p floored at LogLossFloor;
//   - ECE: the top probability of each question in Bins equal-width bins [i/10, (i+1)/10) (the last also holds 1),
//     Σ_bins (n_bin / n) · |accuracy_bin − mean top probability_bin|.
package eval

import (
	"math"
	"slices"
)

// Bins is the number of equal-width confidence bins of the ECE and the reliability diagram.
const Bins = 10

// LogLossFloor is the least probability log loss takes, so that one confident miss costs ln(1e15) ≈ 34.5 and not
// an infinity.
const LogLossFloor = 1e-15

// Metrics are the scores of a set of answered questions.
type Metrics struct {
	N          int      `json:"n"`                  // questions scored
	Accuracy   float64  `json:"accuracy"`           // share whose most likely class is the expected one
	MacroF1    *float64 `json:"macro_f1,omitempty"` // choices only: mean macro-F1 of the choice question ids
	Brier      float64  `json:"brier"`              // mean Σₖ (pₖ − yₖ)²
	LogLoss    float64  `json:"log_loss"`           // mean −ln p(expected)
	ECE        float64  `json:"ece"`                // expected calibration error over the top probability
	Confidence float64  `json:"confidence"`         // mean top probability
}

// Compute scores items. Items without probabilities are not counted; no items give the zero Metrics.
func Compute(items []Item) Metrics {
	var m Metrics
	var conf []float64
	var correct []bool
	for _, it := range items {
		if len(it.Probs) == 0 {
			continue
		}
		m.N++
		top := argmax(it.Probs)
		ok := top == it.Expected
		if ok {
			m.Accuracy++
		}
		m.Brier += brier(it.Probs, it.Expected)
		m.LogLoss += -math.Log(max(it.Probs[it.Expected], LogLossFloor))
		m.Confidence += it.Probs[top]
		conf = append(conf, it.Probs[top])
		correct = append(correct, ok)
	}
	if m.N == 0 {
		return Metrics{}
	}
	n := float64(m.N)
	m.Accuracy /= n
	m.Brier /= n
	m.LogLoss /= n
	m.Confidence /= n
	m.ECE = ECE(conf, correct)
	m.MacroF1 = choiceMacroF1(items)
	return m
}

func brier(p []float64, y int) float64 {
	var s float64
	for k, pk := range p {
		d := pk
		if k == y {
			d = pk - 1
		}
		s += d * d
	}
	return s
}

// argmax is the index of the first largest value.
func argmax(p []float64) int {
	best := 0
	for i := 1; i < len(p); i++ {
		if p[i] > p[best] {
			best = i
		}
	}
	return best
}

// choiceMacroF1 is the mean over the choice question ids among items of each id's macro-F1, or nil when there are
// no choice items.
func choiceMacroF1(items []Item) *float64 {
	type pair struct{ want, got []string }
	byID := map[string]*pair{}
	var ids []string
	for _, it := range items {
		if it.Type != "choice" || len(it.Probs) == 0 {
			continue
		}
		p := byID[it.Question]
		if p == nil {
			p = &pair{}
			byID[it.Question] = p
			ids = append(ids, it.Question)
		}
		p.want = append(p.want, it.Keys[it.Expected])
		p.got = append(p.got, it.Keys[argmax(it.Probs)])
	}
	if len(ids) == 0 {
		return nil
	}
	var s float64
	for _, id := range ids {
		s += MacroF1(byID[id].want, byID[id].got)
	}
	f := s / float64(len(ids))
	return &f
}

// MacroF1 is the mean over the classes that occur in expected or predicted of F1 = 2TP / (2TP + FP + FN)
// (scikit-learn's f1_score with average="macro"). Both slices have one entry per question; no entries give 0.
func MacroF1(expected, predicted []string) float64 {
	type counts struct{ tp, fp, fn int }
	c := map[string]*counts{}
	get := func(k string) *counts {
		if c[k] == nil {
			c[k] = &counts{}
		}
		return c[k]
	}
	for i := range expected {
		want, got := expected[i], predicted[i]
		if want == got {
			get(want).tp++
			continue
		}
		get(want).fn++
		get(got).fp++
	}
	if len(c) == 0 {
		return 0
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a fixed summation order
	var s float64
	for _, k := range keys {
		x := c[k]
		s += 2 * float64(x.tp) / float64(2*x.tp+x.fp+x.fn)
	}
	return s / float64(len(c))
}

// Bin is one confidence bin of a reliability diagram.
type Bin struct {
	Lo, Hi     float64 // the bin holds top probabilities in [Lo, Hi) (the last bin also holds 1)
	N          int     // questions in the bin
	Confidence float64 // their mean top probability (0 when empty)
	Accuracy   float64 // the share of them answered right (0 when empty)
}

// Reliability returns the Bins confidence bins of top probabilities conf with correct telling which were right.
func Reliability(conf []float64, correct []bool) []Bin {
	bins := make([]Bin, Bins)
	for i := range bins {
		bins[i].Lo, bins[i].Hi = float64(i)/Bins, float64(i+1)/Bins
	}
	for k, c := range conf {
		i := Bins - 1
		for j := range Bins - 1 {
			if c < bins[j].Hi {
				i = j
				break
			}
		}
		b := &bins[i]
		b.N++
		b.Confidence += c
		if correct[k] {
			b.Accuracy++
		}
	}
	for i := range bins {
		if n := float64(bins[i].N); n > 0 {
			bins[i].Confidence /= n
			bins[i].Accuracy /= n
		}
	}
	return bins
}

// ECE is the expected calibration error of top probabilities conf with correct telling which were right: over
// the Reliability bins, Σ (n_bin / n) · |accuracy_bin − confidence_bin|. No questions give 0.
func ECE(conf []float64, correct []bool) float64 {
	if len(conf) == 0 {
		return 0
	}
	var e float64
	for _, b := range Reliability(conf, correct) {
		if b.N > 0 {
			e += float64(b.N) / float64(len(conf)) * math.Abs(b.Accuracy-b.Confidence)
		}
	}
	return e
}

// TopConfidence returns each item's top probability and whether its most likely class is the expected one, the
// inputs of Reliability and ECE.
func TopConfidence(items []Item) (conf []float64, correct []bool) {
	for _, it := range items {
		if len(it.Probs) == 0 {
			continue
		}
		top := argmax(it.Probs)
		conf = append(conf, it.Probs[top])
		correct = append(correct, top == it.Expected)
	}
	return conf, correct
}
