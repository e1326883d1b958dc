package eval

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/kevgo/kev"
)

func TestCompare(t *testing.T) {
	item := func(line int, q string, expected int, p ...float64) Item {
		return Item{Line: line, Question: q, Type: kev.TypeChoice, Keys: make([]string, len(p)), Expected: expected, Probs: p}
	}
	report := func(items ...Item) *Report {
		r := &Report{Items: items}
		r.summarize()
		return r
	}
	base := report(item(1, "a", 0, 0.7, 0.3), item(1, "b", 1, 0.2, 0.5, 0.3), item(2, "a", 1, 0.45, 0.55))
	for _, c := range []struct {
		name      string
		other     *Report
		questions int
		maxDelta  float64
		meanDelta float64
		agree     int
		median    float64
		clear     int // flips where base's top two are more than 2 × median apart
		err       string
	}{
		{name: "same", other: base, questions: 3, agree: 3},
		{name: "one moved", other: report(item(1, "a", 0, 0.7, 0.3), item(1, "b", 1, 0.23, 0.47, 0.3),
			item(2, "a", 1, 0.6, 0.4)), questions: 3, maxDelta: 0.15, meanDelta: (0.03 + 0.15) / 3, agree: 2,
			median: 0.03, clear: 1},
		{name: "a near tie flipped", other: report(item(1, "a", 0, 0.55, 0.45), item(1, "b", 1, 0.2, 0.5, 0.3),
			item(2, "a", 1, 0.6, 0.4)), questions: 3, maxDelta: 0.15, meanDelta: 0.1, agree: 2, median: 0.15},
		{name: "a line skipped", other: report(item(1, "a", 0, 0.4, 0.6), item(1, "b", 1, 0.2, 0.5, 0.3)),
			questions: 2, maxDelta: 0.3, meanDelta: 0.15, agree: 1, median: 0.15, clear: 1},
		{name: "classes differ", other: report(item(1, "a", 0, 0.7, 0.2, 0.1)), err: "2 classes in fp32, 3 in bf16"},
		{name: "nothing in common", other: report(item(3, "a", 0, 0.5, 0.5)), err: "no question in common"},
		{name: "no report", other: nil, err: "two reports"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Compare(base, c.other, "fp32", "bf16")
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
			if got.Questions != c.questions || !near(got.MaxDelta, c.maxDelta) || !near(got.MeanDelta, c.meanDelta) ||
				got.Agree != c.agree || !near(got.Agreement, float64(c.agree)/float64(c.questions)) ||
				!near(got.MedianDelta, c.median) || got.ClearFlips != c.clear {
				t.Errorf("%+v, want %d questions, max |Δp| %v, mean %v, median %v, %d agreeing, %d clear flips", got,
					c.questions, c.maxDelta, c.meanDelta, c.median, c.agree, c.clear)
			}
			if got.First != "fp32" || got.Second != "bf16" || got.FirstMetrics != base.Overall || got.SecondMetrics != c.other.Overall {
				t.Errorf("names or metrics: %+v", got)
			}
		})
	}
}

// TestCompareText checks the comparison's table and that a report's text ends with it.
func TestCompareText(t *testing.T) {
	c := &Comparison{First: "float32", Second: "bfloat16", FirstMetrics: Metrics{N: 4, Accuracy: 0.75, LogLoss: 0.5, Brier: 0.25},
		SecondMetrics: Metrics{N: 4, Accuracy: 0.5, LogLoss: 0.625, Brier: 0.3125}, Questions: 4, MaxDelta: 0.125,
		MeanDelta: 0.0625, Agree: 3, Agreement: 0.75, MedianDelta: 0.05, ClearFlips: 1}
	var buf bytes.Buffer
	if err := c.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"compare     float32  bfloat16\n", "accuracy    0.7500   0.5000\n",
		"log loss    0.5000   0.6250\n", "Brier       0.2500   0.3125\n",
		"bfloat16 vs float32 over 4 questions scored in both: max |Δp| 0.1250, mean of each question's max 0.0625, median 0.0500; argmax agreement 3/4 (0.7500); 1 of the 1 flips where float32's top two are more than twice the median apart\n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, buf.String())
		}
	}
	rep := &Report{Items: []Item{{Line: 1, Question: "q", Type: kev.TypeNoul, Keys: []string{"false", "true"}, Probs: []float64{0.5, 0.5}}}}
	rep.summarize()
	rep.Compare = c
	buf.Reset()
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(buf.String(), "more than twice the median apart\n") || !strings.Contains(buf.String(), "overall") {
		t.Errorf("report text does not end with the comparison:\n%s", buf.String())
	}
}
