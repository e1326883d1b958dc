//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// hostBits uploads bf16 values of the given shape.
func hostBits(t *testing.T, gb *Backend, bits []uint16, shape ...int) tensor.Tensor {
	t.Helper()
	x, err := gb.FromBits(tensor.BF16, shape, bits)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// colsOf returns columns [off, off+w) of the row-major m×n bf16 matrix p.
func colsOf(p []uint16, m, n, off, w int) []uint16 {
	out := make([]uint16, 0, m*w)
	for r := range m {
		out = append(out, p[r*n+off:r*n+off+w]...)
	}
	return out
}

// equalOut fails unless got and want (tensors of gb) hold the same bits.
func equalOut(t *testing.T, what string, gb *Backend, got, want tensor.Tensor) {
	t.Helper()
	g, err := gb.ToHost(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := gb.ToHost(want)
	if err != nil {
		t.Fatal(err)
	}
	if i := sameBits(g, w); i >= 0 {
		t.Errorf("%s: element %d of %d is %v from the column view, %v from a dense copy", what, i, len(w), at(g, i), at(w, i))
	}
}

// TestColumnViews checks SplitCols's views: their values, the operations that read them in place (the convolution
// over segments, DeltaGates, GatedRMSNorm's gate, QKNormRope) against the same operations on dense copies bit for
// bit, the dense copy other operations make, and freeing in either order.
func TestColumnViews(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	prefixLens, segs := fastSegs()
	m := 0
	for _, s := range segs {
		m += s.Len
	}
	// A DeltaNet input projection: [x (64 conv channels) | z (8 heads × 32) | b (8) | a (8)].
	const ch, hv, dv, kw = 64, 8, 32, 4
	widths := []int{ch, hv * dv, hv, hv}
	n := ch + hv*dv + 2*hv
	p := randBF16(r, m*n, 2)
	pt := hostBits(t, gb, p, m, n)
	views, err := gb.SplitCols(pt, widths...)
	if err != nil {
		t.Fatal(err)
	}
	gb.Free(pt) // the views keep its memory
	dense := make([]tensor.Tensor, len(widths))
	off := 0
	for i, w := range widths {
		want := colsOf(p, m, n, off, w)
		dense[i] = hostBits(t, gb, want, m, w)
		off += w
	}
	defer gb.Free(dense...)
	x, z, bl, a := views[0], views[1], views[2], views[3]

	t.Run("conv", func(t *testing.T) {
		w, err := gb.FromFloat32([]int{ch, kw}, randVals(r, ch*kw, 0.5))
		if err != nil {
			t.Fatal(err)
		}
		var states []tensor.Tensor
		for range prefixLens {
			states = append(states, hostBits(t, gb, randBF16(r, (kw-1)*ch, 2), kw-1, ch))
		}
		defer gb.Free(append(states, w)...)
		got, gk, err := gb.CausalConv1dSiLUSegments(x, w, states, segs)
		if err != nil {
			t.Fatal(err)
		}
		want, wk, err := gb.CausalConv1dSiLUSegments(dense[0], w, states, segs)
		if err != nil {
			t.Fatal(err)
		}
		equalOut(t, "y", gb, got, want)
		for i := range segs {
			if (gk[i] == nil) != (wk[i] == nil) {
				t.Fatalf("segment %d: kept %v from the view, %v from the dense copy", i, gk[i] != nil, wk[i] != nil)
			}
			if gk[i] != nil {
				equalOut(t, fmt.Sprintf("kept %d", i), gb, gk[i], wk[i])
			}
		}
		gb.Free(append(append(gk, wk...), got, want)...)
	})
	t.Run("gates", func(t *testing.T) {
		aLog, err := gb.FromFloat32([]int{hv}, randVals(r, hv, 1))
		if err != nil {
			t.Fatal(err)
		}
		dtBias, err := gb.FromFloat32([]int{hv}, randVals(r, hv, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer gb.Free(aLog, dtBias)
		gBeta, gG, err := gb.DeltaGates(bl, a, aLog, dtBias)
		if err != nil {
			t.Fatal(err)
		}
		wBeta, wG, err := gb.DeltaGates(dense[2], dense[3], aLog, dtBias)
		if err != nil {
			t.Fatal(err)
		}
		equalOut(t, "beta", gb, gBeta, wBeta)
		equalOut(t, "g", gb, gG, wG)
		gb.Free(gBeta, gG, wBeta, wG)
	})
	t.Run("gated-norm", func(t *testing.T) {
		o := hostBits(t, gb, randBF16(r, m*hv*dv, 1), m, hv*dv)
		gain, err := gb.FromFloat32([]int{dv}, randVals(r, dv, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer gb.Free(o, gain)
		got, err := gb.GatedRMSNorm(o, z, gain, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		want, err := gb.GatedRMSNorm(o, dense[1], gain, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		equalOut(t, "y", gb, got, want)
		gb.Free(got, want)
	})
	t.Run("values", func(t *testing.T) {
		for i, v := range views {
			equalOut(t, fmt.Sprintf("view %d", i), gb, v, dense[i])
		}
		// a non-strided operation reads the view's dense copy
		s, err := gb.SigmoidGate(z, dense[1])
		if err != nil {
			t.Fatal(err)
		}
		w, err := gb.SigmoidGate(dense[1], dense[1])
		if err != nil {
			t.Fatal(err)
		}
		equalOut(t, "SigmoidGate", gb, s, w)
		gb.Free(s, w)
		// a split of a view
		parts, err := gb.SplitCols(z, 64, hv*dv-64)
		if err != nil {
			t.Fatal(err)
		}
		h, err := gb.ToHost(parts[1])
		if err != nil {
			t.Fatal(err)
		}
		want := colsOf(p, m, n, ch+64, hv*dv-64)
		for i, v := range h {
			if v != half.BF16ToF32(want[i]) {
				t.Fatalf("split of a view: element %d is %v, want %v", i, v, half.BF16ToF32(want[i]))
			}
		}
		gb.Free(parts...)
	})
	t.Run("unaligned", func(t *testing.T) {
		// odd widths: views starting inside a 16-byte piece take the element-wise kernels
		const h, d = 3, 4
		u := randBF16(r, m*(1+h+h+h*d), 2)
		ut := hostBits(t, gb, u, m, 1+h+h+h*d)
		vs, err := gb.SplitCols(ut, 1, h, h, h*d)
		if err != nil {
			t.Fatal(err)
		}
		gb.Free(ut)
		var ds []tensor.Tensor
		off := 0
		for _, w := range []int{1, h, h, h * d} {
			ds = append(ds, hostBits(t, gb, colsOf(u, m, 1+h+h+h*d, off, w), m, w))
			off += w
		}
		aLog, _ := gb.FromFloat32([]int{h}, randVals(r, h, 1))
		dtBias, _ := gb.FromFloat32([]int{h}, randVals(r, h, 1))
		gain, _ := gb.FromFloat32([]int{d}, randVals(r, d, 1))
		o := hostBits(t, gb, randBF16(r, m*h*d, 1), m, h*d)
		defer gb.Free(append(append(vs, ds...), aLog, dtBias, gain, o)...)
		gBeta, gG, err := gb.DeltaGates(vs[1], vs[2], aLog, dtBias)
		if err != nil {
			t.Fatal(err)
		}
		wBeta, wG, err := gb.DeltaGates(ds[1], ds[2], aLog, dtBias)
		if err != nil {
			t.Fatal(err)
		}
		equalOut(t, "beta", gb, gBeta, wBeta)
		equalOut(t, "g", gb, gG, wG)
		gy, err := gb.GatedRMSNorm(o, vs[3], gain, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		wy, err := gb.GatedRMSNorm(o, ds[3], gain, 1e-6)
		if err != nil {
			t.Fatal(err)
		}
		equalOut(t, "gated norm", gb, gy, wy)
		gb.Free(gBeta, gG, wBeta, wG, gy, wy)
	})
	gb.Free(views...)
	if _, err := gb.ToHost(x); !errors.Is(err, ErrFreed) {
		t.Errorf("ToHost of a freed view: %v, want ErrFreed", err)
	}

	// Views freed before their base, and a base freed while a view still reads it.
	q := hostBits(t, gb, randBF16(r, 3*48, 1), 3, 48)
	vs, err := gb.SplitCols(q, 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	gb.Free(vs[0])
	if _, err := gb.ToHost(q); err != nil {
		t.Errorf("base after one view was freed: %v", err)
	}
	gb.Free(q)
	if _, err := gb.ToHost(vs[1]); err != nil {
		t.Errorf("view after its base was freed: %v", err)
	}
	gb.Free(vs[1])
}

// TestConvManySegments runs the bf16 convolution on more segments than a launch carries as parameters (the
// descriptors uploaded; 1,100: more than the vector kernels take, the element-wise kernel), many kept,
// with the input a column view, against the CPU backend.
func TestConvManySegments(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	cb := cpu.New()
	const ch, kw = 32, 4
	for _, count := range []int{40, 1100} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			var segs []tensor.Segment
			var prefixLens []int
			n := 0
			for i := range count {
				s := tensor.Segment{Len: r.IntN(20), Keep: i%3 == 0}
				if count > 100 {
					s.Len = r.IntN(4)
				}
				switch {
				case i%4 == 1:
					s.From, s.Index = tensor.FromPrefix, len(prefixLens)
					prefixLens = append(prefixLens, 1)
				case i%4 == 2 && segs[i-2].From == tensor.FromZero:
					s.From, s.Index = tensor.FromSegment, i-2
				}
				if i%7 == 0 {
					s.Len = 0
				}
				segs = append(segs, s)
				n += s.Len
			}
			pg, pc := bf16Pair(t, r, gb, cb, 2, n, ch+8)
			vg, err := gb.SplitCols(pg, 8, ch)
			if err != nil {
				t.Fatal(err)
			}
			vc, err := cb.SplitCols(pc, 8, ch)
			if err != nil {
				t.Fatal(err)
			}
			wg, wc := bf16Pair(t, r, gb, cb, 0.5, ch, kw)
			var sg, sc []tensor.Tensor
			for range prefixLens {
				a, b := bf16Pair(t, r, gb, cb, 2, kw-1, ch)
				sg, sc = append(sg, a), append(sc, b)
			}
			want, wk, err := cb.CausalConv1dSiLUSegments(vc[1], wc, sc, segs)
			if err != nil {
				t.Fatal(err)
			}
			got, gk, err := gb.CausalConv1dSiLUSegments(vg[1], wg, sg, segs)
			if err != nil {
				t.Fatal(err)
			}
			compareHidden(t, "y", cb, want, gb, got, 1e-2)
			for i := range segs {
				if (wk[i] == nil) != (gk[i] == nil) {
					t.Fatalf("segment %d: kept %v on cpu, %v on cuda", i, wk[i] != nil, gk[i] != nil)
				}
				if wk[i] != nil {
					w, _ := cb.ToHost(wk[i])
					g, _ := gb.ToHost(gk[i])
					if j := sameBits(g, w); j >= 0 {
						t.Fatalf("kept state of segment %d differs at %d: %v, want %v", i, j, at(g, j), at(w, j))
					}
				}
			}
			gb.Free(append(append(append(sg, gk...), vg...), pg, wg, got)...)
		})
	}
}

// TestQKNormRopeBF16 checks the 16-byte-vector QKNormRope kernel (bf16 operands, fp32 gains) against the CPU
// backend, with the inputs column views of one projection as the attention layer reads them. Where a lane holds
// one rotation angle (R/2 ≤ D/8), the kernel for that case must give the general kernel's bits.
func TestQKNormRopeBF16(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	cb := cpu.New()
	for _, tc := range []struct {
		c tensor.RopeConfig
		T int
	}{
		{tensor.RopeConfig{Heads: 4, KVHeads: 2, HeadDim: 256, RotaryDim: 64, Theta: 1e7, Eps: 1e-6, Gated: true, Norm: tensor.QKNormPlusOne}, 77},
		{tensor.RopeConfig{Heads: 6, KVHeads: 3, HeadDim: 128, RotaryDim: 128, Theta: 1e6, Eps: 1e-6, Norm: tensor.QKNormPlain}, 77},
		{tensor.RopeConfig{Heads: 2, KVHeads: 1, HeadDim: 64, RotaryDim: 16, Theta: 1e4, Eps: 1e-6, Norm: tensor.QKNormNone}, 77},
		// Kev-4B's attention on a 2,401-token pass: more vectors than the resident blocks take at once, so each
		// block strides over several groups of them
		{tensor.RopeConfig{Heads: 16, KVHeads: 4, HeadDim: 256, RotaryDim: 64, Theta: 1e7, Eps: 1e-6, Gated: true, Norm: tensor.QKNormPlusOne}, 2401},
	} {
		c, T := tc.c, tc.T
		t.Run(fmt.Sprintf("D%d/R%d/gated=%v/norm%d/T%d", c.HeadDim, c.RotaryDim, c.Gated, c.Norm, T), func(t *testing.T) {
			qw, kvw := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
			if c.Gated {
				qw *= 2
			}
			pg, pc := bf16Pair(t, r, gb, cb, 2, T, qw+2*kvw)
			vg, err := gb.SplitCols(pg, qw, kvw, kvw)
			if err != nil {
				t.Fatal(err)
			}
			vc, err := cb.SplitCols(pc, qw, kvw, kvw)
			if err != nil {
				t.Fatal(err)
			}
			gq, err := gb.FromFloat32([]int{c.HeadDim}, randVals(r, c.HeadDim, 0.5))
			if err != nil {
				t.Fatal(err)
			}
			gk, err := gb.FromFloat32([]int{c.HeadDim}, randVals(r, c.HeadDim, 0.5))
			if err != nil {
				t.Fatal(err)
			}
			hq, _ := gb.ToHost(gq)
			hk, _ := gb.ToHost(gk)
			cq, _ := cb.FromFloat32([]int{c.HeadDim}, hq)
			ck, _ := cb.FromFloat32([]int{c.HeadDim}, hk)
			pos := make([]int32, T)
			for i := range pos {
				pos[i] = int32(r.IntN(5000))
			}
			wq, wk, wg, err := cb.QKNormRope(vc[0], vc[1], cq, ck, pos, c)
			if err != nil {
				t.Fatal(err)
			}
			q, k, g, err := gb.QKNormRope(vg[0], vg[1], gq, gk, pos, c)
			if err != nil {
				t.Fatal(err)
			}
			compareHidden(t, "q", cb, wq, gb, q, 1e-2)
			compareHidden(t, "k", cb, wk, gb, k, 1e-2)
			if c.Gated {
				compareHidden(t, "gate", cb, wg, gb, g, 0)
			}
			if c.RotaryDim/2 <= c.HeadDim/8 {
				ropeOneAngle = false
				q2, k2, g2, err := gb.QKNormRope(vg[0], vg[1], gq, gk, pos, c)
				ropeOneAngle = true
				if err != nil {
					t.Fatal(err)
				}
				for i, p := range [][2]tensor.Tensor{{q, q2}, {k, k2}} {
					a, _ := gb.ToHost(p[0])
					b, _ := gb.ToHost(p[1])
					if j := sameBits(a, b); j >= 0 {
						t.Errorf("output %d element %d: one-angle kernel %g, general kernel %g", i, j, a[j], b[j])
					}
				}
				gb.Free(q2, k2, g2)
			}
			gb.Free(append(vg, pg, gq, gk, q, k, g)...)
		})
	}
}
