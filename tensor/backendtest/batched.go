package backendtest

import (
	"fmt"
	"math"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// batched returns the backend's tensor.Batched, skipping the test when the
// backend lacks it.
func (s *suite) batched(t *testing.T) tensor.Batched {
	t.Helper()
	bb, ok := s.b.(tensor.Batched)
	if !ok {
		t.Skipf("%s does not implement tensor.Batched", s.b.Name())
	}
	return bb
}

// segCase is a list of segments over a list of prefixes of given lengths.
// It mixes new segments, segments continuing prefixes of different lengths,
// segments continuing new ones (one shorter than a convolution's history),
// an empty segment, and a prefix nothing continues.
func segCase() (prefixLens []int, segs []tensor.Segment) {
	return []int{5, 2, 9, 3}, []tensor.Segment{
		{Len: 6, From: tensor.FromZero, Keep: true},
		{Len: 3, From: tensor.FromPrefix, Index: 0},
		{Len: 2, From: tensor.FromSegment, Index: 0},
		{Len: 1, From: tensor.FromPrefix, Index: 2, Keep: true},
		{Len: 2, From: tensor.FromZero},
		{Len: 4, From: tensor.FromPrefix, Index: 1},
		{Len: 3, From: tensor.FromSegment, Index: 4, Keep: true},
		{Len: 0, From: tensor.FromPrefix, Index: 0},
		{Len: 1, From: tensor.FromSegment, Index: 0},
		{Len: 5, From: tensor.FromPrefix, Index: 2},
	}
}

func segRows(segs []tensor.Segment) (starts []int, n int) {
	for _, sg := range segs {
		starts = append(starts, n)
		n += sg.Len
	}
	return starts, n
}

func (s *suite) testAttentionSegments(t *testing.T) {
	bb := s.batched(t)
	prefixLens, segs := segCase()
	starts, n := segRows(segs)
	for ci, c := range []tensor.AttentionConfig{{Heads: 6, KVHeads: 2, HeadDim: 8}, {Heads: 4, KVHeads: 1, HeadDim: 16}, {Heads: 3, KVHeads: 3, HeadDim: 5}} {
		for name, g := range s.gens() {
			c.Scale = float32(1 / math.Sqrt(float64(c.HeadDim)))
			qw, kvw := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
			qd, kd, vd := g(n*qw, 2), s.random(n*kvw, 2), s.random(n*kvw, 1)
			var kps, vps []tensor.Tensor
			var kpd, vpd [][]float32
			for _, p := range prefixLens {
				kpd, vpd = append(kpd, s.random(p*kvw, 2)), append(vpd, s.random(p*kvw, 1))
				kps = append(kps, s.up(t, []int{p, kvw}, kpd[len(kpd)-1]))
				vps = append(vps, s.up(t, []int{p, kvw}, vpd[len(vpd)-1]))
			}
			want := make([]float64, 0, n*qw)
			for i, sg := range segs {
				lo, hi := starts[i], starts[i]+sg.Len
				var kp, vp []float32
				switch sg.From {
				case tensor.FromPrefix:
					kp, vp = kpd[sg.Index], vpd[sg.Index]
				case tensor.FromSegment:
					j := sg.Index
					kp, vp = kd[starts[j]*kvw:(starts[j]+segs[j].Len)*kvw], vd[starts[j]*kvw:(starts[j]+segs[j].Len)*kvw]
				}
				want = append(want, attentionRef(f64(qd[lo*qw:hi*qw]), f64(kd[lo*kvw:hi*kvw]), f64(vd[lo*kvw:hi*kvw]),
					f64(kp), f64(vp), len(kp)/kvw, []int{sg.Len}, c)...)
			}
			s.poison(t, n*qw)
			y, err := bb.AttentionSegments(s.up(t, []int{n, qw}, qd), s.up(t, []int{n, kvw}, kd), s.up(t, []int{n, kvw}, vd), kps, vps, segs, c)
			if err != nil {
				t.Fatal(err)
			}
			s.check(t, fmt.Sprintf("case%d/%s", ci, name), y, []int{n, qw}, want, s.tol.F32)
		}
	}
}

// convRef runs the causal convolution with SiLU of one segment after hist
// [K−1, C] and returns its outputs and its last K−1 inputs.
func convRef(x, w, hist []float64, ch, kw int) (y, last []float64) {
	seq := append(append([]float64(nil), hist...), x...)
	l := len(x) / ch
	y = make([]float64, l*ch)
	for t := 0; t < l; t++ {
		for c := 0; c < ch; c++ {
			var acc float64
			for j := 0; j < kw; j++ {
				acc += w[c*kw+j] * seq[(t+j)*ch+c]
			}
			y[t*ch+c] = silu(acc)
		}
	}
	return y, seq[len(seq)-(kw-1)*ch:]
}

func (s *suite) testConvSegments(t *testing.T) {
	bb := s.batched(t)
	prefixLens, segs := segCase()
	starts, n := segRows(segs)
	for ci, tc := range []struct{ ch, kw int }{{7, 4}, {5, 3}, {3, 1}} {
		for name, g := range s.gens() {
			xd, wd := g(n*tc.ch, 2), s.random(tc.ch*tc.kw, 1)
			hsize := (tc.kw - 1) * tc.ch
			var states []tensor.Tensor
			var sd [][]float32
			for range prefixLens {
				sd = append(sd, s.random(hsize, 2))
				states = append(states, s.up(t, []int{tc.kw - 1, tc.ch}, sd[len(sd)-1]))
			}
			zero := make([]float64, hsize)
			want := make([]float64, 0, n*tc.ch)
			lasts := make([][]float64, len(segs))
			// Segments continuing another come after it in segCase, except
			// the FromSegment ones, whose sources start FromZero: compute
			// those sources first.
			for _, pass := range []bool{false, true} {
				for i, sg := range segs {
					if (sg.From == tensor.FromSegment) != pass {
						continue
					}
					hist := zero
					switch sg.From {
					case tensor.FromPrefix:
						hist = f64(sd[sg.Index])
					case tensor.FromSegment:
						hist = lasts[sg.Index]
					}
					x := f64(xd[starts[i]*tc.ch : (starts[i]+sg.Len)*tc.ch])
					_, lasts[i] = convRef(x, f64(wd), hist, tc.ch, tc.kw)
				}
			}
			for i, sg := range segs {
				hist := zero
				switch sg.From {
				case tensor.FromPrefix:
					hist = f64(sd[sg.Index])
				case tensor.FromSegment:
					hist = lasts[sg.Index]
				}
				y, _ := convRef(f64(xd[starts[i]*tc.ch:(starts[i]+sg.Len)*tc.ch]), f64(wd), hist, tc.ch, tc.kw)
				want = append(want, y...)
			}
			s.poison(t, n*tc.ch, hsize)
			y, kept, err := bb.CausalConv1dSiLUSegments(s.up(t, []int{n, tc.ch}, xd), s.up(t, []int{tc.ch, tc.kw}, wd), states, segs)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("case%d/%s", ci, name)
			s.check(t, what+"/y", y, []int{n, tc.ch}, want, s.tol.F32)
			if len(kept) != len(segs) {
				t.Fatalf("%s: %d kept states for %d segments", what, len(kept), len(segs))
			}
			for i, sg := range segs {
				if !sg.Keep {
					if kept[i] != nil {
						t.Errorf("%s: segment %d: a state without Keep", what, i)
					}
					continue
				}
				s.check(t, fmt.Sprintf("%s/state%d", what, i), kept[i], []int{tc.kw - 1, tc.ch}, lasts[i], 0)
			}
		}
	}
}

func (s *suite) testDeltaRuleSegments(t *testing.T) {
	bb := s.batched(t)
	prefixLens, segs := segCase()
	segs[4].Len = 70 // a new segment over a 64-token chunk, continued by segment 6
	starts, n := segRows(segs)
	for ci, tc := range []struct{ hk, hv, dk, dv int }{{2, 6, 4, 3}, {1, 3, 5, 7}, {2, 2, 8, 8}} {
		for name, gn := range s.gens() {
			width := 2*tc.hk*tc.dk + tc.hv*tc.dv
			size := tc.hv * tc.dk * tc.dv
			xd := gn(n*width, 2)
			gd := s.random(n*tc.hv, 1)
			for i := range gd {
				gd[i] = -gd[i] * gd[i]
			}
			gd[len(gd)/3] = -9
			bd := s.random(n*tc.hv, 0.5)
			for i := range bd {
				bd[i] += 0.5
			}
			var states []tensor.Tensor
			var sd [][]float32
			for range prefixLens {
				sd = append(sd, s.random(size, 1))
				states = append(states, s.up(t, []int{tc.hv, tc.dk, tc.dv}, sd[len(sd)-1]))
			}
			ref := tensor.DeltaConfig{KeyHeads: tc.hk, ValueHeads: tc.hv, KeyDim: tc.dk, ValueDim: tc.dv}
			outs, finals := make([][]float64, len(segs)), make([][]float64, len(segs))
			for _, pass := range []bool{false, true} {
				for i, sg := range segs {
					if (sg.From == tensor.FromSegment) != pass {
						continue
					}
					var s0 []float64
					switch sg.From {
					case tensor.FromPrefix:
						s0 = f64(sd[sg.Index])
					case tensor.FromSegment:
						s0 = finals[sg.Index]
					}
					lo, hi := starts[i], starts[i]+sg.Len
					o, f := deltaRef(f64(xd[lo*width:hi*width]), f64(gd[lo*tc.hv:hi*tc.hv]), f64(bd[lo*tc.hv:hi*tc.hv]), s0, []int{sg.Len}, ref)
					outs[i], finals[i] = o, f[0]
				}
			}
			var want []float64
			for _, o := range outs {
				want = append(want, o...)
			}
			for _, chunk := range []int{0, 4, 64} {
				c := ref
				c.Chunk = chunk
				s.poison(t, n*tc.hv*tc.dv, size)
				o, kept, err := bb.GatedDeltaRuleSegments(s.up(t, []int{n, width}, xd), s.up(t, []int{n, tc.hv}, gd), s.up(t, []int{n, tc.hv}, bd), states, segs, c)
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("case%d/%s/chunk%d", ci, name, chunk)
				s.check(t, what+"/o", o, []int{n, tc.hv * tc.dv}, want, s.tol.F32)
				if len(kept) != len(segs) {
					t.Fatalf("%s: %d kept states for %d segments", what, len(kept), len(segs))
				}
				for i, sg := range segs {
					if !sg.Keep {
						if kept[i] != nil {
							t.Errorf("%s: segment %d: a state without Keep", what, i)
						}
						continue
					}
					s.check(t, fmt.Sprintf("%s/state%d", what, i), kept[i], []int{tc.hv, tc.dk, tc.dv}, finals[i], s.tol.F32)
				}
			}
		}
	}
}

func (s *suite) testSliceRows(t *testing.T) {
	bb := s.batched(t)
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		m, w := 7, 5
		x, vals := s.upAs(t, dt, []int{m, w}, s.random(m*w, 3))
		for _, r := range [][2]int{{0, 7}, {2, 5}, {6, 7}, {3, 3}} {
			s.poison(t, (r[1]-r[0])*w)
			y, err := bb.SliceRows(x, r[0], r[1])
			if err != nil {
				t.Fatal(err)
			}
			if y.DType() != dt {
				t.Errorf("%v rows %v: dtype %v", dt, r, y.DType())
			}
			s.check(t, fmt.Sprintf("%v/rows%d-%d", dt, r[0], r[1]), y, []int{r[1] - r[0], w}, vals[r[0]*w:r[1]*w], 0)
		}
		for _, r := range [][2]int{{-1, 2}, {3, 2}, {0, 8}} {
			if _, err := bb.SliceRows(x, r[0], r[1]); err == nil {
				t.Errorf("%v rows %v: no error", dt, r)
			}
		}
	}
}

