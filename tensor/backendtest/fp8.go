package backendtest

import (
	"errors"
	"math"
	"testing"

	"github.com/kevgo/kev/internal/fp8"
	"github.com/kevgo/kev/tensor"
)

// fp8Tol is the relative error accepted for a product with an F8E4M3 weight and an F32 x against
// internal/fp8.MatMulFP8: both quantize alike, bit for bit, so what is left is the order of the float32 sums (and
// the GPU tensor cores' own adds within a step of k).
const fp8Tol = 2e-3

// testFP8 checks products with F8E4M3 weights. A backend that implements tensor.FP8: MatMul of an F32 x with a
// weight from FromFloat32FP8 against internal/fp8's quantizers and reference product, ToHost of the weight against
// its dequantized values, and MatMulSwiGLU against SwiGLU of MatMul (skipped where FromFloat32FP8 refuses the type
// with a *tensor.DTypeError, as a GPU without FP8 kernels does). Every backend: FromBits refuses F8E4M3 with a
// *tensor.DTypeError, and so does tensor.FromFloat32FP8 on a backend without tensor.FP8.
func (s *suite) testFP8(t *testing.T) {
	var de *tensor.DTypeError
	if _, err := s.b.FromBits(tensor.F8E4M3, []int{8, 16}, make([]uint16, 128)); !errors.As(err, &de) {
		t.Errorf("FromBits(F8E4M3): error %v, want a *tensor.DTypeError", err)
	}
	_, ok := s.b.(tensor.FP8)
	check := tensor.CheckFP8(s.b)
	if check != nil && !errors.As(check, &de) {
		t.Fatalf("CheckFP8: error %v, want nil or a *tensor.DTypeError", check)
	}
	w0, err := tensor.FromFloat32FP8(s.b, []int{8, 16}, s.random(128, 1))
	if (err == nil) != (check == nil) {
		t.Fatalf("CheckFP8 says %v, FromFloat32FP8 %v", check, err)
	}
	switch {
	case !ok:
		if !errors.As(err, &de) {
			t.Fatalf("FromFloat32FP8 on a backend without tensor.FP8: error %v, want a *tensor.DTypeError", err)
		}
		return
	case errors.As(err, &de):
		t.Skipf("FP8 refused: %v", err)
	case err != nil:
		t.Fatalf("FromFloat32FP8: %v", err)
	}
	s.b.Free(w0)
	for _, c := range []struct{ m, n, k int }{{1, 64, 48}, {5, 72, 160}, {130, 136, 272}, {3, 16, 16}} {
		// rows of x and w over a range of magnitudes, a zero row of x
		x := s.random(c.m*c.k, 1)
		for i := 0; i < c.m; i++ {
			f := float32(math.Ldexp(1, i%9-4))
			if i == 2 {
				f = 0
			}
			for j := 0; j < c.k; j++ {
				x[i*c.k+j] *= f
			}
		}
		w := s.random(c.n*c.k, 1)
		for i := 0; i < c.n; i++ {
			f := float32(math.Ldexp(1, i%5-2))
			for j := 0; j < c.k; j++ {
				w[i*c.k+j] *= f
			}
		}
		xq, xs, err := fp8.QuantizeActivations(x, c.m, c.k)
		if err != nil {
			t.Fatal(err)
		}
		wq, ws, err := fp8.QuantizeRows(w, c.n, c.k)
		if err != nil {
			t.Fatal(err)
		}
		ref := fp8.MatMulFP8(xq, xs, wq, ws, c.m, c.n, c.k)
		wdq, err := fp8.Dequantize(wq, ws, c.n, c.k)
		if err != nil {
			t.Fatal(err)
		}

		s.poison(t, c.m*c.n, c.n*c.k)
		wt, err := tensor.FromFloat32FP8(s.b, []int{c.n, c.k}, w)
		if err != nil {
			t.Fatalf("FromFloat32FP8 [%d, %d]: %v", c.n, c.k, err)
		}
		if wt.DType() != tensor.F8E4M3 {
			t.Fatalf("FromFloat32FP8: dtype %v", wt.DType())
		}
		s.check(t, "ToHost(F8E4M3)", wt, []int{c.n, c.k}, f64(wdq), 0)
		xt := s.up(t, []int{c.m, c.k}, x)
		y, err := s.b.MatMul(xt, wt)
		if err != nil {
			t.Fatalf("MatMul [%d, %d] · F8E4M3 [%d, %d]ᵀ: %v", c.m, c.k, c.n, c.k, err)
		}
		s.check(t, "MatMul F8E4M3", y, []int{c.m, c.n}, f64(ref), fp8Tol)

		// the fused operations take the weight as MatMul does
		g, err := s.b.MatMulSwiGLU(xt, wt)
		if err != nil {
			t.Fatalf("MatMulSwiGLU F8E4M3: %v", err)
		}
		sw, err := s.b.SwiGLU(y)
		if err != nil {
			t.Fatal(err)
		}
		s.check(t, "MatMulSwiGLU F8E4M3", g, []int{c.m, c.n / 2}, f64(s.down(t, sw)), 0)
		if _, err := s.b.MatMul(wt, wt); !errors.As(err, &de) {
			t.Errorf("MatMul with an F8E4M3 x: error %v, want a *tensor.DTypeError", err)
		}
		s.b.Free(xt, wt, y, g, sw)
	}
}
