//go:build cuda

package kev

import "testing"

// TestWarmUpCUDA is TestWarmUp on the GPU: the warm-up leaves Stats and the prefix cache untouched and the
// answers bit for bit those of a predictor loaded without it.
func TestWarmUpCUDA(t *testing.T) {
	testWarmUp(t, Options{Device: "cuda", DType: "bf16"})
}
