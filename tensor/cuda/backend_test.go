//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/backendtest"
	"github.com/kevgo/kev/tensor/cpu"
)

// TestConformance runs the shared backend suite. Its inputs are all F32, so every operation runs its F32 path
// (fp32 storage and arithmetic), and the tolerance is near fp32's; the BF16 paths are checked by
// TestModelMatchesCPU and the kernel tests.
func TestConformance(t *testing.T) {
	b := NewOn(dev)
	defer b.Trim()
	backendtest.RunAll(t, b, backendtest.Tolerance{F32: 1e-4, BF16: 1e-4, F16: 1e-4})
	held, cached := b.MemStats()
	t.Logf("pool: %d bytes held, %d cached", held, cached)
}

// TestBF16Ops checks the BF16 fast paths (aligned widths) of the element-wise operations against the F32 paths
// of the same backend, on bf16-representable inputs.
func TestBF16Ops(t *testing.T) {
	r := newRand(t)
	b := NewOn(dev)
	defer b.Trim()
	const m, n = 7, 64
	pair := func(shape []int, scale float64) (tensor.Tensor, tensor.Tensor) {
		bits := randBF16(r, tensor.Numel(shape), scale)
		f := make([]float32, len(bits))
		for i, v := range bits {
			f[i] = half.BF16ToF32(v)
		}
		x16, err := b.FromBits(tensor.BF16, shape, bits)
		if err != nil {
			t.Fatal(err)
		}
		x32, err := b.FromFloat32(shape, f)
		if err != nil {
			t.Fatal(err)
		}
		return x16, x32
	}
	gain, err := b.FromFloat32([]int{n}, randVals(r, n, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	x16, x32 := pair([]int{m, n}, 3)
	r16, r32 := pair([]int{m, n}, 3)
	w16, w32 := pair([]int{24, n}, 0.3)
	table16, table32 := pair([]int{11, n}, 2)
	cmp := func(what string, got, want tensor.Tensor, tol float64) {
		t.Helper()
		if got.DType() != tensor.BF16 {
			t.Errorf("%s: result type %v, want BF16", what, got.DType())
		}
		g, err := b.ToHost(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := b.ToHost(want)
		if err != nil {
			t.Fatal(err)
		}
		if e := relErr(g, w); !(e <= tol) {
			t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
		}
	}
	const tol = 1e-2 // one bf16 rounding of the result (and of the sum for AddRMSNorm)
	y16, _ := b.RMSNorm(x16, gain, 1e-6, true)
	y32, _ := b.RMSNorm(x32, gain, 1e-6, true)
	cmp("RMSNorm", y16, y32, tol)
	s16, n16, err := b.AddRMSNorm(x16, r16, gain, 1e-6, false)
	if err != nil {
		t.Fatal(err)
	}
	s32, n32, _ := b.AddRMSNorm(x32, r32, gain, 1e-6, false)
	cmp("AddRMSNorm sum", s16, s32, tol)
	cmp("AddRMSNorm normed", n16, n32, tol)
	y16, _ = b.SwiGLU(x16)
	y32, _ = b.SwiGLU(x32)
	cmp("SwiGLU", y16, y32, tol)
	y16, _ = b.SigmoidGate(x16, r16)
	y32, _ = b.SigmoidGate(x32, r32)
	cmp("SigmoidGate", y16, y32, tol)
	y16, err = b.MatMul(x16, w16)
	if err != nil {
		t.Fatal(err)
	}
	y32, _ = b.MatMul(x32, w32)
	cmp("MatMul", y16, y32, tol)
	ids := []int32{3, 0, 10, 3}
	y16, _ = b.Embedding(table16, ids)
	y32, _ = b.Embedding(table32, ids)
	cmp("Embedding", y16, y32, 0)
}

func randVals(r *rand.Rand, n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(scale * (2*r.Float64() - 1))
	}
	return out
}

// relErr is max|got − want| / max|want| (infinite for a NaN).
func relErr(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var scale, worst float64
	for i, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
		d := math.Abs(float64(got[i]) - float64(w))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		worst = math.Max(worst, d)
	}
	return worst / math.Max(scale, 1e-30)
}

// modelWeights draws a Qwen3.5 model with BF16 matrices and F32 vectors, scaled to keep activations of order one.
func modelWeights(r *rand.Rand, c qwen35.Config) *qwen35.Weights {
	w := &qwen35.Weights{Config: c, Tensors: map[string]*qwen35.Tensor{}}
	put := func(name string, matrix bool, scale, offset float64, shape ...int) {
		v := randVals(r, tensor.Numel(shape), scale)
		for i := range v {
			v[i] += float32(offset)
		}
		t := &qwen35.Tensor{Shape: shape, DType: qwen35.F32, F32: v}
		if matrix {
			t.DType, t.F32, t.BF16 = qwen35.BF16, nil, make([]uint16, len(v))
			for i, x := range v {
				t.BF16[i] = half.BF16FromF32(x)
			}
		}
		w.Tensors[name] = t
	}
	d, I := c.HiddenSize, c.IntermediateSize
	s := 1 / math.Sqrt(float64(d))
	put("embed_tokens.weight", true, 1, 0, c.VocabSize, d)
	put("norm.weight", false, 0.2, 0, d)
	for i, lt := range c.LayerTypes {
		p := fmt.Sprintf("layers.%d.", i)
		put(p+"input_layernorm.weight", false, 0.2, 0, d)
		put(p+"post_attention_layernorm.weight", false, 0.2, 0, d)
		put(p+"mlp.gate_proj.weight", true, s, 0, I, d)
		put(p+"mlp.up_proj.weight", true, s, 0, I, d)
		put(p+"mlp.down_proj.weight", true, 1/math.Sqrt(float64(I)), 0, d, I)
		if lt == qwen35.FullAttention {
			a := p + "self_attn."
			put(a+"q_proj.weight", true, s, 0, c.NumHeads*c.HeadDim*2, d)
			put(a+"k_proj.weight", true, s, 0, c.NumKVHeads*c.HeadDim, d)
			put(a+"v_proj.weight", true, s, 0, c.NumKVHeads*c.HeadDim, d)
			put(a+"o_proj.weight", true, 1/math.Sqrt(float64(c.NumHeads*c.HeadDim)), 0, d, c.NumHeads*c.HeadDim)
			put(a+"q_norm.weight", false, 0.2, 0, c.HeadDim)
			put(a+"k_norm.weight", false, 0.2, 0, c.HeadDim)
			continue
		}
		g := p + "linear_attn."
		put(g+"in_proj_qkv.weight", true, s, 0, c.ConvDim(), d)
		put(g+"in_proj_z.weight", true, s, 0, c.LinearValueDim(), d)
		put(g+"in_proj_b.weight", true, s, 0, c.LinearNumValueHeads, d)
		put(g+"in_proj_a.weight", true, s, 0, c.LinearNumValueHeads, d)
		put(g+"conv1d.weight", true, 0.6, 0, c.ConvDim(), 1, c.LinearConvKernel)
		put(g+"out_proj.weight", true, 1/math.Sqrt(float64(c.LinearValueDim())), 0, d, c.LinearValueDim())
		put(g+"norm.weight", false, 0.2, 1, c.LinearValueHeadDim)
		put(g+"A_log", false, 1.5, 0, c.LinearNumValueHeads)
		put(g+"dt_bias", false, 1, 0, c.LinearNumValueHeads)
	}
	return w
}

// modelConfigs: an odd small model (every size unaligned: the general kernels) and one with aligned sizes (the
// tensor-core GEMM and the bf16 fast paths), both with d_k ≠ d_v or grouped heads and attention in the middle.
func modelConfigs() map[string]qwen35.Config {
	lin, full := qwen35.LinearAttention, qwen35.FullAttention
	return map[string]qwen35.Config{
		"odd": {HiddenSize: 24, NumLayers: 5, IntermediateSize: 20, VocabSize: 50, RMSNormEps: 1e-6,
			LayerTypes: []qwen35.LayerType{lin, lin, full, lin, full},
			NumHeads:   6, NumKVHeads: 2, HeadDim: 16, RopeTheta: 1e7, PartialRotaryFactor: 0.5, AttnOutputGate: true,
			LinearNumKeyHeads: 2, LinearNumValueHeads: 6, LinearKeyHeadDim: 8, LinearValueHeadDim: 4, LinearConvKernel: 4},
		"aligned": {HiddenSize: 256, NumLayers: 4, IntermediateSize: 512, VocabSize: 320, RMSNormEps: 1e-6,
			LayerTypes: []qwen35.LayerType{lin, lin, lin, full},
			NumHeads:   4, NumKVHeads: 2, HeadDim: 64, RopeTheta: 1e7, PartialRotaryFactor: 0.25, AttnOutputGate: true,
			LinearNumKeyHeads: 2, LinearNumValueHeads: 4, LinearKeyHeadDim: 64, LinearValueHeadDim: 64, LinearConvKernel: 4},
	}
}

func randomIDs(r *rand.Rand, n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(r.IntN(vocab))
	}
	return ids
}

