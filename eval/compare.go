package eval

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"
)

// Comparison sets two runs over the same labelled requests side by side — the same checkpoint in two dtypes, say —
// and says how far apart their answers are. A question counts when both runs scored it (the same input line and
// question id); a line one run skipped (Report.Skipped) is left out of the differences, not of each run's metrics.
type Comparison struct {
	First         string  `json:"first"`            // what the first run was, e.g. its dtype "float32"
	Second        string  `json:"second"`           // what the second run was, e.g. "bfloat16"
	FirstMetrics  Metrics `json:"first_overall"`    // the first run's Report.Overall
	SecondMetrics Metrics `json:"second_overall"`   // the second run's Report.Overall
	Questions     int     `json:"questions"`        // questions scored in both runs
	MaxDelta      float64 `json:"max_delta"`        // the largest |Δp| of one class between the runs
	MeanDelta     float64 `json:"mean_delta"`       // the mean over the questions of each one's largest |Δp|
	Agree         int     `json:"argmax_agree"`     // questions whose most likely class is the same in both runs
	Agreement     float64 `json:"argmax_agreement"` // Agree / Questions
	MedianDelta   float64 `json:"median_delta"`     // the median over the questions of each one's largest |Δp|: the second run's usual move
	// ClearFlips counts the questions whose most likely class differs although the first run's top two are more
	// than 2 × MedianDelta apart: answers the second run changed that were not near-ties. A question's own |Δp|
	// cannot tell, since a flip moves its top two by at least half their gap.
	ClearFlips int `json:"clear_flips"`
}

// Compare sets report other, of the run called otherName, beside base, of the run called baseName (the first run),
// and returns the comparison; the probabilities compared are the items' (Item.Probs, the mean over the orders asked). It is an
// error when the runs scored no question in common, or one question with different classes.
func Compare(base, other *Report, baseName, otherName string) (*Comparison, error) {
	if base == nil || other == nil {
		return nil, errors.New("eval: Compare needs two reports")
	}
	type key struct {
		line int
		id   string
	}
	theirs := make(map[key]Item, len(other.Items))
	for _, it := range other.Items {
		theirs[key{it.Line, it.Question}] = it
	}
	c := &Comparison{First: baseName, Second: otherName, FirstMetrics: base.Overall, SecondMetrics: other.Overall}
	var sum float64
	var deltas, flipGaps []float64 // every question's largest |Δp|; each flip's top-two gap in the first run
	for _, a := range base.Items {
		b, ok := theirs[key{a.Line, a.Question}]
		if !ok || len(a.Probs) == 0 || len(b.Probs) == 0 {
			continue
		}
		if len(a.Probs) != len(b.Probs) {
			return nil, fmt.Errorf("eval: line %d, question %q: %d classes in %s, %d in %s", a.Line, a.Question,
				len(a.Probs), baseName, len(b.Probs), otherName)
		}
		var d float64
		for k := range a.Probs {
			d = math.Max(d, math.Abs(a.Probs[k]-b.Probs[k]))
		}
		c.Questions++
		sum += d
		deltas = append(deltas, d)
		c.MaxDelta = math.Max(c.MaxDelta, d)
		if argmax(a.Probs) == argmax(b.Probs) {
			c.Agree++
		} else {
			flipGaps = append(flipGaps, topTwoGap(a.Probs))
		}
	}
	if c.Questions == 0 {
		return nil, fmt.Errorf("eval: %s and %s scored no question in common", baseName, otherName)
	}
	c.MeanDelta = sum / float64(c.Questions)
	c.Agreement = float64(c.Agree) / float64(c.Questions)
	slices.Sort(deltas)
	if n := len(deltas); n%2 == 1 {
		c.MedianDelta = deltas[n/2]
	} else {
		c.MedianDelta = (deltas[n/2-1] + deltas[n/2]) / 2
	}
	for _, g := range flipGaps {
		if g > 2*c.MedianDelta {
			c.ClearFlips++
		}
	}
	return c, nil
}

// topTwoGap returns the gap between the two largest of p (0 with fewer than two).
func topTwoGap(p []float64) float64 {
	first, second := math.Inf(-1), math.Inf(-1)
	for _, v := range p {
		switch {
		case v > first:
			first, second = v, first
		case v > second:
			second = v
		}
	}
	if len(p) < 2 {
		return 0
	}
	return first - second
}

// WriteText writes the comparison as a table, one column per run (accuracy, log loss, Brier, ECE, mean top
// probability over all its questions), then the differences between the runs' answers.
func (c *Comparison) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "compare\t%s\t%s\n", c.First, c.Second)
	a, b := c.FirstMetrics, c.SecondMetrics
	fmt.Fprintf(tw, "n\t%d\t%d\n", a.N, b.N)
	for _, r := range []struct {
		name string
		a, b float64
	}{
		{"accuracy", a.Accuracy, b.Accuracy}, {"log loss", a.LogLoss, b.LogLoss}, {"Brier", a.Brier, b.Brier},
		{"ECE", a.ECE, b.ECE}, {"confidence", a.Confidence, b.Confidence},
	} {
		fmt.Fprintf(tw, "%s\t%.4f\t%.4f\n", r.name, r.a, r.b)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s vs %s over %d questions scored in both: max |Δp| %.4f, mean of each question's max %.4f, median %.4f; argmax agreement %d/%d (%.4f); %d of the %d flips where %s's top two are more than twice the median apart\n",
		c.Second, c.First, c.Questions, c.MaxDelta, c.MeanDelta, c.MedianDelta, c.Agree, c.Questions, c.Agreement,
		c.ClearFlips, c.Questions-c.Agree, c.First)
	return err
}