func (s *suite) testPointers(t *testing.T) {
	bb := s.batched(t)
	n, d, dp := 11, 12, 5
	head := &tensor.PointerHead{Wq: s.up(t, []int{dp, d}, s.random(dp*d, 1)), Bq: s.up(t, []int{dp}, s.random(dp, 0.5)),
		Wk: s.up(t, []int{dp, d}, s.random(dp*d, 1)), Bk: s.up(t, []int{dp}, s.random(dp, 0.5)),
		Scale: float32(1 / math.Sqrt(float64(dp))), Temperature: 1.7}
	h := s.up(t, []int{n, d}, s.random(n*d, 2))
	qs := []tensor.PointerQuery{{Decide: 3, Opts: []int{0, 1, 2}}, {Decide: 10, Opts: []int{5}}, {Decide: 9, Opts: []int{4, 6, 7, 8}}}
	got, err := bb.Pointers(h, head, qs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(qs) {
		t.Fatalf("%d results for %d queries", len(got), len(qs))
	}
	for i, q := range qs {
		want, err := s.b.Pointer(h, head, q.Decide, q.Opts)
		if err != nil {
			t.Fatal(err)
		}
		compare(t, fmt.Sprintf("query%d", i), got[i], f64(want), s.tol.F32)
	}
	if _, err := bb.Pointers(h, head, []tensor.PointerQuery{{Decide: 0, Opts: []int{n}}}); err == nil {
		t.Errorf("option row %d of %d: no error", n, n)
	}
}

// testSegmentErrors checks that malformed segment lists give errors.
func (s *suite) testSegmentErrors(t *testing.T) {
	bb := s.batched(t)
	c := tensor.AttentionConfig{Heads: 1, KVHeads: 1, HeadDim: 3, Scale: 1}
	x := s.up(t, []int{4, 3}, s.random(12, 1))
	p := s.up(t, []int{2, 3}, s.random(6, 1))
	w := s.up(t, []int{3, 2}, s.random(6, 1))
	st := s.up(t, []int{1, 3}, s.random(3, 1))
	dc := tensor.DeltaConfig{KeyHeads: 1, ValueHeads: 1, KeyDim: 1, ValueDim: 1}
	gb := s.up(t, []int{4, 1}, s.random(4, 1))
	rec := s.up(t, []int{1, 1, 1}, s.random(1, 1))
	zero := func(n int) tensor.Segment { return tensor.Segment{Len: n} }
	cases := map[string][]tensor.Segment{
		"rows":             {zero(3)},
		"negative":         {zero(5), zero(-1)},
		"prefix index":     {zero(2), {Len: 2, From: tensor.FromPrefix, Index: 1}},
		"negative index":   {zero(2), {Len: 2, From: tensor.FromPrefix, Index: -1}},
		"segment index":    {zero(2), {Len: 2, From: tensor.FromSegment, Index: 2}},
		"segment of a row": {{Len: 2, From: tensor.FromPrefix}, {Len: 2, From: tensor.FromSegment, Index: 0}},
		"from":             {zero(2), {Len: 2, From: tensor.SegmentFrom(9)}},
	}
	for name, segs := range cases {
		if _, err := bb.AttentionSegments(x, x, x, []tensor.Tensor{p}, []tensor.Tensor{p}, segs, c); err == nil {
			t.Errorf("AttentionSegments %s: no error", name)
		}
		if _, _, err := bb.CausalConv1dSiLUSegments(x, w, []tensor.Tensor{st}, segs); err == nil {
			t.Errorf("CausalConv1dSiLUSegments %s: no error", name)
		}
		if _, _, err := bb.GatedDeltaRuleSegments(x, gb, gb, []tensor.Tensor{rec}, segs, dc); err == nil {
			t.Errorf("GatedDeltaRuleSegments %s: no error", name)
		}
	}
	ok := []tensor.Segment{zero(2), {Len: 2, From: tensor.FromPrefix}}
	if _, err := bb.AttentionSegments(x, x, x, []tensor.Tensor{p}, nil, ok, c); err == nil {
		t.Errorf("AttentionSegments without value prefixes: no error")
	}
	if _, err := bb.AttentionSegments(x, x, x, []tensor.Tensor{p}, []tensor.Tensor{x}, ok, c); err == nil {
		t.Errorf("AttentionSegments with prefix lengths 2 and 4: no error")
	}
	if _, _, err := bb.CausalConv1dSiLUSegments(x, w, []tensor.Tensor{p}, ok); err == nil {
		t.Errorf("CausalConv1dSiLUSegments with a [2, 3] state for kernel 2: no error")
	}
	if _, _, err := bb.GatedDeltaRuleSegments(x, gb, gb, []tensor.Tensor{p}, ok, dc); err == nil {
		t.Errorf("GatedDeltaRuleSegments with a [2, 3] state: no error")
	}
}