// TestModelMatchesCPU runs the same random bf16 model on "cpu" (fp32 activations) and "cuda" (bf16 activations):
// a prefill, then three rows continuing its state, comparing the final hidden states.
//
// The bound is 2e-2 relative (RMS of the difference over RMS of the reference) for the 256-wide model. The odd
// model gets 0.25: its rows are 24 wide, so the relative error of the bf16
// residual stream (one rounding, 2⁻⁹ relative, per add and per stored activation) averages over few elements and
// swings with the random draw. Over eight H200 runs with fresh weights its prefill error was 0.0129, 0.0206,
// 0.0323, 0.0329, 0.0378 and 0.0474 (and its rows' 0.012–0.021), while the aligned model stayed at 0.010–0.0125;
// KEV_SEED=1796191832365373856 draws weights whose rows reach 0.0723 (measured 2026-12-02 with two versions of the
// delta-rule kernels, the same value: the odd model's widths take none of the tensor-core paths), and
// KEV_SEED=1796215415296106504 rows that reach 0.177 (with the kernels before and after gdn_rows became the default,
// the same value; twelve fresh draws in the same run: 0.0096–0.0881). The bf16 gate
// that matters is at realistic widths: the golden checkpoints (TestPredictorGoldenCUDA) and the full-size
// comparison with PyTorch.
func TestModelMatchesCPU(t *testing.T) {
	tols := map[string]float64{"odd": 0.25, "aligned": 2e-2}
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	cb := cpu.New()
	for name, c := range modelConfigs() {
		tol := tols[name]
		t.Run(name, func(t *testing.T) {
			w := modelWeights(r, c)
			mc, err := layers.New(cb, w)
			if err != nil {
				t.Fatal(err)
			}
			mg, err := layers.New(gb, w)
			if err != nil {
				t.Fatal(err)
			}
			ids := randomIDs(r, 70, c.VocabSize)
			rows := [][]int32{randomIDs(r, 7, c.VocabSize), randomIDs(r, 1, c.VocabSize), randomIDs(r, 70, c.VocabSize)}
			sc, hc, err := mc.Prefill(ids)
			if err != nil {
				t.Fatal(err)
			}
			defer sc.Free()
			sg, hg, err := mg.Prefill(ids)
			if err != nil {
				t.Fatal(err)
			}
			defer sg.Free()
			compareHidden(t, "prefill", cb, hc, gb, hg, tol)
			rc, err := mc.ContinueRows(sc, rows)
			if err != nil {
				t.Fatal(err)
			}
			rg, err := mg.ContinueRows(sg, rows)
			if err != nil {
				t.Fatal(err)
			}
			compareHidden(t, "rows", cb, rc, gb, rg, tol)
			gb.Free(hg, rg)
		})
	}
}

