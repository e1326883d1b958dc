package cpu

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/tensor"
)

// l2Scale writes v/sqrt(Σv² + 1e-6)·scale into dst.
func l2Scale(dst, v []float32, scale float32) {
	var ss float32
	for _, x := range v {
		ss += x * x
	}
	r := float32(1/math.Sqrt(float64(ss+1e-6))) * scale
	for i, x := range v {
		dst[i] = x * r
	}
}

// deltaOperands validates a delta rule call's config and row operands and
// prepares its inputs: normalised q (scaled) and k per token and key head.
func deltaOperands(op string, qkv, g, beta tensor.Tensor, c tensor.DeltaConfig) (*deltaInput, error) {
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
	xs, gs, bs := xt.float32s(), gt.float32s(), bt.float32s()
	qn, kn := make([]float32, n*hk*dk), make([]float32, n*hk*dk)
	qscale := float32(1 / math.Sqrt(float64(dk)))
	for t := 0; t < n; t++ {
		for h := 0; h < hk; h++ {
			l2Scale(qn[(t*hk+h)*dk:(t*hk+h+1)*dk], xs[t*width+h*dk:t*width+(h+1)*dk], qscale)
			l2Scale(kn[(t*hk+h)*dk:(t*hk+h+1)*dk], xs[t*width+hk*dk+h*dk:t*width+hk*dk+(h+1)*dk], 1)
		}
	}
	return &deltaInput{n: n, hk: hk, hv: hv, dk: dk, dv: dv, q: qn, k: kn, x: xs, width: width, g: gs, beta: bs}, nil
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
	in, err := deltaOperands(op, qkv, g, beta, c)
	if err != nil {
		return nil, nil, err
	}
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
	out := newF32(n, hv*dv)
	var final *Tensor
	if len(starts) == 1 {
		final = newF32(hv, dk, dv)
	}
	jobs := len(starts) * hv
	b.parallel(jobs, 1, func(lo, hi int) {
		S := make([]float32, dk*dv)
		for job := lo; job < hi; job++ {
			seg, h := job/hv, job%hv
			if s0 != nil {
				copy(S, s0[h*dk*dv:(h+1)*dk*dv])
			} else {
				clear(S)
			}
			in.run(S, h, starts[seg], ls[seg], c.Chunk, out.f32)
			if final != nil {
				copy(final.f32[h*dk*dv:(h+1)*dk*dv], S)
			}
		}
	})
	if final == nil {
		return out, nil, nil
	}
	return out, final, nil
}

// deltaInput holds one call's prepared inputs.
type deltaInput struct {
	n, hk, hv, dk, dv, width int
	q, k                     []float32 // [n, hk, dk], q already scaled
	x                        []float32 // raw qkv rows; v at column 2·hk·dk
	g, beta                  []float32 // [n, hv]
}

// run advances S [dk, dv] of value head h over rows [s0, s0+l), in the
// recurrent form (chunk 0) or the chunked one.
func (in *deltaInput) run(S []float32, h, s0, l, chunk int, out []float32) {
	if chunk == 0 {
		in.recurrent(S, h, s0, l, out)
	} else {
		in.chunked(S, h, s0, l, chunk, out)
	}
}

func (in *deltaInput) qRow(t, h int) []float32 {
	kh := h / (in.hv / in.hk)
	return in.q[(t*in.hk+kh)*in.dk : (t*in.hk+kh+1)*in.dk]
}

