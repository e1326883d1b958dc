package layers

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
)

// referenceModel runs the model in float64 from the Qwen3.5 definitions (transformers' qwen3_5 modeling),
// token by token (recurrent DeltaNet, explicit causal attention), and returns
// the residual stream at every observation point.
func referenceModel(w *qwen35.Weights, ids []int32) map[int][]float64 {
	c := w.Config
	d, T := c.HiddenSize, len(ids)
	get := func(name string) []float64 { return f64(w.Tensors[name].Float32s()) }
	// With BF16 matrices the CPU computes each product in bf16: its input is
	// rounded to bf16 (the weights already are).
	bf16 := false
	for _, t := range w.Tensors {
		bf16 = bf16 || t.DType == qwen35.BF16
	}
	lin := func(wt []float64, x []float64) []float64 {
		y := make([]float64, len(wt)/len(x))
		if bf16 {
			xr := make([]float64, len(x))
			for j, v := range x {
				xr[j] = float64(half.RoundBF16(float32(v)))
			}
			x = xr
		}
		for i := range y {
			for j, v := range x {
				y[i] += wt[i*len(x)+j] * v
			}
		}
		return y
	}
	sig := func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	rms := func(x, g []float64, plusOne bool) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+c.RMSNormEps)
		y := make([]float64, len(x))
		for i, v := range x {
			gi := g[i]
			if plusOne {
				gi++
			}
			y[i] = v * r * gi
		}
		return y
	}
	out := map[int][]float64{}
	h := make([][]float64, T)
	emb := get("embed_tokens.weight")
	for t, id := range ids {
		h[t] = append([]float64(nil), emb[int(id)*d:(int(id)+1)*d]...)
	}
	flat := func() []float64 {
		var f []float64
		for _, r := range h {
			f = append(f, r...)
		}
		return f
	}
	out[0] = flat()
	for li, lt := range c.LayerTypes {
		p := fmt.Sprintf("layers.%d.", li)
		u := make([][]float64, T)
		for t := range h {
			u[t] = rms(h[t], get(p+"input_layernorm.weight"), true)
		}
		var mix [][]float64
		if lt == qwen35.FullAttention {
			mix = refAttention(w, p+"self_attn.", u, lin, rms, sig)
		} else {
			mix = refDelta(w, p+"linear_attn.", u, lin, sig)
		}
		for t := range h {
			for i := range h[t] {
				h[t][i] += mix[t][i]
			}
			v := rms(h[t], get(p+"post_attention_layernorm.weight"), true)
			gt, up := lin(get(p+"mlp.gate_proj.weight"), v), lin(get(p+"mlp.up_proj.weight"), v)
			for i := range gt {
				gt[i] = gt[i] * sig(gt[i]) * up[i]
			}
			f := lin(get(p+"mlp.down_proj.weight"), gt)
			for i := range h[t] {
				h[t][i] += f[i]
			}
		}
		out[li+1] = flat()
	}
	var fin []float64
	for t := range h {
		fin = append(fin, rms(h[t], get("norm.weight"), true)...)
	}
	out[c.NumLayers+1] = fin
	return out
}

type linFn func(w, x []float64) []float64

func refAttention(w *qwen35.Weights, p string, u [][]float64, lin linFn, rms func(x, g []float64, plusOne bool) []float64, sig func(float64) float64) [][]float64 {
	c := w.Config
	get := func(name string) []float64 { return f64(w.Tensors[p+name].Float32s()) }
	H, KV, D, R := c.NumHeads, c.NumKVHeads, c.HeadDim, c.RotaryDim()
	rope := func(x []float64, pos int) {
		for j := 0; j < R/2; j++ {
			inv := float32(1 / math.Pow(c.RopeTheta, float64(2*j)/float64(R)))
			phi := float64(float32(pos) * inv)
			a, b := x[j], x[j+R/2]
			x[j], x[j+R/2] = a*math.Cos(phi)-b*math.Sin(phi), b*math.Cos(phi)+a*math.Sin(phi)
		}
	}
	T := len(u)
	qs, gs, ks, vs := make([][]float64, T), make([][]float64, T), make([][]float64, T), make([][]float64, T)
	for t := range u {
		qg, k, v := lin(get("q_proj.weight"), u[t]), lin(get("k_proj.weight"), u[t]), lin(get("v_proj.weight"), u[t])
		for h := 0; h < H; h++ {
			q := rms(qg[2*h*D:2*h*D+D], get("q_norm.weight"), true)
			rope(q, t)
			qs[t] = append(qs[t], q...)
			gs[t] = append(gs[t], qg[2*h*D+D:2*h*D+2*D]...)
		}
		for h := 0; h < KV; h++ {
			kk := rms(k[h*D:(h+1)*D], get("k_norm.weight"), true)
			rope(kk, t)
			ks[t] = append(ks[t], kk...)
		}
		vs[t] = v
	}
	out := make([][]float64, T)
	for t := range u {
		a := make([]float64, H*D)
		for h := 0; h < H; h++ {
			kh := h / (H / KV)
			sc := make([]float64, t+1)
			mx := math.Inf(-1)
			for s := 0; s <= t; s++ {
				for i := 0; i < D; i++ {
					sc[s] += qs[t][h*D+i] * ks[s][kh*D+i]
				}
				sc[s] /= math.Sqrt(float64(D))
				mx = math.Max(mx, sc[s])
			}
			var sum float64
			for s := range sc {
				sc[s] = math.Exp(sc[s] - mx)
				sum += sc[s]
			}
			for s := range sc {
				for i := 0; i < D; i++ {
					a[h*D+i] += sc[s] / sum * vs[s][kh*D+i]
				}
			}
		}
		for i := range a {
			a[i] *= sig(gs[t][i])
		}
		out[t] = lin(get("o_proj.weight"), a)
	}
	return out
}

func refDelta(w *qwen35.Weights, p string, u [][]float64, lin linFn, sig func(float64) float64) [][]float64 {
	c := w.Config
	get := func(name string) []float64 { return f64(w.Tensors[p+name].Float32s()) }
	hk, hv, dk, dv, kw, conv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernel, c.ConvDim()
	cw, aLog, dtb, nw := get("conv1d.weight"), get("A_log"), get("dt_bias"), get("norm.weight")
	hist := make([]float64, (kw-1)*conv)
	S := make([]float64, hv*dk*dv)
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
	out := make([][]float64, len(u))
	for t := range u {
		x, z, bb, a := lin(get("in_proj_qkv.weight"), u[t]), lin(get("in_proj_z.weight"), u[t]), lin(get("in_proj_b.weight"), u[t]), lin(get("in_proj_a.weight"), u[t])
		win := append(append([]float64(nil), hist...), x...)
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
			sp := a[h] + dtb[h]
			if sp <= 20 {
				sp = math.Log1p(math.Exp(sp))
			}
			decay := math.Exp(-math.Exp(aLog[h]) * sp)
			beta := sig(bb[h])
			Sh := S[h*dk*dv : (h+1)*dk*dv]
			for i := range Sh {
				Sh[i] *= decay
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
			rr := 1 / math.Sqrt(ss/float64(dv)+c.RMSNormEps)
			for j := range o {
				y[h*dv+j] = o[j] * rr * nw[j] * z[h*dv+j] * sig(z[h*dv+j])
			}
		}
		out[t] = lin(get("out_proj.weight"), y)
	}
	return out
}
