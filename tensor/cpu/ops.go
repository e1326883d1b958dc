package cpu

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/tensor"
)

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

func silu(x float32) float32 { return x * sigmoid(x) }

// Embedding gathers table rows.
func (b *Backend) Embedding(table tensor.Tensor, ids []int32) (tensor.Tensor, error) {
	tt, err := matrix("Embedding", "table", table, -1, -1)
	if err != nil {
		return nil, err
	}
	v, d := tt.shape[0], tt.shape[1]
	out := newF32(len(ids), d)
	for t, id := range ids {
		if id < 0 || int(id) >= v {
			return nil, fmt.Errorf("cpu: Embedding: ids[%d] = %d is outside the table's %d rows", t, id, v)
		}
		tt.copyRows(out.f32[t*d:(t+1)*d], int(id), int(id)+1)
	}
	return out, nil
}

// SplitCols copies column blocks of x into new tensors.
func (b *Backend) SplitCols(x tensor.Tensor, widths ...int) ([]tensor.Tensor, error) {
	xt, err := matrix("SplitCols", "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	sum := 0
	for i, w := range widths {
		if w < 0 {
			return nil, fmt.Errorf("cpu: SplitCols: widths[%d] = %d is negative", i, w)
		}
		sum += w
	}
	m, n := xt.shape[0], xt.shape[1]
	if sum != n {
		return nil, &tensor.ShapeError{Op: "SplitCols", Arg: "x", Shape: xt.shape, Want: tensor.Dims(-1, sum)}
	}
	xs := xt.float32s()
	outs := make([]tensor.Tensor, len(widths))
	off := 0
	offs := make([]int, len(widths))
	for i, w := range widths {
		outs[i] = newF32Full(m, w)
		offs[i] = off
		off += w
	}
	b.parallel(m, 16, func(lo, hi int) {
		for i, w := range widths {
			o := outs[i].(*Tensor).f32
			for r := lo; r < hi; r++ {
				copy(o[r*w:(r+1)*w], xs[r*n+offs[i]:r*n+offs[i]+w])
			}
		}
	})
	return outs, nil
}

// rmsRow writes x/sqrt(mean(x²)+eps)·g into y, with g = 1+gain or gain.
func rmsRow(y, x, gain []float32, eps float32, plusOne bool) {
	ss := sumSq(x)
	r := float32(1 / math.Sqrt(float64(ss/float32(len(x))+eps)))
	gain = gain[:len(x)]
	y = y[:len(x)]
	if plusOne {
		for i, v := range x {
			y[i] = v * r * (1 + gain[i])
		}
		return
	}
	for i, v := range x {
		y[i] = v * r * gain[i]
	}
}

// RMSNorm normalises the rows of x.
func (b *Backend) RMSNorm(x, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, error) {
	xt, err := matrix("RMSNorm", "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	m, n := xt.shape[0], xt.shape[1]
	gt, err := vector("RMSNorm", "gain", gain, n)
	if err != nil {
		return nil, err
	}
	xs, gs := xt.float32s(), gt.float32s()
	out := newF32Full(m, n)
	b.parallel(m, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			rmsRow(out.f32[r*n:(r+1)*n], xs[r*n:(r+1)*n], gs, eps, plusOne)
		}
	})
	return out, nil
}

// AddRMSNorm returns x+residual and its RMSNorm.
func (b *Backend) AddRMSNorm(x, residual, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, tensor.Tensor, error) {
	xt, err := matrix("AddRMSNorm", "x", x, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	m, n := xt.shape[0], xt.shape[1]
	rt, err := matrix("AddRMSNorm", "residual", residual, m, n)
	if err != nil {
		return nil, nil, err
	}
	gt, err := vector("AddRMSNorm", "gain", gain, n)
	if err != nil {
		return nil, nil, err
	}
	xs, rs, gs := xt.float32s(), rt.float32s(), gt.float32s()
	sum, normed := newF32Full(m, n), newF32Full(m, n)
	b.parallel(m, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			s := sum.f32[r*n : (r+1)*n]
			for i := range s {
				s[i] = xs[r*n+i] + rs[r*n+i]
			}
			rmsRow(normed.f32[r*n:(r+1)*n], s, gs, eps, plusOne)
		}
	})
	return sum, normed, nil
}

// MatMulAddRMSNorm returns AddRMSNorm(MatMul(x, w), residual, gain, eps, plusOne).
func (b *Backend) MatMulAddRMSNorm(x, w, residual, gain tensor.Tensor, eps float32, plusOne bool) (sum, normed tensor.Tensor, err error) {
	y, err := b.MatMul(x, w)
	if err != nil {
		return nil, nil, err
	}
	defer b.Free(y)
	return b.AddRMSNorm(y, residual, gain, eps, plusOne)
}

