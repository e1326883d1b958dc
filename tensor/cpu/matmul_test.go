package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/internal/half"
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
func BenchmarkMM256F32(bn *testing.B)       { benchMM(bn, 256, 3584, 1024, tensor.F32) }
func BenchmarkMM256BF16(bn *testing.B)      { benchMM(bn, 256, 3584, 1024, tensor.BF16) }
func BenchmarkMM256x1024BF16(bn *testing.B) { benchMM(bn, 256, 1024, 3584, tensor.BF16) }
func BenchmarkMM64BF16(bn *testing.B)       { benchMM(bn, 64, 2048, 1024, tensor.BF16) }
func BenchmarkMM1BF16(bn *testing.B)        { benchMM(bn, 1, 3584, 1024, tensor.BF16) }
func BenchmarkMM1F32(bn *testing.B)         { benchMM(bn, 1, 3584, 1024, tensor.F32) }
func BenchmarkMM7F32(bn *testing.B)         { benchMM(bn, 7, 1000, 999, tensor.F32) }

// mmInputs returns a random x [m, k] and a random w [n, k] of dtype dt
// (values of both signs, none zero) on backend b.
func mmInputs(t testing.TB, b *Backend, r *rand.Rand, m, n, k int, dt tensor.DType) (x, w tensor.Tensor) {
	t.Helper()
	nonzero := func() float32 {
		v := float32(r.NormFloat64())
		if v == 0 {
			v = 0.5
		}
		return v
	}
	xs := make([]float32, m*k)
	for i := range xs {
		xs[i] = nonzero()
	}
	x, err := b.FromFloat32([]int{m, k}, xs)
	if err != nil {
		t.Fatal(err)
	}
	if dt == tensor.F32 {
		ws := make([]float32, n*k)
		for i := range ws {
			ws[i] = nonzero()
		}
		w, err = b.FromFloat32([]int{n, k}, ws)
	} else {
		ws := make([]uint16, n*k)
		for i := range ws {
			if dt == tensor.BF16 {
				ws[i] = half.BF16FromF32(nonzero())
			} else {
				ws[i] = half.F16FromF32(nonzero())
			}
		}
		w, err = b.FromBits(dt, []int{n, k}, ws)
	}
	if err != nil {
		t.Fatal(err)
	}
	return x, w
}

// compareKernels checks that the processor's fast MatMul kernel and the
// plain Go kernel agree on x [m, k] · w [n, k]ᵀ bit for bit (both compute
// each output as one chain of fused multiply-adds over K), and that both
// are within 1e-5 of the sum of the magnitudes of each output's terms. A
// BF16 weight computes in bf16 (x rounded to bf16, pair products summed by
// the bf16 kernels, bf16.go): the reference rounds x too, and the kernels
// agree within the tolerance rather than bit for bit.
func compareKernels(t testing.TB, r *rand.Rand, m, n, k int, dt tensor.DType, threads int) {
	t.Helper()
	fast, slow := &Backend{Threads: threads}, &Backend{Threads: threads, generic: true}
	x, w := mmInputs(t, fast, r, m, n, k, dt)
	yf, err := fast.MatMul(x, w)
	if err != nil {
		t.Fatal(err)
	}
	yg, err := slow.MatMul(x, w)
	if err != nil {
		t.Fatal(err)
	}
	xs, _ := fast.ToHost(x)
	ws, _ := fast.ToHost(w)
	if dt == tensor.BF16 {
		for i, v := range xs {
			xs[i] = half.RoundBF16(v)
		}
	}
	f, _ := fast.ToHost(yf)
	g, _ := slow.ToHost(yg)
	if len(f) != m*n || len(g) != m*n {
		t.Fatalf("%v %dx%dx%d: got %d and %d outputs, want %d", dt, m, n, k, len(f), len(g), m*n)
	}
	for i := range m {
		for j := range n {
			var mag float64
			for p := range k {
				mag += math.Abs(float64(xs[i*k+p]) * float64(ws[j*k+p]))
			}
			a, b := f[i*n+j], g[i*n+j]
			if dt != tensor.BF16 && math.Float32bits(a) != math.Float32bits(b) {
				t.Fatalf("%v %dx%dx%d threads %d: y[%d,%d] fast %v, generic %v: not the same bits", dt, m, n, k, threads, i, j, a, b)
			}
			if d := math.Abs(float64(a) - float64(b)); !(d <= 1e-5*mag+1e-30) {
				t.Fatalf("%v %dx%dx%d threads %d: y[%d,%d] fast %v, generic %v", dt, m, n, k, threads, i, j, a, b)
			}
			var want float64
			for p := range k {
				want += float64(xs[i*k+p]) * float64(ws[j*k+p])
			}
			if d := math.Abs(float64(a) - want); !(d <= 1e-5*mag+1e-30) {
				t.Fatalf("%v %dx%dx%d threads %d: y[%d,%d] = %v, float64 %v (|terms| %v)", dt, m, n, k, threads, i, j, a, want, mag)
			}
		}
	}
}

