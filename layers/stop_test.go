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
