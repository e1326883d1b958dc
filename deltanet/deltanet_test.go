package deltanet

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// testConfig is small and unlike the 4B: d_k ≠ d_v, H_v/H_k = 3.
func testConfig() qwen35.Config {
	return qwen35.Config{HiddenSize: 12, RMSNormEps: 1e-6, LinearNumKeyHeads: 2, LinearNumValueHeads: 6,
		LinearKeyHeadDim: 5, LinearValueHeadDim: 7, LinearConvKernel: 4}
}

func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 1))
}

func randVals(r *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(scale * (2*r.Float64() - 1))
	}
	return out
}

// randomWeights makes a layer's tensors; matrices are BF16 when bf16 is set.
func randomWeights(r *rand.Rand, c qwen35.Config, prefix string, bf16 bool) *qwen35.Weights {
	w := &qwen35.Weights{Config: c, Tensors: map[string]*qwen35.Tensor{}}
	mat := func(name string, scale float64, shape ...int) {
		t := &qwen35.Tensor{Shape: shape, DType: qwen35.F32, F32: randVals(r, tensor.Numel(shape), scale)}
		if bf16 {
			t.DType, t.BF16 = qwen35.BF16, make([]uint16, len(t.F32))
			for i, v := range t.F32 {
				t.BF16[i] = half.BF16FromF32(v)
			}
			t.F32 = nil
		}
		w.Tensors[prefix+name] = t
	}
	d := c.HiddenSize
	mat("in_proj_qkv.weight", 0.5, c.ConvDim(), d)
	mat("in_proj_z.weight", 0.5, c.LinearValueDim(), d)
	mat("in_proj_b.weight", 0.5, c.LinearNumValueHeads, d)
	mat("in_proj_a.weight", 0.5, c.LinearNumValueHeads, d)
	mat("conv1d.weight", 0.6, c.ConvDim(), 1, c.LinearConvKernel)
	mat("out_proj.weight", 0.4, d, c.LinearValueDim())
	mat("norm.weight", 0.3, c.LinearValueHeadDim)
	for i := range w.Tensors[prefix+"norm.weight"].F32 {
		w.Tensors[prefix+"norm.weight"].F32[i] += 1
	}
	w.Tensors[prefix+"A_log"] = &qwen35.Tensor{Shape: []int{c.LinearNumValueHeads}, DType: qwen35.F32, F32: randVals(r, c.LinearNumValueHeads, 1.5)}
	w.Tensors[prefix+"dt_bias"] = &qwen35.Tensor{Shape: []int{c.LinearNumValueHeads}, DType: qwen35.F32, F32: randVals(r, c.LinearNumValueHeads, 1)}
	return w
}

func vals64(t *qwen35.Tensor) []float64 {
	f := t.Float32s()
	out := make([]float64, len(f))
	for i, v := range f {
		out[i] = float64(v)
	}
	return out
}