func TestMatMulKernelsAgree(t *testing.T) {
	if gemmKern == kernGo {
		t.Skip("no vectorised MatMul kernel on this processor")
	}
	s1, s2 := rand.Uint64(), rand.Uint64()
	t.Logf("seed %d, %d", s1, s2)
	r := rand.New(rand.NewPCG(s1, s2))
	fixed := [][3]int{
		{1, 4, 8}, {1, 1, 1}, {1, 7, 9}, {1, 33, 1031}, {2, 5, 16}, {3, 4, 8}, {3, 4, 7},
		{5, 9, 17}, {7, 13, 123}, {13, 17, 255}, {31, 29, 1000}, {6, 64, 2049},
		{1, 256, 4104}, {300, 12, 40}, {257, 36, 3001},
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for _, sh := range fixed {
			compareKernels(t, r, sh[0], sh[1], sh[2], dt, 2)
		}
		for range 40 {
			m, n, k := 1+r.IntN(40), 1+r.IntN(40), 1+r.IntN(600)
			if r.IntN(4) == 0 {
				m = 1
			}
			compareKernels(t, r, m, n, k, dt, 1+r.IntN(3))
		}
	}
}

func FuzzMatMulKernels(f *testing.F) {
	if gemmKern == kernGo {
		f.Skip("no vectorised MatMul kernel on this processor")
	}
	f.Add(uint8(1), uint8(4), uint16(8), false, uint64(1))
	f.Add(uint8(3), uint8(7), uint16(9), true, uint64(2))
	f.Add(uint8(13), uint8(17), uint16(300), true, uint64(3))
	f.Add(uint8(1), uint8(1), uint16(1), false, uint64(4))
	f.Fuzz(func(t *testing.T, m, n uint8, k uint16, bf16 bool, seed uint64) {
		dt := tensor.F32
		if bf16 {
			dt = tensor.BF16
		}
		r := rand.New(rand.NewPCG(seed, uint64(m)<<24|uint64(n)<<16|uint64(k)))
		compareKernels(t, r, 1+int(m)%64, 1+int(n)%64, 1+int(k)%2100, dt, 2)
	})
}

// TestMatMulRowsBatchInvariant checks that a row of x gets the same bits
// whether multiplied alone or within a batch, with either kernel.
func TestMatMulRowsBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 11))
	for _, generic := range []bool{false, true} {
		b := &Backend{Threads: 2, generic: generic}
		for _, sh := range [][3]int{{7, 13, 1037}, {40, 36, 333}, {600, 9, 24}, {5, 64, 8}} {
			m, n, k := sh[0], sh[1], sh[2]
			for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
				x, w := mmInputs(t, b, r, m, n, k, dt)
				y, err := b.MatMul(x, w)
				if err != nil {
					t.Fatal(err)
				}
				ys, _ := b.ToHost(y)
				xs, _ := b.ToHost(x)
				for _, i := range []int{0, 1, m / 2, m - 1} {
					xi, _ := b.FromFloat32([]int{1, k}, xs[i*k:(i+1)*k])
					yi, err := b.MatMul(xi, w)
					if err != nil {
						t.Fatal(err)
					}
					row, _ := b.ToHost(yi)
					for j := range n {
						if row[j] != ys[i*n+j] {
							t.Fatalf("generic %v %v %dx%dx%d: row %d col %d alone %v, in batch %v", generic, dt, m, n, k, i, j, row[j], ys[i*n+j])
						}
					}
				}
			}
		}
	}
}
