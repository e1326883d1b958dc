package layers

import (
	"errors"
	"slices"
	"testing"

	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// TestForwardStop checks Batch.Stop: it is asked before every layer, a pass
// it stops runs no layer after, Forward returns ErrStopped, and the model
// answers the same batch afterwards as it did before, bit for bit.
func TestForwardStop(t *testing.T) {
	r := newRand(t)
	c := smallConfig()
	w := randomWeights(r, c, true)
	for _, bc := range []struct {
		name string
		b    tensor.Backend
	}{{"batched", cpu.New()}, {"fallback", plain{cpu.New()}}} {
		t.Run(bc.name, func(t *testing.T) {
			m, err := New(bc.b, w)
			if err != nil {
				t.Fatal(err)
			}
			bt := batchCase(r, c.VocabSize, cachedStates(t, m, r))
			hidden := func() []float32 {
				t.Helper()
				out, err := m.Forward(bt)
				if err != nil {
					t.Fatal(err)
				}
				defer out.Free()
				for _, s := range out.States {
					s.Free()
				}
				var all []float32
				for _, h := range out.Hidden {
					all = append(all, host(t, bc.b, h)...)
				}
				return all
			}
			before := hidden()

			var asked []int
			bt.Stop = func(layer int) bool {
				asked = append(asked, layer)
				return layer == 1
			}
			out, err := m.Forward(bt)
			if !errors.Is(err, ErrStopped) || out != nil {
				t.Fatalf("Forward with Stop at layer 1 = %v, %v; want nil, ErrStopped", out, err)
			}
			if !slices.Equal(asked, []int{0, 1}) {
				t.Errorf("Stop asked at layers %v, want [0 1]: the pass stops at the first true", asked)
			}

			asked = nil
			bt.Stop = func(layer int) bool {
				asked = append(asked, layer)
				return false
			}
			if after := hidden(); !equal(after, before) {
				t.Error("the batch's hidden states after a stopped pass differ from those before it")
			}
			if len(asked) < c.NumLayers || len(asked)%c.NumLayers != 0 {
				t.Errorf("Stop asked %d times over whole passes, want a multiple of the %d layers", len(asked), c.NumLayers)
			}
		})
	}
}

// TestForwardInsideStop runs a second batch from the Stop of a first one's
// pass, between two of its layers, as a short batch that preempts a long pass
// does: both give the hidden states they give alone, bit for bit, the inner
// batch's Stop is asked for its own layers only, and the outer pass goes on
// asking its own Stop after the inner one returned.
func TestForwardInsideStop(t *testing.T) {
	r := newRand(t)
	c := smallConfig()
	w := randomWeights(r, c, true)
	for _, bc := range []struct {
		name string
		b    tensor.Backend
	}{{"batched", cpu.New()}, {"fallback", plain{cpu.New()}}} {
		t.Run(bc.name, func(t *testing.T) {
			m, err := New(bc.b, w)
			if err != nil {
				t.Fatal(err)
			}
			outer := batchCase(r, c.VocabSize, cachedStates(t, m, r))
			inner := batchCase(r, c.VocabSize, cachedStates(t, m, r))
			hidden := func(bt *Batch) []float32 {
				t.Helper()
				out, err := m.Forward(bt)
				if err != nil {
					t.Fatal(err)
				}
				defer out.Free()
				for _, s := range out.States {
					s.Free()
				}
				var all []float32
				for _, h := range out.Hidden {
					all = append(all, host(t, bc.b, h)...)
				}
				return all
			}
			wantOuter, wantInner := hidden(outer), hidden(inner)

			var outerAsked, innerAsked []int
			var gotInner []float32
			inner.Stop = func(layer int) bool {
				innerAsked = append(innerAsked, layer)
				return false
			}
			outer.Stop = func(layer int) bool {
				outerAsked = append(outerAsked, layer)
				if layer == 1 && gotInner == nil {
					gotInner = hidden(inner)
				}
				return false
			}
			if got := hidden(outer); !equal(got, wantOuter) {
				t.Error("the outer batch's hidden states differ from its own alone")
			}
			if !equal(gotInner, wantInner) {
				t.Error("the inner batch's hidden states differ from its own alone")
			}
			if len(outerAsked) == 0 || len(outerAsked)%c.NumLayers != 0 || len(innerAsked)%c.NumLayers != 0 ||
				!slices.Contains(outerAsked, c.NumLayers-1) {
				t.Errorf("outer Stop asked at %v, inner at %v: want whole passes each", outerAsked, innerAsked)
			}
		})
	}
}
