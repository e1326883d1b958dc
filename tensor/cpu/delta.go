package cpu

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/tensor"
)

// l2Scale writes v/sqrt(Σv² + 1e-6)·scale into dst.
func l2Scale(dst, v []float32, scale float32) {
	r := float32(1/math.Sqrt(float64(sumSq(v)+1e-6))) * scale
	scaleVec(dst, v, r)
}

// deltaOperands validates a delta rule call's config and row operands and
// prepares its inputs; for the recurrent form (Chunk 0), the normalised q
// (scaled) and k of every token and key head. The chunked form normalises
// a chunk's rows as it prepares the chunk.
func (b *Backend) deltaOperands(op string, qkv, g, beta tensor.Tensor, c tensor.DeltaConfig) (*deltaInput, error) {
	if c.KeyHeads <= 0 || c.ValueHeads <= 0 || c.KeyDim <= 0 || c.ValueDim <= 0 || c.ValueHeads%c.KeyHeads != 0 || c.Chunk < 0 {
		return nil, fmt.Errorf("cpu: %s: bad config %+v", op, c)
	}
	hk, hv, dk, dv := c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim
	width := 2*hk*dk + hv*dv
	xt, err := matrix(op, "qkv", qkv, -1, width)
	if err != nil {
		return nil, err
	}
	n := xt.shape[0]
	gt, err := matrix(op, "g", g, n, hv)
	if err != nil {
		return nil, err
	}
	bt, err := matrix(op, "beta", beta, n, hv)
	if err != nil {
		return nil, err
	}
	in := &deltaInput{n: n, hk: hk, hv: hv, dk: dk, dv: dv, x: xt.float32s(), width: width, g: gt.float32s(), beta: bt.float32s(),
		qscale: float32(1 / math.Sqrt(float64(dk)))}
	if c.Chunk > 0 {
		return in, nil
	}
	in.q, _ = allocF32Dirty(n * hk * dk) // written in full below; handed back by free
	in.k, _ = allocF32Dirty(n * hk * dk)
	b.parallel(n, 16, func(lo, hi int) {
		// Sixteen rows at a time, head by head: their inputs stay in cache
		// while each head's outputs are written in one run.
		for t0 := lo; t0 < hi; t0 += 16 {
			for h := 0; h < hk; h++ {
				o := (h*n + t0) * dk
				in.normalise(in.q[o:], in.k[o:], h, t0, min(16, hi-t0))
			}
		}
	})
	return in, nil
}

// normalise writes the normalised query (scaled) and key rows [t0, t0+m)
// of key head kh into q and k, [m, dk] each.
func (in *deltaInput) normalise(q, k []float32, kh, t0, m int) {
	dk := in.dk
	for r := range m {
		row := in.x[(t0+r)*in.width:]
		l2Scale(q[r*dk:(r+1)*dk], row[kh*dk:(kh+1)*dk], in.qscale)
		l2Scale(k[r*dk:(r+1)*dk], row[(in.hk+kh)*dk:(in.hk+kh+1)*dk], 1)
	}
}

// free hands the normalised q and k back for reuse.
func (in *deltaInput) free() {
	recycle(in.q)
	recycle(in.k)
	in.q, in.k = nil, nil
}

// deltaState unwraps a recurrent state [H_v, d_k, d_v] as float32s.
func deltaState(op, arg string, state tensor.Tensor, c tensor.DeltaConfig) ([]float32, error) {
	st, err := get(op, arg, state)
	if err != nil {
		return nil, err
	}
	hv, dk, dv := c.ValueHeads, c.KeyDim, c.ValueDim
	if len(st.shape) != 3 || st.shape[0] != hv || st.shape[1] != dk || st.shape[2] != dv {
		return nil, &tensor.ShapeError{Op: op, Arg: arg, Shape: st.shape, Want: tensor.Dims(hv, dk, dv)}
	}
	return st.float32s(), nil
}

// GatedDeltaRule runs the gated delta rule, chunked or recurrent.
func (b *Backend) GatedDeltaRule(qkv, g, beta, state tensor.Tensor, lens []int, c tensor.DeltaConfig) (tensor.Tensor, tensor.Tensor, error) {
	const op = "GatedDeltaRule"
	in, err := b.deltaOperands(op, qkv, g, beta, c)
	if err != nil {
		return nil, nil, err
	}
	defer in.free()
	var s0 []float32
	if state != nil {
		if s0, err = deltaState(op, "state", state, c); err != nil {
			return nil, nil, err
		}
	}
	n, hv, dk, dv := in.n, in.hv, in.dk, in.dv
	starts, ls, err := segments(op, lens, n)
	if err != nil {
		return nil, nil, err
	}
	out := newF32Full(n, hv*dv)
	var final *Tensor
	if len(starts) == 1 {
		final = newF32(hv, dk, dv)
	}
	size := dk * dv
	jobs := make([]deltaJob, 0, len(starts)*hv)
	for seg := range starts {
		for h := 0; h < hv; h++ {
			jb := deltaJob{h: h, s0: starts[seg], l: ls[seg]}
			if s0 != nil {
				jb.from = s0[h*size : (h+1)*size]
			}
			if final != nil {
				jb.to = final.f32[h*size : (h+1)*size]
			}
			jobs = append(jobs, jb)
		}
	}
	b.runDelta(in, jobs, c.Chunk, out.f32)
	if final == nil {
		return out, nil, nil
	}
	return out, final, nil
}

// deltaInput holds one call's prepared inputs.
type deltaInput struct {
	n, hk, hv, dk, dv, width int
	q, k                     []float32 // [hk, n, dk]: a head's rows together; q already scaled (recurrent form only)
	qscale                   float32   // q's scale, 1/√dk
	x                        []float32 // raw qkv rows; v at column 2·hk·dk
	g, beta                  []float32 // [n, hv]
}

func (in *deltaInput) qRow(t, h int) []float32 {
	kh := h / (in.hv / in.hk)
	return in.q[(kh*in.n+t)*in.dk : (kh*in.n+t+1)*in.dk]
}

func (in *deltaInput) kRow(t, h int) []float32 {
	kh := h / (in.hv / in.hk)
	return in.k[(kh*in.n+t)*in.dk : (kh*in.n+t+1)*in.dk]
}

func (in *deltaInput) vRow(t, h int) []float32 {
	off := t*in.width + 2*in.hk*in.dk + h*in.dv
	return in.x[off : off+in.dv]
}

// recurrent runs value head h over rows [s0, s0+l) token by token, updating
// S [dk, dv] in place and writing outputs into out [n, hv·dv].
func (in *deltaInput) recurrent(S []float32, h, s0, l int, out []float32) {
	dk, dv := in.dk, in.dv
	r := make([]float32, dv)
	for t := s0; t < s0+l; t++ {
		a := decay(in.g[t*in.hv+h])
		bt := in.beta[t*in.hv+h]
		k, q, v := in.kRow(t, h), in.qRow(t, h), in.vRow(t, h)
		for i := range S {
			S[i] *= a
		}
		clear(r)
		mulAddRows(r, S, dv, k)
		for j := range r {
			r[j] = bt * (v[j] - r[j])
		}
		for i := 0; i < dk; i++ {
			mulAddRows(S[i*dv:(i+1)*dv], r, dv, k[i:i+1])
		}
		o := out[t*in.hv*dv+h*dv : t*in.hv*dv+(h+1)*dv]
		clear(o)
		mulAddRows(o, S, dv, q)
	}
}

// axpy adds a·x to y.
func axpy(y, x []float32, a float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}