// MatMulSwiGLU returns SwiGLU(MatMul(x, w)): for an F32 weight whose halves
// are whole GEMM panels, in one pass (swiGLUF32) with MatMul's bits.
func (b *Backend) MatMulSwiGLU(x, w tensor.Tensor) (tensor.Tensor, error) {
	xt, xok := x.(*Tensor)
	wt, wok := w.(*Tensor)
	if xok && wok && !xt.freed && !wt.freed && xt.dtype == tensor.F32 && wt.dtype == tensor.F32 &&
		len(xt.shape) == 2 && len(wt.shape) == 2 && xt.shape[1] == wt.shape[1] && xt.shape[1] > 0 &&
		xt.shape[0] > 0 && wt.shape[0] > 0 && wt.shape[0]%(2*nr) == 0 {
		m, h := xt.shape[0], wt.shape[0]/2
		out := newF32Full(m, h)
		b.swiGLUF32(xt.float32s(), wt, m, h, xt.shape[1], out.f32)
		return out, nil
	}
	gu, err := b.MatMul(x, w)
	if err != nil {
		return nil, err
	}
	defer b.Free(gu)
	return b.SwiGLU(gu)
}

// SwiGLU returns silu(g)·u for x = [g | u].
func (b *Backend) SwiGLU(x tensor.Tensor) (tensor.Tensor, error) {
	xt, err := matrix("SwiGLU", "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	m, n2 := xt.shape[0], xt.shape[1]
	if n2%2 != 0 {
		return nil, &tensor.ShapeError{Op: "SwiGLU", Arg: "x", Shape: xt.shape, Want: "[M, 2I]"}
	}
	n := n2 / 2
	xs := xt.float32s()
	out := newF32Full(m, n)
	b.parallel(m, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			g, u, y := xs[r*n2:r*n2+n], xs[r*n2+n:(r+1)*n2], out.f32[r*n:(r+1)*n]
			siluVec(y, g)
			for i, v := range u {
				y[i] *= v
			}
		}
	})
	return out, nil
}

// SigmoidGate returns x·sigmoid(gate).
func (b *Backend) SigmoidGate(x, gate tensor.Tensor) (tensor.Tensor, error) {
	xt, err := matrix("SigmoidGate", "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	gt, err := matrix("SigmoidGate", "gate", gate, xt.shape[0], xt.shape[1])
	if err != nil {
		return nil, err
	}
	xs, gs := xt.float32s(), gt.float32s()
	out := newF32Full(xt.shape[0], xt.shape[1])
	n := xt.shape[1]
	b.parallel(xt.shape[0], 4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			y := out.f32[r*n : (r+1)*n]
			sigmoidVec(y, gs[r*n:(r+1)*n])
			for i, v := range xs[r*n : (r+1)*n] {
				y[i] *= v
			}
		}
	})
	return out, nil
}

// AddBias adds bias [n] to every row of x [M, n].
func (b *Backend) AddBias(x, bias tensor.Tensor) (tensor.Tensor, error) {
	xt, err := matrix("AddBias", "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	bt, err := vector("AddBias", "bias", bias, xt.shape[1])
	if err != nil {
		return nil, err
	}
	xs, bs := xt.float32s(), bt.float32s()
	n := xt.shape[1]
	out := newF32Full(xt.shape[0], n)
	b.parallel(xt.shape[0], 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			src, dst := xs[r*n:(r+1)*n], out.f32[r*n:(r+1)*n]
			for i, v := range src {
				dst[i] = v + bs[i]
			}
		}
	})
	return out, nil
}

// ropeFreqs returns the R/2 inverse frequencies, in fp32 as the reference
// computes them.
func ropeFreqs(rot int, theta float64) []float32 {
	inv := make([]float32, rot/2)
	for j := range inv {
		inv[j] = float32(1 / math.Pow(theta, float64(2*j)/float64(rot)))
	}
	return inv
}

// ropeAngles writes cos and sin of position p times each inverse frequency
// (the angle in fp32, then its cos and sin).
func ropeAngles(cos, sin, inv []float32, p int32) {
	for j, f := range inv {
		a := float32(p) * f
		cos[j] = float32(math.Cos(float64(a)))
		sin[j] = float32(math.Sin(float64(a)))
	}
}