// reference computes the layer in float64 from its definition (qwen35 §5),
// token by token, from the given conv history [K−1, C] and state
// [H_v, d_k, d_v] (nil: zero). It returns out [T, d], the final history and
// the final state.
func reference(w *qwen35.Weights, prefix string, u []float64, hist, S []float64) ([]float64, []float64, []float64) {
	c := w.Config
	d, hk, hv, dk, dv, kw := c.HiddenSize, c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernel
	conv := c.ConvDim()
	T := len(u) / d
	lin := func(name string, x []float64) []float64 {
		wt := vals64(w.Tensors[prefix+name])
		if w.Tensors[prefix+name].DType == qwen35.BF16 {
			// The CPU computes a product with a BF16 weight in bf16: its
			// input is rounded to bf16.
			xr := make([]float64, len(x))
			for j, v := range x {
				xr[j] = float64(half.RoundBF16(float32(v)))
			}
			x = xr
		}
		n := len(wt) / len(x)
		y := make([]float64, n)
		for i := range y {
			for j, v := range x {
				y[i] += wt[i*len(x)+j] * v
			}
		}
		return y
	}
	cw, aLog, dtb, nw := vals64(w.Tensors[prefix+"conv1d.weight"]), vals64(w.Tensors[prefix+"A_log"]), vals64(w.Tensors[prefix+"dt_bias"]), vals64(w.Tensors[prefix+"norm.weight"])
	if hist == nil {
		hist = make([]float64, (kw-1)*conv)
	}
	hist = append([]float64(nil), hist...)
	if S == nil {
		S = make([]float64, hv*dk*dv)
	}
	S = append([]float64(nil), S...)
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	l2 := func(v []float64, s float64) []float64 {
		var ss float64
		for _, x := range v {
			ss += x * x
		}
		o := make([]float64, len(v))
		for i, x := range v {
			o[i] = x / math.Sqrt(ss+1e-6) * s
		}
		return o
	}
	out := make([]float64, 0, T*d)
	for t := 0; t < T; t++ {
		ut := u[t*d : (t+1)*d]
		x, z, bb, a := lin("in_proj_qkv.weight", ut), lin("in_proj_z.weight", ut), lin("in_proj_b.weight", ut), lin("in_proj_a.weight", ut)
		win := append(append([]float64(nil), hist...), x...) // [K, C]
		cx := make([]float64, conv)
		for ch := range cx {
			var acc float64
			for j := 0; j < kw; j++ {
				acc += cw[ch*kw+j] * win[j*conv+ch]
			}
			cx[ch] = acc * sig(acc)
		}
		hist = win[conv:]
		y := make([]float64, hv*dv)
		for h := 0; h < hv; h++ {
			kh := h / (hv / hk)
			q := l2(cx[kh*dk:(kh+1)*dk], 1/math.Sqrt(float64(dk)))
			k := l2(cx[hk*dk+kh*dk:hk*dk+(kh+1)*dk], 1)
			v := cx[2*hk*dk+h*dv : 2*hk*dk+(h+1)*dv]
			beta := sig(bb[h])
			sp := a[h] + dtb[h]
			if sp <= 20 {
				sp = math.Log1p(math.Exp(sp))
			}
			g := -math.Exp(aLog[h]) * sp
			Sh := S[h*dk*dv : (h+1)*dk*dv]
			for i := range Sh {
				Sh[i] *= math.Exp(g)
			}
			for j := 0; j < dv; j++ {
				var r float64
				for i := 0; i < dk; i++ {
					r += Sh[i*dv+j] * k[i]
				}
				for i := 0; i < dk; i++ {
					Sh[i*dv+j] += k[i] * beta * (v[j] - r)
				}
			}
			o := make([]float64, dv)
			var ss float64
			for j := range o {
				for i := 0; i < dk; i++ {
					o[j] += Sh[i*dv+j] * q[i]
				}
				ss += o[j] * o[j]
			}
			rr := 1 / math.Sqrt(ss/float64(dv)+1e-6)
			for j := range o {
				zz := z[h*dv+j]
				y[h*dv+j] = o[j] * rr * nw[j] * zz * sig(zz)
			}
		}
		out = append(out, lin("out_proj.weight", y)...)
	}
	return out, hist, S
}

func relErr(got []float32, want []float64) float64 {
	var scale, worst float64
	for i, w := range want {
		scale = math.Max(scale, math.Abs(w))
		d := math.Abs(float64(got[i]) - w)
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		worst = math.Max(worst, d)
	}
	return worst / math.Max(scale, 1e-30)
}

