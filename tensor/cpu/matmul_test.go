package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// benchMM measures MatMul throughput for x [m, k] · w [n, k]ᵀ.
func benchMM(bn *testing.B, m, n, k int, dt tensor.DType) {
	b := New()
	r := rand.New(rand.NewPCG(1, 2))
	xs := make([]float32, m*k)
	for i := range xs {
		xs[i] = r.Float32()
	}
	x, _ := b.FromFloat32([]int{m, k}, xs)
	var w tensor.Tensor
	if dt == tensor.F32 {
		ws := make([]float32, n*k)
		for i := range ws {
			ws[i] = r.Float32()
		}
		w, _ = b.FromFloat32([]int{n, k}, ws)
	} else {
		ws := make([]uint16, n*k)
		for i := range ws {
			ws[i] = uint16(0x3c00 + r.IntN(256))
		}
		w, _ = b.FromBits(dt, []int{n, k}, ws)
	}
	bn.ResetTimer()
	for bn.Loop() {
		b.MatMul(x, w)
	}
	bn.ReportMetric(float64(2*m*n*k)*float64(bn.N)/bn.Elapsed().Seconds()/1e9, "GFLOP/s")
}
func BenchmarkMM256F32(bn *testing.B)  { benchMM(bn, 256, 3584, 1024, tensor.F32) }
func BenchmarkMM256BF16(bn *testing.B) { benchMM(bn, 256, 3584, 1024, tensor.BF16) }
