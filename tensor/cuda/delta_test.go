//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
)

// deltaInputs draws a delta-rule problem: bf16 q/k/v rows (with corr, every key head's k rows are one shared row
// plus 5 % noise and β is near 1, the ill-conditioned end of the triangular solve), log decays −u² with one −9,
// β in [0, 1) and a cached fp32 state in [−0.5, 0.5).
func deltaInputs(r *rand.Rand, n, hk, hv, dk, dv int, corr bool) (x []uint16, g, beta, s0 []float32) {
	width := 2*hk*dk + hv*dv
	x = randBF16(r, n*width, 1)
	if corr {
		base := randVals(r, hk*dk, 1)
		for t := range n {
			for i := range hk * dk {
				j := t*width + hk*dk + i
				x[j] = half.BF16FromF32(base[i] + 0.05*half.BF16ToF32(x[j]))
			}
		}
	}
	g = make([]float32, n*hv)
	beta = make([]float32, n*hv)
	for i := range g {
		u := r.Float64()
		g[i] = float32(-u * u)
		beta[i] = float32(r.Float64())
		if corr {
			beta[i] = float32(0.9 + 0.1*r.Float64())
		}
	}
	g[len(g)/2] = -9
	s0 = make([]float32, hv*dk*dv)
	for i := range s0 {
		s0[i] = float32(r.Float64() - 0.5)
	}
	return x, g, beta, s0
}

// TestDeltaRuleOne checks the one-pass register kernels (delta_rule_one_dk*) against the one-warp fp32 recurrent kernel
// on fresh random inputs: Kev-4B heads (16 key, 32 value heads of 128) and odd shapes (d_k 64 and 32, GVA 3, value
// widths not a multiple of 32), segments of 1, 7, 40, 64 and 65 tokens (one and two chunks) and 130, from zero and
// from a cached state, several segments continuing one state (question rows), ill-conditioned keys. The two-pass
// register kernel is compared too, so the log shows both errors side by side.
func TestDeltaRuleOne(t *testing.T) {
	cases := []struct {
		hk, hv, dk, dv int
		lens           []int
		state, corr    bool
	}{
		{16, 32, 128, 128, []int{1}, true, false},
		{16, 32, 128, 128, []int{7}, false, false},
		{16, 32, 128, 128, []int{40}, true, false},
		{16, 32, 128, 128, []int{64}, true, false},
		{16, 32, 128, 128, []int{65}, true, false},
		{16, 32, 128, 128, []int{65}, false, false},
		{16, 32, 128, 128, []int{130}, true, true},
		{16, 32, 128, 128, []int{40, 40, 40, 40, 40, 40}, true, false},
		{16, 32, 128, 128, []int{23, 41, 60, 1, 7, 64, 65}, true, false},
		{16, 32, 128, 128, []int{40, 33}, true, true},
		{2, 6, 64, 40, []int{1, 7, 40, 64, 65}, true, false},
		{2, 6, 64, 96, []int{65}, false, false},
		{1, 3, 32, 32, []int{1, 7, 40, 64, 65}, true, false},
	}
	r := newRand(t)
	for _, c := range cases {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d/lens=%v/state=%v/corr=%v", c.hk, c.hv, c.dk, c.dv, c.lens, c.state, c.corr), func(t *testing.T) {
			_, starts, ls, n := segInts(c.lens)
			xs, gs, bs, ss := deltaInputs(r, n, c.hk, c.hv, c.dk, c.dv, c.corr)
			single := len(c.lens) == 1
			on, sn := n*c.hv*c.dv*4, c.hv*c.dk*c.dv*4
			var outs, finals [3][]float32 // rec, reg, one
			do(t, func(q *Queue) error {
				X, G, B := upload(t, q, bytesOf16(xs), 0), upload(t, q, bytesOf32(gs), 0), upload(t, q, bytesOf32(bs), 0)
				St, Ls := upload(t, q, starts, 0), upload(t, q, ls, 0)
				var S0 Buffer
				if c.state {
					S0 = upload(t, q, bytesOf32(ss), 0)
				}
				defer func() { freeAll(q, []Buffer{X, G, B, St, Ls, S0}) }()
				for k := range 3 {
					O := poisoned(t, q, on)
					var F Buffer
					if single {
						F = poisoned(t, q, sn)
					}
					a := DeltaRule{O: Operand{O, tensor.F32}, Final: F, QKV: Operand{X, tensor.BF16}, G: Operand{G, tensor.F32},
						Beta: Operand{B, tensor.F32}, S0: Operand{S0, tensor.F32}, SegStart: St, SegLen: Ls, Segs: len(c.lens),
						N: n, HK: c.hk, HV: c.hv, DK: c.dk, DV: c.dv, simple: k == 0, reg: k == 1}
					if err := q.DeltaRule(a); err != nil {
						return err
					}
					outs[k] = from32(download(t, q, O, on))
					if single {
						finals[k] = from32(download(t, q, F, sn))
					}
					q.Free(O)
					q.Free(F)
				}
				return nil
			})
			compareF32(t, "o/reg", outs[1], outs[0], 1e-4)
			compareF32(t, "o/one", outs[2], outs[0], 1e-4)
			if single {
				compareF32(t, "final/reg", finals[1], finals[0], 1e-4)
				compareF32(t, "final/one", finals[2], finals[0], 1e-4)
			}
		})
	}
}