func compareHidden(t *testing.T, what string, cb tensor.Backend, hc tensor.Tensor, gb tensor.Backend, hg tensor.Tensor, tol float64) {
	t.Helper()
	want, err := cb.ToHost(hc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := gb.ToHost(hg)
	if err != nil {
		t.Fatal(err)
	}
	e := relErr(got, want)
	t.Logf("%s: %v, relative error %.3g (cuda result %v)", what, hc.Shape(), e, hg.DType())
	if !(e <= tol) {
		t.Errorf("%s: relative error %.3g > %.3g", what, e, tol)
	}
}

// TestRegistered checks that importing the package registers "cuda".
func TestRegistered(t *testing.T) {
	for _, n := range tensor.Backends() {
		if n == Name {
			return
		}
	}
	t.Fatalf("%q not among %v", Name, tensor.Backends())
}

func TestSizeClass(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{1, 256}, {256, 256}, {257, 320}, {320, 320}, {321, 384}, {512, 512}, {513, 640}, {1000, 1024},
		{1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1<<18}, {3 << 29, 3 << 29},
	} {
		if got := sizeClass(c.n); got != c.want {
			t.Errorf("sizeClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// ExampleBackend runs one operation on the GPU through the tensor.Backend interface.
func ExampleBackend() {
	b, err := tensor.Open("cuda")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.(*Backend).Close()
	x, _ := b.FromFloat32([]int{1, 4}, []float32{1, -2, 3, -4})
	g, _ := b.FromFloat32([]int{4}, []float32{0, 0, 0, 0})
	y, err := b.RMSNorm(x, g, 1e-6, true)
	if err != nil {
		fmt.Println(err)
		return
	}
	v, _ := b.ToHost(y)
	fmt.Printf("%.4f\n", v)
}
