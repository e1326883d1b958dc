package layers

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor/cpu"
)

// config08B is Qwen3.5-0.8B's text shape (its released config.json) with a small
// vocabulary: the embedding is a gather, so its size does not change the
// prefill cost.
func config08B() qwen35.Config {
	c := qwen35.Config{
		HiddenSize: 1024, NumLayers: 24, IntermediateSize: 3584, VocabSize: 4096, RMSNormEps: 1e-6,
		NumHeads: 8, NumKVHeads: 2, HeadDim: 256, RopeTheta: 1e7, PartialRotaryFactor: 0.25, AttnOutputGate: true,
		LinearNumKeyHeads: 16, LinearNumValueHeads: 16, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearConvKernel: 4,
	}
	for i := 0; i < c.NumLayers; i++ {
		lt := qwen35.LinearAttention
		if (i+1)%4 == 0 {
			lt = qwen35.FullAttention
		}
		c.LayerTypes = append(c.LayerTypes, lt)
	}
	return c
}

// bf16Weights draws random weights stored as BF16 (vectors as F32).
func bf16Weights(c qwen35.Config, seed uint64) *qwen35.Weights {
	r := rand.New(rand.NewPCG(seed, 3))
	w := randomWeights(rand.New(rand.NewPCG(seed, 4)), qwen35.Config{
		HiddenSize: 1, NumLayers: 0, IntermediateSize: 1, VocabSize: 1}, false)
	w.Config = c
	w.Tensors = map[string]*qwen35.Tensor{}
	mat := func(name string, scale float32, shape ...int) {
		n := 1
		for _, s := range shape {
			n *= s
		}
		bits := make([]uint16, n)
		for i := range bits {
			bits[i] = half.BF16FromF32(scale * (2*r.Float32() - 1))
		}
		w.Tensors[name] = &qwen35.Tensor{Shape: shape, DType: qwen35.BF16, BF16: bits}
	}
	vec := func(name string, scale, offset float32, n int) {
		v := make([]float32, n)
		for i := range v {
			v[i] = offset + scale*(2*r.Float32()-1)
		}
		w.Tensors[name] = &qwen35.Tensor{Shape: []int{n}, DType: qwen35.F32, F32: v}
	}
	d, I := c.HiddenSize, c.IntermediateSize
	s := float32(1 / 32.0)
	mat("embed_tokens.weight", 1, c.VocabSize, d)
	vec("norm.weight", 0.1, 0, d)
	for i, lt := range c.LayerTypes {
		p := fmt.Sprintf("layers.%d.", i)
		vec(p+"input_layernorm.weight", 0.1, 0, d)
		vec(p+"post_attention_layernorm.weight", 0.1, 0, d)
		mat(p+"mlp.gate_proj.weight", s, I, d)
		mat(p+"mlp.up_proj.weight", s, I, d)
		mat(p+"mlp.down_proj.weight", s/2, d, I)
		if lt == qwen35.FullAttention {
			a := p + "self_attn."
			mat(a+"q_proj.weight", s, 2*c.NumHeads*c.HeadDim, d)
			mat(a+"k_proj.weight", s, c.NumKVHeads*c.HeadDim, d)
			mat(a+"v_proj.weight", s, c.NumKVHeads*c.HeadDim, d)
			mat(a+"o_proj.weight", s, d, c.NumHeads*c.HeadDim)
			vec(a+"q_norm.weight", 0.1, 0, c.HeadDim)
			vec(a+"k_norm.weight", 0.1, 0, c.HeadDim)
			continue
		}
		g := p + "linear_attn."
		mat(g+"in_proj_qkv.weight", s, c.ConvDim(), d)
		mat(g+"in_proj_z.weight", s, c.LinearValueDim(), d)
		mat(g+"in_proj_b.weight", s, c.LinearNumValueHeads, d)
		mat(g+"in_proj_a.weight", s, c.LinearNumValueHeads, d)
		mat(g+"conv1d.weight", 0.5, c.ConvDim(), 1, c.LinearConvKernel)
		mat(g+"out_proj.weight", s, d, c.LinearValueDim())
		vec(g+"norm.weight", 0.1, 1, c.LinearValueHeadDim)
		vec(g+"A_log", 1, 0, c.LinearNumValueHeads)
		vec(g+"dt_bias", 1, 0, c.LinearNumValueHeads)
	}
	return w
}

// BenchmarkPrefill256 measures a 256-token prefill of a random
// Qwen3.5-0.8B-shaped model (24 layers, bf16 weights) on the CPU backend.
func BenchmarkPrefill256(b *testing.B) {
	c := config08B()
	if testing.Short() {
		c.NumLayers, c.LayerTypes = 4, c.LayerTypes[:4]
	}
	m, err := New(cpu.New(), bf16Weights(c, 1))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]int32, 256)
	for i := range ids {
		ids[i] = int32((i*7919 + 13) % c.VocabSize)
	}
	b.ResetTimer()
	for b.Loop() {
		st, h, err := m.Prefill(ids)
		if err != nil {
			b.Fatal(err)
		}
		st.Free()
		m.b.Free(h)
	}
	b.ReportMetric(float64(len(ids)*b.N)/b.Elapsed().Seconds(), "tokens/s")
}
