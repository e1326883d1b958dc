package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGemmSmall measures gemmNT and gemmNN at the shapes of attention
// and the delta rule's chunk products (one goroutine).
func BenchmarkGemmSmall(bn *testing.B) {
	for _, sh := range [][4]int{{64, 64, 128, 1}, {64, 128, 64, 0}, {1, 2200, 256, 1}, {64, 2200, 256, 1}, {64, 256, 2200, 0}} {
		m, n, k, trans := sh[0], sh[1], sh[2], sh[3] == 1
		name := "NN"
		if trans {
			name = "NT"
		}
		bn.Run(fmt.Sprintf("%s_%dx%dx%d", name, m, n, k), func(bn *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			a, b := make([]float32, m*k), make([]float32, n*k)
			for i := range a {
				a[i] = r.Float32()
			}
			for i := range b {
				b[i] = r.Float32()
			}
			c := make([]float32, m*n)
			for bn.Loop() {
				if trans {
					gemmNT(m, n, k, a, k, b, k, c, n, false)
				} else {
					gemmNN(m, n, k, a, k, b, n, c, n, false)
				}
			}
			bn.ReportMetric(float64(2*m*n*k)*float64(bn.N)/bn.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