// normRope normalises one head vector with (1+gain) and rotates its first
// rot dims in place.
func normRope(v, gain []float32, eps float32, cos, sin []float32, norm tensor.QKNorm) {
	if norm != tensor.QKNormNone {
		rmsRow(v, v, gain, eps, norm == tensor.QKNormPlusOne)
	}
	half := len(cos)
	for j := 0; j < half; j++ {
		x0, x1 := v[j], v[j+half]
		v[j] = x0*cos[j] - x1*sin[j]
		v[j+half] = x1*cos[j] + x0*sin[j]
	}
}

// QKNormRope normalises and rotates query and key heads.
func (b *Backend) QKNormRope(q, k, qGain, kGain tensor.Tensor, positions []int32, c tensor.RopeConfig) (tensor.Tensor, tensor.Tensor, tensor.Tensor, error) {
	const op = "QKNormRope"
	if c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.RotaryDim < 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0 {
		return nil, nil, nil, fmt.Errorf("cpu: %s: bad config %+v", op, c)
	}
	n, d := len(positions), c.HeadDim
	qw := c.Heads * d
	if c.Gated {
		qw *= 2
	}
	qt, err := matrix(op, "q", q, n, qw)
	if err != nil {
		return nil, nil, nil, err
	}
	kt, err := matrix(op, "k", k, n, c.KVHeads*d)
	if err != nil {
		return nil, nil, nil, err
	}
	if c.Norm > tensor.QKNormNone {
		return nil, nil, nil, fmt.Errorf("cpu: %s: bad norm %d", op, c.Norm)
	}
	qs, ks := qt.float32s(), kt.float32s()
	var qgs, kgs []float32
	if c.Norm != tensor.QKNormNone {
		qg, err := vector(op, "qGain", qGain, d)
		if err != nil {
			return nil, nil, nil, err
		}
		kg, err := vector(op, "kGain", kGain, d)
		if err != nil {
			return nil, nil, nil, err
		}
		qgs, kgs = qg.float32s(), kg.float32s()
	}
	inv := ropeFreqs(c.RotaryDim, c.Theta)
	qOut, kOut := newF32Full(n, c.Heads*d), newF32Full(n, c.KVHeads*d)
	var gate *Tensor
	if c.Gated {
		gate = newF32Full(n, c.Heads*d)
	}
	b.parallel(n, 4, func(lo, hi int) {
		cos, sin := make([]float32, len(inv)), make([]float32, len(inv))
		for t := lo; t < hi; t++ {
			ropeAngles(cos, sin, inv, positions[t])
			ropeRow(qOut.f32, kOut.f32, gate, qs, ks, qgs, kgs, cos, sin, t, qw, c)
		}
	})
	if gate == nil {
		return qOut, kOut, nil, nil
	}
	return qOut, kOut, gate, nil
}

// ropeRow normalises and rotates row t's query and key heads, splitting off
// the gate of a gated query.
func ropeRow(qOut, kOut []float32, gate *Tensor, qs, ks, qgs, kgs, ct, st []float32, t, qw int, c tensor.RopeConfig) {
	d := c.HeadDim
	for h := 0; h < c.Heads; h++ {
		dst := qOut[(t*c.Heads+h)*d : (t*c.Heads+h+1)*d]
		if c.Gated {
			src := qs[t*qw+2*h*d:]
			copy(dst, src[:d])
			copy(gate.f32[(t*c.Heads+h)*d:(t*c.Heads+h+1)*d], src[d:2*d])
		} else {
			copy(dst, qs[t*qw+h*d:t*qw+(h+1)*d])
		}
		normRope(dst, qgs, c.Eps, ct, st, c.Norm)
	}
	for h := 0; h < c.KVHeads; h++ {
		dst := kOut[(t*c.KVHeads+h)*d : (t*c.KVHeads+h+1)*d]
		copy(dst, ks[(t*c.KVHeads+h)*d:(t*c.KVHeads+h+1)*d])
		normRope(dst, kgs, c.Eps, ct, st, c.Norm)
	}
}

// attentionInputs checks an attention config and the q [N, Heads·HeadDim], k and v [N, KVHeads·HeadDim] it
// applies to.
func attentionInputs(op string, q, k, v tensor.Tensor, c tensor.AttentionConfig) (qt, kt, vt *Tensor, err error) {
	if c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Heads%c.KVHeads != 0 {
		return nil, nil, nil, fmt.Errorf("cpu: %s: bad config %+v", op, c)
	}
	kvw := c.KVHeads * c.HeadDim
	if qt, err = matrix(op, "q", q, -1, c.Heads*c.HeadDim); err != nil {
		return nil, nil, nil, err
	}
	n := qt.shape[0]
	if kt, err = matrix(op, "k", k, n, kvw); err != nil {
		return nil, nil, nil, err
	}
	if vt, err = matrix(op, "v", v, n, kvw); err != nil {
		return nil, nil, nil, err
	}
	return qt, kt, vt, nil
}

