//go:build cuda

package kev

import (
	"testing"

	"github.com/kevgo/kev/tensor"
	_ "github.com/kevgo/kev/tensor/cuda" // registers the "cuda" backend
)

// skipWithoutFP8 skips the test unless GPU 0 computes with FP8 weights (compute capability 9.0), saying why.
func skipWithoutFP8(t *testing.T) {
	t.Helper()
	b, err := tensor.Open("cuda")
	if err != nil {
		t.Skipf("fp8 needs an NVIDIA GPU of compute capability 9.0: no cuda device here (%v)", err)
	}
	defer closeBackends([]tensor.Backend{b})
	if err := tensor.CheckFP8(b); err != nil {
		t.Skipf("fp8 needs an NVIDIA GPU of compute capability 9.0: %v", err)
	}
}

// TestPredictorGoldenCUDAFP8 loads every golden checkpoint with DType FP8 on GPU 0 and compares the probabilities
// with the PyTorch fp32 reference (fp8GoldenBar: 0.05 on the attention-only fixtures, fp8HybridBar on the hybrid
// ones, whose answers the E4M3 quantization itself moves by up to 0.21 on the CPU), and with the same FP8 arithmetic
// on the CPU within the same bars: the CPU quantizes fp32 activations where the GPU quantizes bf16 ones, which on
// these tiny random models moves an answer as much as FP8 does (0.092 on an H100, on tiny-b). The kernels themselves
// are checked against their reference bit for bit and to a tight bound in tensor/cuda. Skipped below compute
// capability 9.0.
func TestPredictorGoldenCUDAFP8(t *testing.T) {
	skipWithoutFP8(t)
	opts := Options{Device: "cuda", DType: FP8}
	t.Run("reference", func(t *testing.T) {
		checkFP8Golden(t, opts, nil, fp8GoldenBar)
	})
	t.Run("cpu-fp8", func(t *testing.T) {
		checkFP8Golden(t, opts, &Options{Device: fakeFP8, DType: FP8}, fp8GoldenBar)
	})
}

// TestPredictorCUDAFP8Replicas loads tiny-a with DType FP8 as two replicas on GPU 0: both answer every golden
// request as one replica does, bit for bit.
func TestPredictorCUDAFP8Replicas(t *testing.T) {
	skipWithoutFP8(t)
	s := goldenSets(t)[0]
	g := readGolden(t, s.cases)
	one := loadGolden(t, s, Options{Device: "cuda", DType: FP8})
	two := loadGolden(t, s, Options{Device: "cuda:0,0", DType: FP8})
	if info := two.Info(); info.Replicas != 2 || info.DType != FP8 {
		t.Fatalf("Info: %d replicas, dtype %q; want 2 and fp8", info.Replicas, info.DType)
	}
	for _, c := range g.Cases {
		req := decode(t, c.Request)
		want := probs(t, one, req)
		for r := 0; r < 4; r++ { // the requests go to either replica
			if got := probs(t, two, req); !equalProbs(got, want) {
				t.Errorf("%s, request %d: two replicas answer %v, one %v", c.Name, r, got, want)
			}
		}
	}
}
