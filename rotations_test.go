package kev

import (
	"context"
	"errors"
	"fmt"
	"github.com/kevgo/kev/internal/systemone"
	"math"
	"testing"
)

// rotationRequest has one question of each type; names and levels are listed so that the reordered copies can be
// written out by hand below.
func rotationRequest(choice []string, levels []string, withNoul bool) *Request {
	var qs []QuestionEntry
	if withNoul {
		qs = append(qs, NoulWith("billing", "Is the customer asking about a charge?", "About charges", "Not about charges"))
	}
	opts := make([]Option, len(choice))
	for i, name := range choice {
		opts[i] = Opt(name, "the "+name+" team")
	}
	qs = append(qs, Choice("team", "Which team should handle this?", opts...))
	if levels != nil {
		qs = append(qs, Score("urgency", "How urgent is this?", levels...))
	}
	return NewRequest("Order #4417: the shoes arrived late and in the wrong size, and I was charged twice.", qs...)
}

func TestRotateLayout(t *testing.T) {
	req := rotationRequest([]string{"returns", "shipping", "billing", "other"}, []string{"low", "mid", "high"}, true)
	req.Questions = append(req.Questions, Noul("team#1", "A question whose id a derived id would take."))
	rot, err := Rotate(req, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range rot.Request().Questions {
		s := e.ID + ":"
		for _, o := range e.Question.Options {
			s += " " + o.Name
		}
		for _, l := range e.Question.Levels {
			s += " " + l.String()
		}
		got = append(got, s)
	}
	want := []string{"billing:", "team: returns shipping billing other", "urgency: low mid high", "team#1:",
		"team##1: shipping billing other returns", "team#2: billing other returns shipping", "urgency#1: high mid low"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("expanded questions\n got %q\nwant %q", got, want)
	}
	// Probabilities of the expanded request map back by option, not by position.
	probs := [][]float32{{0.3, 0.7}, {0.1, 0.2, 0.3, 0.4}, {0.5, 0.3, 0.2}, {0.9, 0.1},
		{0.2, 0.3, 0.4, 0.1}, {0.3, 0.4, 0.1, 0.2}, {0.25, 0.25, 0.5}}
	orders, err := rot.Orders(probs)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(orders[1]) != fmt.Sprint([][]float32{{0.1, 0.2, 0.3, 0.4}, {0.1, 0.2, 0.3, 0.4}, {0.1, 0.2, 0.3, 0.4}}) {
		t.Errorf("choice orders mapped back: %v", orders[1])
	}
	if fmt.Sprint(orders[2]) != fmt.Sprint([][]float32{{0.5, 0.3, 0.2}, {0.5, 0.25, 0.25}}) {
		t.Errorf("score orders mapped back: %v", orders[2])
	}
	avg, err := rot.Average(probs)
	if err != nil {
		t.Fatal(err)
	}
	if len(avg) != 4 || fmt.Sprint(avg[2]) != fmt.Sprint([]float32{0.5, 0.275, 0.225}) || fmt.Sprint(avg[0]) != "[0.3 0.7]" {
		t.Errorf("averages %v", avg)
	}
	if _, err := rot.Average(probs[:3]); err == nil {
		t.Error("short probability list accepted")
	}
	bad := &Request{State: req.State, Questions: []QuestionEntry{Choice("x", ""), Choice("x", "", Opt("a", ""))}}
	var ve *ValidationError
	if _, err := Rotate(bad, 2); !errors.As(err, &ve) {
		t.Errorf("invalid request: %v, want a *ValidationError", err)
	}
	one, err := Rotate(req, 1)
	if err != nil || len(one.Request().Questions) != len(req.Questions) {
		t.Errorf("n = 1 expanded the request: %v", err)
	}
}

// TestRotationsEqualSeparateRequests: with Options.Rotations = 3, the probabilities are exactly (bit for bit) the
// mean of three separate requests that list the options in the three orders, asked on a predictor without the
// option, and the answers are computed from them.
func TestRotationsEqualSeparateRequests(t *testing.T) {
	set := goldenSets(t)[0]
	ctx := context.Background()
	plain := loadGolden(t, set, Options{})
	rotated := loadGolden(t, set, Options{Rotations: 3})

	req := rotationRequest([]string{"returns", "shipping", "billing", "other"}, []string{"low", "mid", "high"}, true)
	got, err := rotated.Probabilities(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// The three orders, written out: the choice rotated by 0, 1, 2; the score as is and reversed.
	sep := []*Request{
		rotationRequest([]string{"returns", "shipping", "billing", "other"}, []string{"low", "mid", "high"}, true),
		rotationRequest([]string{"shipping", "billing", "other", "returns"}, []string{"high", "mid", "low"}, false),
		rotationRequest([]string{"billing", "other", "returns", "shipping"}, nil, false),
	}
	var choice, score [][]float32
	var noul []float32
	for i, r := range sep {
		ps, err := plain.Probabilities(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		switch i {
		case 0:
			noul = ps[0]
			choice = append(choice, ps[1])
			score = append(score, ps[2])
		case 1:
			c := ps[0]
			choice = append(choice, []float32{c[3], c[0], c[1], c[2]})
			s := ps[1]
			score = append(score, []float32{s[2], s[1], s[0]})
		case 2:
			c := ps[0]
			choice = append(choice, []float32{c[2], c[3], c[0], c[1]})
		}
	}
	mean := func(ls [][]float32) []float32 {
		out := make([]float32, len(ls[0]))
		for j := range out {
			var s float64
			for _, l := range ls {
				s += float64(l[j])
			}
			out[j] = float32(s / float64(len(ls)))
		}
		return out
	}
	want := [][]float32{noul, mean(choice), mean(score)}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rotated probabilities\n got %v\nwant %v", got, want)
	}
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Errorf("question %d option %d: %v, want %v (bit for bit)", i, j, got[i][j], want[i][j])
			}
		}
	}
	// The orders do disagree on this checkpoint, so the test compares something.
	var spread float64
	for j := range choice[0] {
		spread = max(spread, math.Abs(float64(choice[0][j]-choice[1][j])), math.Abs(float64(choice[0][j]-choice[2][j])))
	}
	if spread < 1e-4 {
		t.Errorf("orders agree within %g: the test cannot tell an average from one order", spread)
	}
	// Do answers from the averaged probabilities, under the original ids.
	resp, err := rotated.Do(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := systemone.ToRecord(toSysRequest(req), systemone.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	answers, err := systemone.ToAnswers(rec, want)
	if err != nil {
		t.Fatal(err)
	}
	if g, w := compactAnswers(t, toSysResponse(resp).Answers), compactAnswers(t, answers); g != w {
		t.Errorf("answers\n got %s\nwant %s", g, w)
	}
	// A request that does not validate is refused with the original request's error.
	if _, err := rotated.Do(ctx, &Request{State: req.State}); err == nil {
		t.Error("empty request accepted")
	}
}