// Attention is causal grouped-query attention over a prefix and segments.
func (b *Backend) Attention(q, k, v, kPrefix, vPrefix tensor.Tensor, lens []int, c tensor.AttentionConfig) (tensor.Tensor, error) {
	const op = "Attention"
	qt, kt, vt, err := attentionInputs(op, q, k, v, c)
	if err != nil {
		return nil, err
	}
	kvw, n := c.KVHeads*c.HeadDim, qt.shape[0]
	var kp, vp []float32
	p := 0
	if kPrefix != nil || vPrefix != nil {
		kpt, err := matrix(op, "kPrefix", kPrefix, -1, kvw)
		if err != nil {
			return nil, err
		}
		p = kpt.shape[0]
		vpt, err := matrix(op, "vPrefix", vPrefix, p, kvw)
		if err != nil {
			return nil, err
		}
		kp, vp = kpt.float32s(), vpt.float32s()
	}
	starts, ls, err := segments(op, lens, n)
	if err != nil {
		return nil, err
	}
	segs := make([]attnSeg, len(starts))
	for i, s0 := range starts {
		segs[i] = attnSeg{start: s0, n: ls[i], kstart: s0, keys: ls[i], kp: kp, vp: vp, p: p}
	}
	return b.attend(qt.float32s(), kt.float32s(), vt.float32s(), n, segs, c, nil), nil
}

// CausalConv1dSiLU is the depthwise causal convolution with SiLU.
func (b *Backend) CausalConv1dSiLU(x, w, state tensor.Tensor, lens []int) (tensor.Tensor, tensor.Tensor, error) {
	const op = "CausalConv1dSiLU"
	xt, err := matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	n, ch := xt.shape[0], xt.shape[1]
	wt, err := matrix(op, "w", w, ch, -1)
	if err != nil {
		return nil, nil, err
	}
	kw := wt.shape[1]
	if kw < 1 {
		return nil, nil, &tensor.ShapeError{Op: op, Arg: "w", Shape: wt.shape, Want: tensor.Dims(ch, -1) + " with K ≥ 1"}
	}
	hist := make([]float32, (kw-1)*ch)
	if state != nil {
		st, err := matrix(op, "state", state, kw-1, ch)
		if err != nil {
			return nil, nil, err
		}
		copy(hist, st.float32s())
	}
	starts, ls, err := segments(op, lens, n)
	if err != nil {
		return nil, nil, err
	}
	xs, ws := xt.float32s(), wt.float32s()
	hists := make([][]float32, len(starts))
	for i := range hists {
		hists[i] = hist
	}
	y := b.convolve(xs, ws, n, ch, kw, starts, ls, hists)
	if len(starts) != 1 {
		return y, nil, nil
	}
	return y, &Tensor{shape: []int{kw - 1, ch}, dtype: tensor.F32, f32: lastInputs(hist, xs, kw, ch)}, nil
}

func softplus(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// DeltaGates computes beta and the log decay g.
func (b *Backend) DeltaGates(bl, a, aLog, dtBias tensor.Tensor) (tensor.Tensor, tensor.Tensor, error) {
	const op = "DeltaGates"
	bt, err := matrix(op, "b", bl, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	n, h := bt.shape[0], bt.shape[1]
	at, err := matrix(op, "a", a, n, h)
	if err != nil {
		return nil, nil, err
	}
	lt, err := vector(op, "aLog", aLog, h)
	if err != nil {
		return nil, nil, err
	}
	dt, err := vector(op, "dtBias", dtBias, h)
	if err != nil {
		return nil, nil, err
	}
	bs, as, ls, ds := bt.float32s(), at.float32s(), lt.float32s(), dt.float32s()
	beta, g := newF32(n, h), newF32(n, h)
	negA := make([]float32, h)
	for i := range negA {
		negA[i] = -float32(math.Exp(float64(ls[i])))
	}
	b.parallel(n, 16, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			for i := 0; i < h; i++ {
				beta.f32[t*h+i] = sigmoid(bs[t*h+i])
				g.f32[t*h+i] = negA[i] * softplus(as[t*h+i]+ds[i])
			}
		}
	})
	return beta, g, nil
}