// TestDeltaSegmentsOne runs GatedDeltaRuleSegments with the one-pass and the two-pass register kernels on the same inputs
// (new segments, kept states, rows continuing cached states and rows continuing new segments of the call) and
// checks outputs and kept states against each other.
func TestDeltaSegmentsOne(t *testing.T) {
	gdnOn = false // the register kernels only
	defer func() { gdnOn = true }()
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	segs := []tensor.Segment{
		{Len: 130, From: tensor.FromZero, Keep: true},
		{Len: 40, From: tensor.FromPrefix, Index: 1},
		{Len: 9, From: tensor.FromSegment, Index: 0},
		{Len: 64, From: tensor.FromZero},
		{Len: 0, From: tensor.FromPrefix, Index: 0, Keep: true},
		{Len: 65, From: tensor.FromSegment, Index: 3, Keep: true},
		{Len: 1, From: tensor.FromPrefix, Index: 0},
		{Len: 40, From: tensor.FromSegment, Index: 0},
		{Len: 40, From: tensor.FromPrefix, Index: 1, Keep: true},
	}
	n := 0
	for _, s := range segs {
		n += s.Len
	}
	for _, c := range []tensor.DeltaConfig{{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}, {KeyHeads: 2, ValueHeads: 6, KeyDim: 64, ValueDim: 40}} {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d", c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim), func(t *testing.T) {
			xs, gs, bs, _ := deltaInputs(r, n, c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim, false)
			x, err := gb.FromBits(tensor.BF16, []int{n, 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim}, xs)
			if err != nil {
				t.Fatal(err)
			}
			g, err := gb.FromFloat32([]int{n, c.ValueHeads}, gs)
			if err != nil {
				t.Fatal(err)
			}
			beta, err := gb.FromFloat32([]int{n, c.ValueHeads}, bs)
			if err != nil {
				t.Fatal(err)
			}
			var states []tensor.Tensor
			for range 2 {
				st, err := gb.FromFloat32([]int{c.ValueHeads, c.KeyDim, c.ValueDim}, randVals(r, c.ValueHeads*c.KeyDim*c.ValueDim, 0.5))
				if err != nil {
					t.Fatal(err)
				}
				states = append(states, st)
			}
			var outs [2]tensor.Tensor
			var kept [2][]tensor.Tensor
			for k, one := range []bool{false, true} {
				deltaOne = one
				outs[k], kept[k], err = gb.GatedDeltaRuleSegments(x, g, beta, states, segs, c)
				deltaOne = true
				if err != nil {
					t.Fatal(err)
				}
			}
			// o is stored as bf16: the two kernels' fp32 sums differ in the last bits, which can move a value
			// across a bf16 rounding boundary (one bf16 step is at most 2⁻⁷ relative); the fp32 states must agree.
			compareF32(t, "o", f32s(t, gb, outs[1]), f32s(t, gb, outs[0]), 1.0/128)
			for i := range segs {
				if (kept[0][i] == nil) != (kept[1][i] == nil) {
					t.Fatalf("segment %d: kept %v by the two-pass kernel, %v by the one-pass one", i, kept[0][i] != nil, kept[1][i] != nil)
				}
				if kept[0][i] != nil {
					compareF32(t, fmt.Sprintf("state%d", i), f32s(t, gb, kept[1][i]), f32s(t, gb, kept[0][i]), 1e-4)
				}
			}
			gb.Free(append(append(append(states, kept[0]...), kept[1]...), x, g, beta, outs[0], outs[1])...)
		})
	}
}

