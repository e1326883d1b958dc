package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// expInputs draws inputs over float32's exponential range and its edges.
func expInputs(r *rand.Rand) []float32 {
	xs := []float32{0, 1, -1, 0.5, -0.5, 0.34657359, -0.34657359, 10, -10, 87.9, -86.9, 88, -87, 88.01, -87.01, 100, -100, 1e-8, -1e-8}
	for range 100000 {
		xs = append(xs, float32((r.Float64()*2-1)*88), float32((r.Float64()*2-1)*3))
	}
	return xs
}

// ulps returns |got − want| in units of float32's spacing at want.
func ulps(got float32, want float64) float64 {
	w := float32(want)
	ulp := float64(math.Nextafter32(w, float32(math.Inf(1))) - w)
	if w < 0 {
		ulp = float64(w - math.Nextafter32(w, float32(math.Inf(-1))))
	}
	return math.Abs(float64(got)-want) / ulp
}

func TestExpVec(t *testing.T) {
	if !useAVX2 {
		t.Skip("no assembly kernels on this processor")
	}
	r := rand.New(rand.NewPCG(7, 8))
	xs := expInputs(r)
	got := make([]float32, len(xs))
	expVec(got, xs)
	for i, x := range xs {
		want := math.Exp(float64(x))
		switch {
		case x < -87:
			if got[i] != 0 {
				t.Fatalf("exp(%v) = %v, want 0 below −87", x, got[i])
			}
		case x > 88:
			if !math.IsInf(float64(got[i]), 1) {
				t.Fatalf("exp(%v) = %v, want +Inf above 88", x, got[i])
			}
		case ulps(got[i], want) > 2:
			t.Fatalf("exp(%v) = %v, float64 %v (%.2f ulp)", x, got[i], want, ulps(got[i], want))
		}
	}
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	out := make([]float32, 3)
	expVec(out, special)
	if !math.IsNaN(float64(out[0])) || !math.IsInf(float64(out[1]), 1) || out[2] != 0 {
		t.Fatalf("exp(NaN, +Inf, −Inf) = %v", out)
	}
}

func TestSiluSigmoidVec(t *testing.T) {
	if !useAVX2 {
		t.Skip("no assembly kernels on this processor")
	}
	r := rand.New(rand.NewPCG(9, 10))
	xs := expInputs(r)
	si, sg := make([]float32, len(xs)), make([]float32, len(xs))
	siluVec(si, xs)
	sigmoidVec(sg, xs)
	for i, x := range xs {
		s := 1 / (1 + math.Exp(-float64(x)))
		if d := ulps(sg[i], s); d > 3 && math.Abs(float64(sg[i])-s) > 1e-37 {
			t.Fatalf("sigmoid(%v) = %v, float64 %v (%.2f ulp)", x, sg[i], s, d)
		}
		if d := ulps(si[i], float64(x)*s); d > 3 && math.Abs(float64(si[i])-float64(x)*s) > 1e-36 {
			t.Fatalf("silu(%v) = %v, float64 %v (%.2f ulp)", x, si[i], float64(x)*s, d)
		}
	}
	nan := float32(math.NaN())
	out := make([]float32, 1)
	if siluVec(out, []float32{nan}); !math.IsNaN(float64(out[0])) {
		t.Fatalf("silu(NaN) = %v", out[0])
	}
	if sigmoidVec(out, []float32{nan}); !math.IsNaN(float64(out[0])) {
		t.Fatalf("sigmoid(NaN) = %v", out[0])
	}
}

// TestExpVecPositionInvariant checks that an element gets the same bits
// in a block of eight or in the padded rest, at any offset.
func TestExpVecPositionInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	xs := randFloats(r, 29)
	for _, f := range []func(dst, src []float32){expVec, siluVec, sigmoidVec} {
		all := make([]float32, len(xs))
		f(all, xs)
		for i := range xs {
			for _, lo := range []int{0, max(0, i-9), i} {
				part := make([]float32, len(xs)-lo)
				f(part, xs[lo:])
				if math.Float32bits(part[i-lo]) != math.Float32bits(all[i]) {
					t.Fatalf("element %d from offset %d: %v, in the whole slice %v", i, lo, part[i-lo], all[i])
				}
			}
		}
	}
}

func BenchmarkExpVec(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i)/4096*20 - 15
	}
	out := make([]float32, len(xs))
	for b.Loop() {
		expVec(out, xs)
	}
}

func BenchmarkExpScalar(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = float32(i)/4096*20 - 15
	}
	out := make([]float32, len(xs))
	for b.Loop() {
		for i, x := range xs {
			out[i] = float32(math.Exp(float64(x)))
		}
	}
}

// TestMulAdd checks the kernel against the plain Go loop bit for bit.
func TestMulAdd(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 7, 8, 9, 64, 1029} {
		y, w, x := randFloats(r, n), randFloats(r, n), randFloats(r, n)
		want := append([]float32(nil), y...)
		for i := range want {
			p := w[i] * x[i]
			want[i] += p
		}
		mulAdd(y, w, x)
		for i := range y {
			if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n %d: y[%d] = %v, the Go loop %v", n, i, y[i], want[i])
			}
		}
	}
}

// TestSoftmaxVecs checks expShift, maxVec, sumVec, scaleVec, mulVec and
// sumSq against
// scalar Go at every length up to 40, and expShift's bits against expVec
// of the shifted values.
func TestSoftmaxVecs(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for n := 0; n <= 40; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 5)
		}
		shift := float32(r.NormFloat64())
		got, want := make([]float32, n), make([]float32, n)
		expShift(got, x, shift)
		for i, v := range x {
			want[i] = v - shift
		}
		expVec(want, want)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n %d: expShift[%d] = %v, expVec %v", n, i, got[i], want[i])
			}
		}
		m, s := math.Inf(-1), 0.0
		for _, v := range x {
			m = math.Max(m, float64(v))
			s += float64(v)
		}
		if got := maxVec(x); float64(got) != m {
			t.Fatalf("n %d: maxVec = %v, want %v", n, got, m)
		}
		if got := sumVec(x); math.Abs(float64(got)-s) > 1e-5*float64(n+1)*5 {
			t.Fatalf("n %d: sumVec = %v, want %v", n, got, s)
		}
		y := append([]float32(nil), x...)
		scaleVec(y, y, shift)
		z := make([]float32, n)
		mulVec(z, x, y)
		var ss float64
		for i := range y {
			if y[i] != x[i]*shift {
				t.Fatalf("n %d: scaleVec[%d] = %v, want %v", n, i, y[i], x[i]*shift)
			}
			if z[i] != x[i]*y[i] {
				t.Fatalf("n %d: mulVec[%d] = %v, want %v", n, i, z[i], x[i]*y[i])
			}
			ss += float64(x[i]) * float64(x[i])
		}
		if got := sumSq(x); math.Abs(float64(got)-ss) > 1e-6*ss {
			t.Fatalf("n %d: sumSq = %v, want %v", n, got, ss)
		}
	}
}
