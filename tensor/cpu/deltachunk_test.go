package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/backendtest"
)

// TestConformanceManyThreads runs the suite with more goroutines than the
// delta rule has jobs, so its split form (chunks prepared in parallel
// before the state pass) is covered.
func TestConformanceManyThreads(t *testing.T) {
	backendtest.RunAll(t, &Backend{Threads: 64}, tolerance)
}

// deltaCase is a batch of delta rule segments with random inputs.
type deltaCase struct {
	c             tensor.DeltaConfig
	qkv, g, beta  []float32
	state         []float32
	segs          []tensor.Segment
	width, n, hvd int
}

func newDeltaCase(r *rand.Rand, c tensor.DeltaConfig, segs []tensor.Segment) *deltaCase {
	d := &deltaCase{c: c, segs: segs, width: 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim, hvd: c.ValueHeads * c.ValueDim}
	for _, s := range segs {
		d.n += s.Len
	}
	d.qkv = randFloats(r, d.n*d.width)
	d.g, d.beta = make([]float32, d.n*c.ValueHeads), make([]float32, d.n*c.ValueHeads)
	for i := range d.g {
		d.g[i] = -0.4 * r.Float32()
		d.beta[i] = 0.1 + 0.8*r.Float32()
	}
	d.state = randFloats(r, c.ValueHeads*c.KeyDim*c.ValueDim)
	for i := range d.state {
		d.state[i] *= 0.1
	}
	return d
}

// run returns the outputs and the kept states (concatenated in segment
// order) of GatedDeltaRuleSegments.
func (d *deltaCase) run(t *testing.T, b *Backend) (out, kept []float32) {
	t.Helper()
	up := func(shape []int, x []float32) tensor.Tensor {
		y, err := b.FromFloat32(shape, x)
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	hv := d.c.ValueHeads
	st := []tensor.Tensor{up([]int{hv, d.c.KeyDim, d.c.ValueDim}, d.state)}
	o, ks, err := b.GatedDeltaRuleSegments(up([]int{d.n, d.width}, d.qkv), up([]int{d.n, hv}, d.g), up([]int{d.n, hv}, d.beta), st, d.segs, d.c)
	if err != nil {
		t.Fatal(err)
	}
	if out, err = b.ToHost(o); err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k == nil {
			continue
		}
		h, err := b.ToHost(k)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, h...)
	}
	return out, kept
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] = %v, want %v bit for bit", what, i, got[i], want[i])
		}
	}
}

// TestDeltaRuleChunksInvariant checks that the chunked delta rule at the
// model's head size gives the same bits whatever the thread count (the
// whole-job and split forms) and for a segment alone or beside others, and
// that it stays near the recurrent form.
func TestDeltaRuleChunksInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := tensor.DeltaConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 128, ValueDim: 64, Chunk: 64}
	segs := []tensor.Segment{
		{Len: 200, Keep: true},
		{Len: 5, From: tensor.FromPrefix, Index: 0, Keep: true},
		{Len: 64, From: tensor.FromSegment, Index: 0, Keep: true},
		{Len: 71, From: tensor.FromPrefix, Index: 0},
	}
	d := newDeltaCase(r, c, segs)
	wantOut, wantKept := d.run(t, &Backend{Threads: 1})
	for _, threads := range []int{2, 3, 16, 64} {
		o, k := d.run(t, &Backend{Threads: threads})
		sameBits(t, "outputs", o, wantOut)
		sameBits(t, "states", k, wantKept)
	}
	// Segment 3 alone.
	start := 200 + 5 + 64
	alone := &deltaCase{c: c, segs: []tensor.Segment{{Len: 71, From: tensor.FromPrefix, Keep: true}}, width: d.width, n: 71,
		qkv: d.qkv[start*d.width:], g: d.g[start*c.ValueHeads:], beta: d.beta[start*c.ValueHeads:], state: d.state}
	for _, threads := range []int{1, 8} {
		o, _ := alone.run(t, &Backend{Threads: threads})
		sameBits(t, "segment alone", o, wantOut[start*d.hvd:])
	}
	// The recurrent form, within fp32 rounding.
	rc := *d
	rc.c.Chunk = 0
	ro, rk := rc.run(t, &Backend{Threads: 2})
	for name, p := range map[string][2][]float32{"outputs": {wantOut, ro}, "states": {wantKept, rk}} {
		var scale float64
		for _, v := range p[1] {
			scale = max(scale, math.Abs(float64(v)))
		}
		for i := range p[0] {
			if !near(p[0][i], float64(p[1][i]), scale, 2e-5) {
				t.Fatalf("%s[%d]: chunked %v, recurrent %v (max |recurrent| %v)", name, i, p[0][i], p[1][i], scale)
			}
		}
	}
}

// TestDeltaRuleColumnBlocks checks that the split form's state passes over
// blocks of the state's columns (two or four blocks of a value head here)
// give the bits of whole heads on one goroutine.
func TestDeltaRuleColumnBlocks(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	c := tensor.DeltaConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 64, ValueDim: 128, Chunk: 64}
	d := newDeltaCase(r, c, []tensor.Segment{{Len: 150, From: tensor.FromPrefix, Keep: true}})
	wantOut, wantKept := d.run(t, &Backend{Threads: 1})
	for _, threads := range []int{3, 8} {
		o, k := d.run(t, &Backend{Threads: threads})
		sameBits(t, "outputs", o, wantOut)
		sameBits(t, "states", k, wantKept)
	}
}