// GatedRMSNorm normalises and gates each head vector.
func (b *Backend) GatedRMSNorm(o, z, w tensor.Tensor, eps float32) (tensor.Tensor, error) {
	const op = "GatedRMSNorm"
	ot, err := matrix(op, "o", o, -1, -1)
	if err != nil {
		return nil, err
	}
	n, width := ot.shape[0], ot.shape[1]
	zt, err := matrix(op, "z", z, n, width)
	if err != nil {
		return nil, err
	}
	wt, err := get(op, "w", w)
	if err != nil {
		return nil, err
	}
	dv := tensor.Numel(wt.shape)
	if dv == 0 || width%dv != 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "w", Shape: wt.shape, Want: fmt.Sprintf("[d_v] dividing %d", width)}
	}
	os, zs, ws := ot.float32s(), zt.float32s(), wt.float32s()
	out := newF32Full(n, width)
	b.parallel(n*width/dv, 1, func(lo, hi int) {
		sz := make([]float32, dv)
		for v := lo; v < hi; v++ {
			y := out.f32[v*dv : (v+1)*dv]
			rmsRow(y, os[v*dv:(v+1)*dv], ws, eps, false)
			siluVec(sz, zs[v*dv:(v+1)*dv])
			for i, s := range sz {
				y[i] *= s
			}
		}
	})
	return out, nil
}

// Pointer computes Kev's option probabilities for one question.
func (b *Backend) Pointer(h tensor.Tensor, p *tensor.PointerHead, decide int, opts []int) ([]float32, error) {
	ph, err := pointerInputs("Pointer", h, p)
	if err != nil {
		return nil, err
	}
	return ph.probabilities("Pointer", decide, opts, b.parallel)
}

// pointerHead is a pointer head's weights and the hidden states it reads,
// as float32s.
type pointerHead struct {
	n, d, dp           int
	hs, wq, wk, bq, bk []float32
	scale, temp        float32
}

// pointerInputs checks the hidden states and the head and widens them.
func pointerInputs(op string, h tensor.Tensor, p *tensor.PointerHead) (*pointerHead, error) {
	if p == nil {
		return nil, fmt.Errorf("cpu: %s: nil head", op)
	}
	ht, err := matrix(op, "h", h, -1, -1)
	if err != nil {
		return nil, err
	}
	n, d := ht.shape[0], ht.shape[1]
	wq, err := matrix(op, "Wq", p.Wq, -1, d)
	if err != nil {
		return nil, err
	}
	dp := wq.shape[0]
	wk, err := matrix(op, "Wk", p.Wk, dp, d)
	if err != nil {
		return nil, err
	}
	bq, err := vector(op, "Bq", p.Bq, dp)
	if err != nil {
		return nil, err
	}
	bk, err := vector(op, "Bk", p.Bk, dp)
	if err != nil {
		return nil, err
	}
	temp := p.Temperature
	if temp == 0 {
		temp = 1
	}
	return &pointerHead{n: n, d: d, dp: dp, hs: ht.float32s(), wq: wq.float32s(), wk: wk.float32s(),
		bq: bq.float32s(), bk: bk.float32s(), scale: p.Scale, temp: temp}, nil
}

// lin returns w·h[row] + bias.
func (ph *pointerHead) lin(w, bias []float32, row int) []float32 {
	x := ph.hs[row*ph.d : (row+1)*ph.d]
	y := make([]float32, ph.dp)
	for i := range y {
		y[i] = dot(x, w[i*ph.d:(i+1)*ph.d]) + bias[i]
	}
	return y
}

// probabilities computes one question's option probabilities, the options'
// logits split over par. Each logit's arithmetic is the same however the
// options are split.
func (ph *pointerHead) probabilities(op string, decide int, opts []int, par func(n, align int, f func(lo, hi int))) ([]float32, error) {
	n := ph.n
	if decide < 0 || decide >= n {
		return nil, fmt.Errorf("cpu: %s: decide = %d outside the %d rows of h", op, decide, n)
	}
	if len(opts) == 0 {
		return nil, fmt.Errorf("cpu: %s: no options", op)
	}
	for j, o := range opts {
		if o < 0 || o >= n {
			return nil, fmt.Errorf("cpu: %s: opts[%d] = %d outside the %d rows of h", op, j, o, n)
		}
	}
	xq := ph.lin(ph.wq, ph.bq, decide)
	logits := make([]float32, len(opts))
	par(len(opts), 1, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			z := dot(ph.lin(ph.wk, ph.bk, opts[j]), xq) * ph.scale
			if ph.temp != 1 {
				z /= ph.temp
			}
			logits[j] = z
		}
	})
	maxv := float32(math.Inf(-1))
	for _, z := range logits {
		maxv = max(maxv, z)
	}
	var sum float32
	for j, z := range logits {
		logits[j] = float32(math.Exp(float64(z - maxv)))
		sum += logits[j]
	}
	for j := range logits {
		logits[j] /= sum
	}
	return logits, nil
}
