package kevtest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kevgo/kev"
)

// TestFilesMatchRepository keeps the bundled checkpoint equal, file for file, to the repository's golden tiny-a
// fixture, whose reference answers the golden tests check.
func TestFilesMatchRepository(t *testing.T) {
	for _, sub := range []string{CheckpointDir, BaseDir} {
		orig := filepath.Join("..", "testdata", "golden", "tiny-a", sub)
		entries, err := os.ReadDir(orig)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range entries {
			want = append(want, e.Name())
			got, err := fs.ReadFile(Files(), path.Join(sub, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			w, err := os.ReadFile(filepath.Join(orig, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, w) {
				t.Errorf("%s/%s differs from %s", sub, e.Name(), filepath.Join(orig, e.Name()))
			}
		}
		embedded, err := fs.ReadDir(Files(), sub)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range embedded {
			got = append(got, e.Name())
		}
		if !slices.Equal(got, want) {
			t.Errorf("bundled %s holds %q, the repository's %q", sub, got, want)
		}
	}
}

// TestNewPredictor loads the bundled checkpoint for a test and checks its answers against the golden ones (those
// of ExamplePredictor_Ask in package kev).
func TestNewPredictor(t *testing.T) {
	p := NewPredictor(t, kev.Options{})
	answers, err := p.Ask(context.Background(), "My running shoes arrived in the wrong size. Also I was charged twice.",
		kev.Noul("billing", "Is the customer asking about a charge?"),
		kev.Choice("department", "Which team should handle this?",
			kev.Opt("returns", "Exchanges, refunds, wrong or damaged items"),
			kev.Opt("shipping", "Delivery status, delays, lost packages"),
			kev.Opt("billing", "Charges, invoices, payment problems")))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := kev.Lookup(answers, "billing"); a.Noul != 0.4406 {
		t.Errorf("billing %v, want noul 0.4406", a)
	}
	if a, _ := kev.Lookup(answers, "department"); a.Choice != "shipping" || a.Confidence != 0.2462 {
		t.Errorf("department %v, want shipping at confidence 0.2462", a)
	}
}

// TestFakeErrors checks that probabilities that do not fit their question are a *ProbsError, and that a cancelled
// context is honoured.
func TestFakeErrors(t *testing.T) {
	for _, probs := range [][]float64{{0.5, 0.5}, {1.5}} {
		f := &Fake{Probs: map[string][]float64{"q": probs}}
		_, err := f.Ask(context.Background(), "x", kev.Noul("q", "?"))
		var pe *ProbsError
		if !errors.As(err, &pe) || pe.ID != "q" {
			t.Errorf("noul with %v: %v, want a *ProbsError", probs, err)
		}
	}
	f := &Fake{Probs: map[string][]float64{"q": {0.5, 0.5}}}
	_, err := f.Ask(context.Background(), "x", kev.Choice("q", "?", kev.Opt("a", ""), kev.Opt("b", ""), kev.Opt("c", "")))
	var pe *ProbsError
	if !errors.As(err, &pe) || pe.Want != 3 || pe.Got != 2 {
		t.Errorf("choice of 3 with 2 probabilities: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Ask(ctx, "x", kev.Noul("n", "?")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if n := len(f.Requests()); n != 0 {
		t.Errorf("%d requests recorded, want none answered", n)
	}
}
