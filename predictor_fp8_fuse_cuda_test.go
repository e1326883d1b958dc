//go:build cuda

package kev

import (
	"testing"
)

// TestPredictorCUDAFP8Fuse loads every golden checkpoint with DType FP8 on GPU 0 twice, with the activations' FP8
// codes written by the normalisations that produce them (tensor/cuda's fusion, the default) and with
// KEV_CUDA_FP8_FUSE=off (every FP8 product quantizes its x), and requires the same probabilities, bit for bit, for
// every golden request. Skipped below compute capability 9.0.
func TestPredictorCUDAFP8Fuse(t *testing.T) {
	skipWithoutFP8(t)
	for _, s := range goldenSets(t) {
		t.Run(s.name, func(t *testing.T) {
			g := readGolden(t, s.cases)
			t.Setenv("KEV_CUDA_FP8_FUSE", "off")
			off := loadGolden(t, s, Options{Device: "cuda", DType: FP8})
			t.Setenv("KEV_CUDA_FP8_FUSE", "on")
			on := loadGolden(t, s, Options{Device: "cuda", DType: FP8})
			for _, c := range g.Cases {
				req := decode(t, c.Request)
				if got, want := probs(t, on, req), probs(t, off, req); !equalProbs(got, want) {
					t.Errorf("%s: %v with the producers' FP8 codes, %v with KEV_CUDA_FP8_FUSE=off", c.Name, got, want)
				}
			}
		})
	}
}