func host(t *testing.T, b tensor.Backend, x tensor.Tensor) []float32 {
	t.Helper()
	v, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func up(t *testing.T, b tensor.Backend, shape []int, v []float32) tensor.Tensor {
	t.Helper()
	x, err := b.FromFloat32(shape, v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// bf16Tol bounds the layer's error against the reference with BF16 weights.
// The reference rounds each product's input to bf16 as the CPU does, and the
// two agree to float32 rounding until an input sits so close to a bf16
// rounding boundary that float32 and float64 round it to neighbouring values
// (2⁻⁸ apart): at most 1.1e-3 measured over 14 seeds.
const bf16Tol = 1e-2

func TestLayerMatchesReference(t *testing.T) {
	r := newRand(t)
	b := cpu.New()
	c := testConfig()
	for _, bf16 := range []bool{false, true} {
		outTol, convTol := 1e-5, 1e-6
		if bf16 {
			outTol, convTol = bf16Tol, bf16Tol
		}
		w := randomWeights(r, c, "layers.0.linear_attn.", bf16)
		l, err := New(b, w, "layers.0.linear_attn.")
		if err != nil {
			t.Fatal(err)
		}
		T := 70
		u := randVals(r, T*c.HiddenSize, 1.5)
		hist := randVals(r, (c.LinearConvKernel-1)*c.ConvDim(), 1)
		S := randVals(r, c.LinearNumValueHeads*c.LinearKeyHeadDim*c.LinearValueHeadDim, 0.5)
		for _, withState := range []bool{false, true} {
			var st *State
			var h64, s64 []float64
			if withState {
				st = &State{Conv: up(t, b, []int{c.LinearConvKernel - 1, c.ConvDim()}, hist),
					Rec: up(t, b, []int{c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim}, S)}
				h64, s64 = f64(hist), f64(S)
			}
			want, wantHist, wantS := reference(w, "layers.0.linear_attn.", f64(u), h64, s64)
			for _, chunk := range []int{0, 4, 64} {
				l.Chunk = chunk
				out, next, err := l.Forward(up(t, b, []int{T, c.HiddenSize}, u), st, nil)
				if err != nil {
					t.Fatal(err)
				}
				if e := relErr(host(t, b, out), want); e > outTol {
					t.Errorf("bf16=%v state=%v chunk=%d: out relative error %.3g", bf16, withState, chunk, e)
				}
				if e := relErr(host(t, b, next.Conv), wantHist); e > convTol {
					t.Errorf("bf16=%v state=%v chunk=%d: conv state relative error %.3g", bf16, withState, chunk, e)
				}
				if e := relErr(host(t, b, next.Rec), wantS); e > outTol {
					t.Errorf("bf16=%v state=%v chunk=%d: recurrent state relative error %.3g", bf16, withState, chunk, e)
				}
			}
		}
	}
}

// TestChunkedEqualsRecurrent runs longer rows across several chunk
// boundaries from a non-zero state. The weights are float32: with BF16 ones
// the output projection rounds its input to bf16, where the two orders' last
// bits may round to neighbouring values.
func TestChunkedEqualsRecurrent(t *testing.T) {
	r := newRand(t)
	b := cpu.New()
	c := testConfig()
	c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim = 2, 4, 16, 8
	w := randomWeights(r, c, "", false)
	l, err := New(b, w, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, T := range []int{1, 63, 64, 65, 129, 200} {
		u := up(t, b, []int{T, c.HiddenSize}, randVals(r, T*c.HiddenSize, 2))
		st := &State{Conv: up(t, b, []int{c.LinearConvKernel - 1, c.ConvDim()}, randVals(r, (c.LinearConvKernel-1)*c.ConvDim(), 1)),
			Rec: up(t, b, []int{4, 16, 8}, randVals(r, 4*16*8, 1))}
		l.Chunk = 0
		ro, rs, err := l.Forward(u, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Chunk = DefaultChunk
		co, cs, err := l.Forward(u, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := relErr(host(t, b, co), f64(host(t, b, ro))); e > 1e-5 {
			t.Errorf("T=%d: chunked vs recurrent output relative error %.3g", T, e)
		}
		if e := relErr(host(t, b, cs.Rec), f64(host(t, b, rs.Rec))); e > 1e-5 {
			t.Errorf("T=%d: chunked vs recurrent state relative error %.3g", T, e)
		}
	}
}

// TestContinuation checks that a row split in two (state carried over)
// equals the whole row, that segments equal separate calls, and that the
// state given to Forward is not modified.
func TestContinuation(t *testing.T) {
	r := newRand(t)
	b := cpu.New()
	c := testConfig()
	w := randomWeights(r, c, "", false)
	l, err := New(b, w, "")
	if err != nil {
		t.Fatal(err)
	}
	d := c.HiddenSize
	for _, split := range []int{1, 2, 3, 40, 69} {
		T := 70
		uv := randVals(r, T*d, 1.5)
		whole, wholeState, err := l.Forward(up(t, b, []int{T, d}, uv), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := l.Forward(up(t, b, []int{split, d}, uv[:split*d]), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		convBefore, recBefore := host(t, b, st.Conv), host(t, b, st.Rec)
		rest, restState, err := l.Forward(up(t, b, []int{T - split, d}, uv[split*d:]), st, nil)
		if err != nil {
			t.Fatal(err)
		}
		if e := relErr(host(t, b, rest), f64(host(t, b, whole)[split*d:])); e > 1e-5 {
			t.Errorf("split %d: continuation output relative error %.3g", split, e)
		}
		if e := relErr(host(t, b, restState.Rec), f64(host(t, b, wholeState.Rec))); e > 1e-5 {
			t.Errorf("split %d: continuation state relative error %.3g", split, e)
		}
		// Three segments continuing st in one call equal three calls.
		lens := []int{5, 1, 9}
		seg := randVals(r, 15*d, 1.5)
		batched, none, err := l.Forward(up(t, b, []int{15, d}, seg), st, lens)
		if err != nil {
			t.Fatal(err)
		}
		if none != nil {
			t.Error("Forward with several segments returned a state")
		}
		bv, off := host(t, b, batched), 0
		for _, n := range lens {
			one, _, err := l.Forward(up(t, b, []int{n, d}, seg[off*d:(off+n)*d]), st, nil)
			if err != nil {
				t.Fatal(err)
			}
			if e := relErr(bv[off*d:(off+n)*d], f64(host(t, b, one))); e > 1e-6 {
				t.Errorf("split %d: segment at %d differs from its own call: %.3g", split, off, e)
			}
			off += n
		}
		if e := relErr(host(t, b, st.Conv), f64(convBefore)); e != 0 {
			t.Error("Forward modified the conv state it continued")
		}
		if e := relErr(host(t, b, st.Rec), f64(recBefore)); e != 0 {
			t.Error("Forward modified the recurrent state it continued")
		}
	}
}

func TestNewErrors(t *testing.T) {
	r := newRand(t)
	c := testConfig()
	w := randomWeights(r, c, "x.", false)
	delete(w.Tensors, "x.A_log")
	var te *qwen35.TensorError
	if _, err := New(cpu.New(), w, "x."); !errors.As(err, &te) || te.Name != "x.A_log" || te.Reason != "missing" {
		t.Errorf("missing A_log: error %v", err)
	}
	w = randomWeights(r, c, "x.", false)
	w.Tensors["x.out_proj.weight"].Shape = []int{c.LinearValueDim(), c.HiddenSize}
	if _, err := New(cpu.New(), w, "x."); err == nil || !strings.Contains(err.Error(), "out_proj.weight") {
		t.Errorf("transposed out_proj: error %v", err)
	}
	c.LinearNumValueHeads = 5
	if _, err := New(cpu.New(), &qwen35.Weights{Config: c}, ""); err == nil {
		t.Error("H_v not a multiple of H_k: no error")
	}
}

// TestForwardGatedProjects checks that Forward's output is exactly MatMul of
// ForwardGated's output with OutProj, and that both return the same state:
// callers that fuse the projection with what follows rely on it.
func TestForwardGatedProjects(t *testing.T) {
	r := newRand(t)
	b := cpu.New()
	c := testConfig()
	w := randomWeights(r, c, "", true)
	l, err := New(b, w, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, T := range []int{1, 7, 70} {
		u := up(t, b, []int{T, c.HiddenSize}, randVals(r, T*c.HiddenSize, 2))
		out, next, err := l.Forward(u, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		n, gnext, err := l.ForwardGated(u, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		proj, err := b.MatMul(n, l.OutProj())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			what      string
			got, want []float32
		}{{"output", host(t, b, proj), host(t, b, out)}, {"conv state", host(t, b, gnext.Conv), host(t, b, next.Conv)},
			{"recurrent state", host(t, b, gnext.Rec), host(t, b, next.Rec)}} {
			if len(p.got) != len(p.want) {
				t.Fatalf("T=%d: %s has %d values, want %d", T, p.what, len(p.got), len(p.want))
			}
			for i := range p.got {
				if math.Float32bits(p.got[i]) != math.Float32bits(p.want[i]) {
					t.Errorf("T=%d: %s[%d] = %v, Forward's %v", T, p.what, i, p.got[i], p.want[i])
					break
				}
			}
		}
	}
}
