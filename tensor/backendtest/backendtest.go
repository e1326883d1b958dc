// Package backendtest is the conformance suite every tensor.Backend must
// pass: each operation is checked against a float64 reference computed here
// from the operation's documented definition, on deterministic lattice inputs
// and on fresh random inputs (the seed is logged), over shapes chosen to hit
// edge cases (single rows, odd sizes, grouped heads, d_k ≠ d_v, chunk
// boundaries, cached prefixes, several segments).
//
// Before each operation the suite uploads and frees NaN-filled tensors, so a
// backend that recycles memory and forgets to write part of an output fails.
//
// A backend that implements tensor.FP8 is checked on products with F8E4M3
// weights; every other backend must refuse the type with a
// *tensor.DTypeError.
//
// A backend that implements tensor.Batched is also checked on its segment
// operations (prefixes of different lengths, segments continuing prefixes,
// new segments and each other); the Batched subtests skip other backends.
//
// Errors are measured relative to the reference's largest magnitude:
// max|got − want| / max|want|.
package backendtest

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
)

// Tolerance is the largest accepted relative error, by the storage type of
// the case's weights. Activations are always uploaded as F32; a backend that
// computes in reduced precision sets every field to what its arithmetic
// allows (e.g. 1e-2 for bf16 activations).
type Tolerance struct {
	F32, BF16, F16 float64
}

// FP32 is the tolerance for a backend that computes in float32.
var FP32 = Tolerance{F32: 1e-5, BF16: 1e-5, F16: 1e-5}

func (tol Tolerance) of(d tensor.DType) float64 {
	switch d {
	case tensor.BF16:
		return tol.BF16
	case tensor.F16:
		return tol.F16
	}
	return tol.F32
}

// suite carries one run's state.
type suite struct {
	b   tensor.Backend
	tol Tolerance
	rng *rand.Rand
}

// RunAll runs every conformance test against b as subtests of t.
func RunAll(t *testing.T, b tensor.Backend, tol Tolerance) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("backendtest: %s, random seed %d", b.Name(), seed)
	s := &suite{b: b, tol: tol, rng: rand.New(rand.NewPCG(seed, 0x6b6576))}
	for _, c := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"Transfer", s.testTransfer},
		{"Embedding", s.testEmbedding},
		{"MatMul", s.testMatMul},
		{"SplitCols", s.testSplitCols},
		{"RMSNorm", s.testRMSNorm},
		{"AddRMSNorm", s.testAddRMSNorm},
		{"SwiGLU", s.testSwiGLU},
		{"MatMulSwiGLU", s.testMatMulSwiGLU},
		{"MatMulSplit", s.testMatMulSplit},
		{"MatMulAddRMSNorm", s.testMatMulAddRMSNorm},
		{"SigmoidGate", s.testSigmoidGate},
		{"AddBias", s.testAddBias},
		{"QKNormRope", s.testQKNormRope},
		{"Attention", s.testAttention},
		{"CausalConv1dSiLU", s.testConv},
		{"DeltaGates", s.testDeltaGates},
		{"GatedDeltaRule", s.testDeltaRule},
		{"GatedRMSNorm", s.testGatedRMSNorm},
		{"Pointer", s.testPointer},
		{"Errors", s.testErrors},
		{"FP8", s.testFP8},
		{"Batched/AttentionSegments", s.testAttentionSegments},
		{"Batched/CausalConv1dSiLUSegments", s.testConvSegments},
		{"Batched/GatedDeltaRuleSegments", s.testDeltaRuleSegments},
		{"Batched/SliceRows", s.testSliceRows},
		{"Batched/Pointers", s.testPointers},
		{"Batched/Errors", s.testSegmentErrors},
	} {
		t.Run(c.name, c.f)
	}
}

// inputs returns the two input generators: lattice and random.
type gen func(n int, scale float64) []float32

// lattice returns deterministic values in (−scale, scale), none zero.
func lattice(n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(scale * (float64((i*37+11)%97) - 48.5) / 48.5)
	}
	return out
}

func (s *suite) random(n int, scale float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(scale * (2*s.rng.Float64() - 1))
	}
	return out
}

// gens names the generators for subtests.
func (s *suite) gens() map[string]gen {
	return map[string]gen{"lattice": lattice, "random": s.random}
}

func (s *suite) up(t *testing.T, shape []int, data []float32) tensor.Tensor {
	t.Helper()
	x, err := s.b.FromFloat32(shape, data)
	if err != nil {
		t.Fatalf("FromFloat32(%v): %v", shape, err)
	}
	return x
}

// upAs uploads data in dtype and returns the values the backend holds.
func (s *suite) upAs(t *testing.T, dtype tensor.DType, shape []int, data []float32) (tensor.Tensor, []float64) {
	t.Helper()
	if dtype == tensor.F32 {
		return s.up(t, shape, data), f64(data)
	}
	bits := make([]uint16, len(data))
	vals := make([]float64, len(data))
	for i, v := range data {
		if dtype == tensor.BF16 {
			bits[i] = half.BF16FromF32(v)
			vals[i] = float64(half.BF16ToF32(bits[i]))
		} else {
			bits[i] = half.F16FromF32(v)
			vals[i] = float64(half.F16ToF32(bits[i]))
		}
	}
	x, err := s.b.FromBits(dtype, shape, bits)
	if err != nil {
		t.Fatalf("FromBits(%v, %v): %v", dtype, shape, err)
	}
	return x, vals
}

// poison uploads and frees NaN tensors of the given sizes.
func (s *suite) poison(t *testing.T, sizes ...int) {
	t.Helper()
	for _, n := range sizes {
		if n == 0 {
			continue
		}
		nan := make([]float32, n)
		for i := range nan {
			nan[i] = float32(math.NaN())
		}
		x, err := s.b.FromFloat32([]int{n}, nan)
		if err != nil {
			t.Fatalf("poison: %v", err)
		}
		s.b.Free(x)
	}
}

func (s *suite) down(t *testing.T, x tensor.Tensor) []float32 {
	t.Helper()
	v, err := s.b.ToHost(x)
	if err != nil {
		t.Fatalf("ToHost: %v", err)
	}
	return v
}

// check compares a result against the reference.
func (s *suite) check(t *testing.T, what string, x tensor.Tensor, shape []int, want []float64, tol float64) {
	t.Helper()
	if x == nil {
		t.Fatalf("%s: nil result", what)
	}
	if !sameShape(x.Shape(), shape) {
		t.Fatalf("%s: shape %v, want %v", what, x.Shape(), shape)
	}
	got := s.down(t, x)
	compare(t, what, got, want, tol)
}

func compare(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	var scale, worst float64
	at := -1
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	if scale == 0 {
		scale = 1
	}
	for i, g := range got {
		d := math.Abs(float64(g) - want[i])
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			d = math.Inf(1)
		}
		if d > worst || at < 0 {
			worst, at = d, i
		}
	}
	if rel := worst / scale; !(rel <= tol) {
		t.Errorf("%s: relative error %.3g > %.3g (element %d: got %g, want %g)", what, rel, tol, at, got[at], want[at])
	}
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func silu(x float64) float64 { return x * sigmoid(x) }

// rmsRef normalises x with eps and multiplies by g.
func rmsRef(x []float64, g []float64, eps float64, plusOne bool) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		w := g[i]
		if plusOne {
			w++
		}
		out[i] = v * r * w
	}
	return out
}