// f32s reads a tensor back as float32 values.
func f32s(t *testing.T, b *Backend, x tensor.Tensor) []float32 {
	t.Helper()
	v, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// BenchmarkDeltaRows times the delta rule of one Kev-4B layer (16 key and 32 value heads of 128, bf16 input) with
// the one-pass and the two-pass register kernels side by side: question rows of 40 tokens continuing one cached
// state (2, 5 and 6 rows), single segments of 64 and 512 tokens. Device time, median of 20 launches.
func BenchmarkDeltaRows(b *testing.B) {
	const hk, hv, dk, dv = 16, 32, 128, 128
	const width = 2*hk*dk + hv*dv
	rows := func(k, l int) []int {
		v := make([]int, k)
		for i := range v {
			v[i] = l
		}
		return v
	}
	cases := []struct {
		name string
		lens []int
	}{
		{"rows 6x40", rows(6, 40)},
		{"rows 5x40", rows(5, 40)},
		{"rows 2x40", rows(2, 40)},
		{"rows 6x60", rows(6, 60)},
		{"N=64", []int{64}},
		{"N=512", []int{512}},
	}
	for _, c := range cases {
		for _, kind := range []string{"one", "reg"} {
			name := fmt.Sprintf("%s/%s", c.name, kind)
			b.Run(name, func(b *testing.B) {
				_, starts, ls, n := segInts(c.lens)
				var sec float64
				err := dev.Do(func(q *Queue) error {
					bufs, err := benchBuffers(q, 0.05, int64(n)*hv*dv, int64(n)*width, 2*hv*dk*dv, 2*hv*dk*dv)
					if err != nil {
						return err
					}
					defer freeAll(q, bufs)
					st, ln := upload(b, q, starts, 0), upload(b, q, ls, 0)
					gs := make([]float32, n*hv)
					for i := range gs {
						gs[i] = -0.05
					}
					gb := upload(b, q, bytesOf32(gs), 0)
					defer freeAll(q, []Buffer{st, ln, gb})
					var final Buffer
					if len(c.lens) == 1 {
						final = bufs[3]
					}
					sec, err = medianTime(q, 20, func(int) error {
						return q.DeltaRule(DeltaRule{O: bf(bufs[0]), Final: final, QKV: bf(bufs[1]), G: Operand{gb, tensor.F32},
							Beta: Operand{gb, tensor.F32}, S0: Operand{bufs[2], tensor.F32}, SegStart: st, SegLen: ln,
							Segs: len(c.lens), N: n, HK: hk, HV: hv, DK: dk, DV: dv, reg: kind == "reg"})
					})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(sec*1e6, "us")
				fmt.Printf("KEVBENCH delta %q us=%.1f\n", name, sec*1e6)
			})
		}
	}
}