func (in *deltaInput) kRow(t, h int) []float32 {
	kh := h / (in.hv / in.hk)
	return in.k[(t*in.hk+kh)*in.dk : (t*in.hk+kh+1)*in.dk]
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
		a := float32(math.Exp(float64(in.g[t*in.hv+h])))
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

// chunked runs value head h over rows [s0, s0+l) in chunks of cl tokens with
// the parallel form (WY representation), updating S in place. Per chunk,
// with γ the in-chunk cumulative log decay and Γ = exp(γ):
// o_r = Γ_r Sᵀq_r + Σ_{s≤r} exp(γ_r−γ_s)(q_r·k_s) δ_s and
// S' = Γ_m S + Σ_s exp(γ_m−γ_s) k_s δ_sᵀ.
func (in *deltaInput) chunked(S []float32, h, s0, l, cl int, out []float32) {
	dk, dv := in.dk, in.dv
	gam := make([]float32, cl)         // in-chunk cumulative log decay γ
	L := make([]float32, cl*cl)        // strictly lower (β_r k_r·k_s)·exp(γ_r−γ_s)
	U := make([]float32, cl*dv)        // new values, then V_new = U − W·S
	QK := make([]float32, cl*cl)       // (q_r·k_s)·exp(γ_r−γ_s), s ≤ r
	cf := make([]float32, max(dk, cl)) // coefficients of one row combination
	ds := make([]float32, cl)          // exp(γ_m−γ_s)
	kh := h / (in.hv / in.hk)
	ld := in.hk * dk // stride between tokens in q and k
	for c0 := s0; c0 < s0+l; c0 += cl {
		m := min(cl, s0+l-c0)
		var acc float32
		for r := 0; r < m; r++ {
			acc += in.g[(c0+r)*in.hv+h]
			gam[r] = acc
		}
		// Raw products q_r·k_s into QK and k_r·k_s into L, then scaled.
		qs, ks := in.q[(c0*in.hk+kh)*dk:], in.k[(c0*in.hk+kh)*dk:]
		clear(QK)
		clear(L)
		addABt(QK, cl, qs, ld, ks, ld, m, m, dk)
		addABt(L, cl, ks, ld, ks, ld, m, m, dk)
		for r := 0; r < m; r++ {
			br := in.beta[(c0+r)*in.hv+h]
			for s := 0; s <= r; s++ {
				d := float32(math.Exp(float64(gam[r] - gam[s])))
				if s < r {
					L[r*cl+s] = br * L[r*cl+s] * d
				}
				QK[r*cl+s] *= d
			}
		}
		// Forward substitution for the new values δ = (I+L)⁻¹(diag(β)V − diag(βΓ)K·S):
		// δ_r = β_r v_r − β_r Γ_r Sᵀk_r − Σ_{s<r} L_rs δ_s.
		for r := 0; r < m; r++ {
			br := in.beta[(c0+r)*in.hv+h]
			ur := U[r*dv : (r+1)*dv]
			v, k := in.vRow(c0+r, h), in.kRow(c0+r, h)
			gr := br * float32(math.Exp(float64(gam[r])))
			for j := range ur {
				ur[j] = br * v[j]
			}
			for i := 0; i < dk; i++ {
				cf[i] = -gr * k[i]
			}
			mulAddRows(ur, S, dv, cf[:dk])
			for s := 0; s < r; s++ {
				cf[s] = -L[r*cl+s]
			}
			mulAddRows(ur, U, dv, cf[:r])
		}
		// Outputs: O_r = Γ_r q_r·S + Σ_{s≤r} QK_rs V_new_s.
		for r := 0; r < m; r++ {
			o := out[(c0+r)*in.hv*dv+h*dv : (c0+r)*in.hv*dv+(h+1)*dv]
			clear(o)
			q := in.qRow(c0+r, h)
			gr := float32(math.Exp(float64(gam[r])))
			for i := 0; i < dk; i++ {
				cf[i] = gr * q[i]
			}
			mulAddRows(o, S, dv, cf[:dk])
			mulAddRows(o, U, dv, QK[r*cl:r*cl+r+1])
		}
		// State: S = Γ_m S + Σ_s exp(γ_m − γ_s) k_s V_new_sᵀ, row by row of S.
		gm := float32(math.Exp(float64(gam[m-1])))
		for i := range S {
			S[i] *= gm
		}
		for s := 0; s < m; s++ {
			ds[s] = float32(math.Exp(float64(gam[m-1] - gam[s])))
		}
		for i := 0; i < dk; i++ {
			for s := 0; s < m; s++ {
				cf[s] = ds[s] * ks[s*ld+i]
			}
			mulAddRows(S[i*dv:(i+1)*dv], U, dv, cf[:m])
		}
	}
}
