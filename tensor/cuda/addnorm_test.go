//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// TestMatMulAddRMSNormFused checks the fused split-K finish and AddRMSNorm (splitk_add_rmsnorm_bf16) with bf16
// activations through the backend: sum and normed bit for bit against MatMul then AddRMSNorm, at Kev-4B's
// out-projection and down-projection shapes at the row counts of short passes (fused on Hopper), and at shapes
// the backend does not fuse (a plan without a reduce); and the queue's refusals.
func TestMatMulAddRMSNormFused(t *testing.T) {
	r := newRand(t)
	be := NewOn(dev)
	defer be.Trim()
	up := func(shape []int, bits []uint16) tensor.Tensor {
		t.Helper()
		x, err := be.FromBits(tensor.BF16, shape, bits)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	host := func(x tensor.Tensor) []float32 {
		t.Helper()
		v, err := be.ToHost(x)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	fusedSeen := 0
	for _, c := range []struct{ M, N, K int }{
		{240, 2560, 9216}, {257, 2560, 4096}, {3, 264, 1000}, {1, 2560, 4096}, // split-K plans with a reduce
		{17, 4096, 12288},                // Kev-9B's down projection: rows wider than a 4-column group a thread
		{2392, 2560, 4096}, {40, 96, 64}, // stream-K, and an unsplit tile: not fused
	} {
		for _, plusOne := range []bool{true, false} {
			name := fmt.Sprintf("M=%d N=%d K=%d plusOne=%v", c.M, c.N, c.K, plusOne)
			fused := dev.AddRMSNormFused(c.M, c.N, c.K)
			if fused {
				fusedSeen++
			}
			x := up([]int{c.M, c.K}, randBF16(r, c.M*c.K, 1))
			w := up([]int{c.N, c.K}, randBF16(r, c.N*c.K, 1/math.Sqrt(float64(c.K))))
			res := up([]int{c.M, c.N}, randBF16(r, c.M*c.N, 2))
			g := make([]float32, c.N)
			for i := range g {
				g[i] = float32(r.NormFloat64() * 0.5)
			}
			gain, err := be.FromFloat32([]int{c.N}, g)
			if err != nil {
				t.Fatal(err)
			}
			y, err := be.MatMul(x, w)
			if err != nil {
				t.Fatal(name, err)
			}
			wantSum, wantNorm, err := be.AddRMSNorm(y, res, gain, 1e-6, plusOne)
			if err != nil {
				t.Fatal(name, err)
			}
			gotSum, gotNorm, err := be.MatMulAddRMSNorm(x, w, res, gain, 1e-6, plusOne)
			if err != nil {
				t.Fatal(name, err)
			}
			for _, p := range []struct {
				what      string
				got, want tensor.Tensor
			}{{"sum", gotSum, wantSum}, {"normed", gotNorm, wantNorm}} {
				if p.got.DType() != tensor.BF16 {
					t.Errorf("%s: %s is %v, want bf16", name, p.what, p.got.DType())
				}
				a, b := host(p.got), host(p.want)
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Errorf("%s (fused %v): %s row %d column %d: %v, MatMul then AddRMSNorm %v", name, fused, p.what, i/c.N, i%c.N, a[i], b[i])
						break
					}
				}
			}
			be.Free(x, w, res, gain, y, wantSum, wantNorm, gotSum, gotNorm)
		}
	}
	if dev.hopper() && fusedSeen == 0 {
		t.Error("no shape took the fused kernel on Hopper")
	}
	// The queue refuses what the kernel cannot finish.
	do(t, func(q *Queue) error {
		for _, c := range []struct {
			name string
			g    GEMM
		}{
			{"unsplit plan", GEMM{M: 40, N: 96, K: 64}},
			{"residual", GEMM{M: 240, N: 2560, K: 4096, R: Buffer{Ptr: 1}}},
			{"fp32 output", GEMM{M: 240, N: 2560, K: 4096, F32Out: true}},
		} {
			if err := q.GEMMAddRMSNorm(c.g, Buffer{}, Buffer{}, Buffer{}, Buffer{}, 1e-6, true); err == nil {
				t.Errorf("GEMMAddRMSNorm with %s: no error", c.name)
			}
		}
		return nil
	})
}
