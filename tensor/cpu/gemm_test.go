package cpu

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/backendtest"
)

// allKernels lists every micro-kernel with whether this processor runs it.
func allKernels() []struct {
	k  gemmKernel
	ok bool
} {
	return []struct {
		k  gemmKernel
		ok bool
	}{{kernGo, true}, {kernAVX2, useAVX2}, {kernAVX512, hasAVX512}}
}

// withKernel runs f with gemmKern set to k.
func withKernel(k gemmKernel, f func()) {
	old := gemmKern
	gemmKern = k
	defer func() { gemmKern = old }()
	f()
}

// exactFMA32 is a·b+c rounded once to float32, from exact arithmetic.
func exactFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(400).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(400).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(400).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}

func TestFMA32(t *testing.T) {
	// Double rounding through float64 would give 1+2⁻²² here: a·b+c lies
	// 2⁻⁷⁰ below the float32 midpoint 1+2⁻²³+2⁻²⁴.
	one := float32(1)
	a, b, c := one+0x1p-23, float32(0x1p-24)*(one-0x1p-23), one+0x1p-23
	if got := fma32(a, b, c); got != one+0x1p-23 {
		t.Fatalf("fma32(%v, %v, %v) = %v, want %v", a, b, c, got, one+0x1p-23)
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 21))
	cases := [][3]float32{{a, b, c}, {a, -b, -c}, {0, 0, 0}, {1, 1, -1}, {math.MaxFloat32, 2, 0}, {0x1p-100, 0x1p-60, 0x1p-149}}
	for range 20000 {
		x, y := float32(r.NormFloat64()), float32(r.NormFloat64())
		z := float32(r.NormFloat64() * math.Ldexp(1, r.IntN(60)-30))
		if r.IntN(4) == 0 { // near-cancelling sums and near-ties
			z = -x*y + float32(r.NormFloat64())*0x1p-30
		}
		cases = append(cases, [3]float32{x, y, z})
	}
	for _, tc := range cases {
		want := exactFMA32(tc[0], tc[1], tc[2])
		if got := fma32(tc[0], tc[1], tc[2]); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%v, %v, %v) = %v, want %v", tc[0], tc[1], tc[2], got, want)
		}
	}
}

// TestMicroKernelsBitEqual runs every micro-kernel this processor has on the
// same tiles: all must give the bits of the plain Go kernel.
func TestMicroKernelsBitEqual(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 22))
	for _, kk := range allKernels() {
		t.Run(kk.k.String(), func(t *testing.T) {
			if !kk.ok {
				t.Skipf("the processor lacks the %v kernel", kk.k)
			}
			mr := kk.k.mr()
			for _, kc := range []int{1, 2, 7, 64, 256} {
				for i, load := range []bool{false, true, false, true} {
					ahead := i >= 2 // the kernels that prefetch the panel's next run
					a, b := randFloats(r, kc*mr), randFloats(r, kc*nr)
					ldc := nr + r.IntN(9)
					c0 := randFloats(r, mr*ldc)
					got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
					rows := 1 + r.IntN(mr)
					if kc == 64 {
						rows = mr
					}
					kk.k.tileAhead(rows, kc, a, b, got, ldc, load, ahead)
					tileGo(mr, rows, kc, a, b, want, ldc, load)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("kc %d load %v ahead %v rows %d: c[%d] = %v, Go kernel %v", kc, load, ahead, rows, i, got[i], want[i])
						}
					}
					// The first row against float64: the chain is a real product.
					for j := range nr {
						s, mag := 0.0, 0.0
						if load {
							s, mag = float64(c0[j]), math.Abs(float64(c0[j]))
						}
						for p := range kc {
							v := float64(a[p*mr]) * float64(b[p*nr+j])
							s += v
							mag += math.Abs(v)
						}
						if !near(got[j], s, mag, 1e-6) {
							t.Fatalf("kc %d load %v: c[0,%d] = %v, float64 %v", kc, load, j, got[j], s)
						}
					}
				}
			}
			// Every row count, with and without the prefetches, reading a
			// panel whose next run follows.
			const kc = 9
			a, b := randFloats(r, kc*mr), randFloats(r, 2*kc*nr)
			for rows := 1; rows <= mr; rows++ {
				for _, ahead := range []bool{false, true} {
					c0 := randFloats(r, mr*nr)
					got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
					kk.k.tileAhead(rows, kc, a, b[:kc*nr], got, nr, true, ahead)
					tileGo(mr, rows, kc, a, b, want, nr, true)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("rows %d ahead %v: c[%d] = %v, Go kernel %v", rows, ahead, i, got[i], want[i])
						}
					}
				}
			}
		})
	}
}

// TestMicroKernelsInPlace runs every micro-kernel this processor has on
// operands read in place (row-major A, transposed A, a packed block; B rows
// at a stride): each must give the bits of the plain Go kernel on the same
// operands packed.
func TestMicroKernelsInPlace(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 28))
	for _, kk := range allKernels() {
		t.Run(kk.k.String(), func(t *testing.T) {
			if !kk.ok {
				t.Skipf("the processor lacks the %v kernel", kk.k)
			}
			mr := kk.k.mr()
			for _, kc := range []int{1, 2, 7, 64, 300} {
				for rows := 1; rows <= mr; rows++ {
					load := r.IntN(2) == 0
					lda := kc + r.IntN(5)
					rs, cs := lda, 1 // row-major
					switch r.IntN(3) {
					case 1: // transposed
						lda = mr + r.IntN(5)
						rs, cs = 1, lda
					case 2: // a packed block
						rs, cs = 1, mr
					}
					a := randFloats(r, (rows-1)*rs+(kc-1)*cs+1)
					ldb := nr + r.IntN(40)
					b := randFloats(r, (kc-1)*ldb+nr)
					ldc := nr + r.IntN(9)
					c0 := randFloats(r, (rows-1)*ldc+nr)
					got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
					kk.k.tileS(rows, kc, a, rs, cs, b, ldb, got, ldc, load)
					ap, bp := make([]float32, kc*mr), make([]float32, kc*nr)
					for p := range kc {
						for i := range rows {
							ap[p*mr+i] = a[i*rs+p*cs]
						}
						copy(bp[p*nr:], b[p*ldb:p*ldb+nr])
					}
					tileGo(mr, rows, kc, ap, bp, want, ldc, load)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("kc %d rows %d rs %d cs %d load %v: c[%d] = %v, Go kernel %v", kc, rows, rs, cs, load, i, got[i], want[i])
						}
					}
				}
			}
		})
	}
}

// refNT is a·bᵀ (plus c0 when add) in float64, and the sums of |terms|.
func refNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c0 []float32, ldc int, add, trans bool) (want, mag []float64) {
	want, mag = make([]float64, m*n), make([]float64, m*n)
	for i := range m {
		for j := range n {
			s, g := 0.0, 0.0
			if add {
				s, g = float64(c0[i*ldc+j]), math.Abs(float64(c0[i*ldc+j]))
			}
			for p := range k {
				var bv float32
				if trans {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				v := float64(a[i*lda+p]) * float64(bv)
				s += v
				g += math.Abs(v)
			}
			want[i*n+j], mag[i*n+j] = s, g
		}
	}
	return want, mag
}

// TestGemmSmall checks gemmNT and gemmNN on strided operands against
// float64, with every kernel giving the same bits, and each output equal to
// the same product computed alone (1×1).
func TestGemmSmall(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 23))
	shapes := [][3]int{{1, 1, 1}, {1, 5, 3}, {7, 33, 300}, {13, 64, 128}, {64, 64, 128}, {3, 1, 257}, {250, 40, 9}, {5, 7, 0}}
	for range 20 {
		shapes = append(shapes, [3]int{1 + r.IntN(40), 1 + r.IntN(70), 1 + r.IntN(600)})
	}
	for _, trans := range []bool{true, false} {
		for _, sh := range shapes {
			m, n, k := sh[0], sh[1], sh[2]
			add := r.IntN(2) == 0
			lda, ldc := k+r.IntN(4), n+r.IntN(4)
			ldb := k + r.IntN(4)
			if !trans {
				ldb = n + r.IntN(4)
			}
			a := randFloats(r, max(1, (m-1)*lda+k))
			b := randFloats(r, max(1, ldb*max(n, k)))
			c0 := randFloats(r, (m-1)*ldc+n)
			run := func(mm, nn int, a, b, c []float32) {
				if trans {
					gemmNT(mm, nn, k, a, lda, b, ldb, c, ldc, add)
				} else {
					gemmNN(mm, nn, k, a, lda, b, ldb, c, ldc, add)
				}
			}
			var first []float32
			for _, kk := range allKernels() {
				if !kk.ok {
					continue
				}
				c := append([]float32(nil), c0...)
				withKernel(kk.k, func() { run(m, n, a, b, c) })
				if first == nil {
					first = c
					want, mag := refNT(m, n, k, a, lda, b, ldb, c0, ldc, add, trans)
					for i := range m {
						for j := range n {
							if !near(c[i*ldc+j], want[i*n+j], mag[i*n+j], 1e-6) {
								t.Fatalf("trans %v %dx%dx%d add %v: c[%d,%d] = %v, want %v", trans, m, n, k, add, i, j, c[i*ldc+j], want[i*n+j])
							}
						}
					}
					if k == 0 {
						continue
					}
					// One output alone gets the same bits.
					i, j := r.IntN(m), r.IntN(n)
					one := []float32{c0[i*ldc+j]}
					bj := b[j:]
					if trans {
						bj = b[j*ldb:]
					}
					if trans {
						gemmNT(1, 1, k, a[i*lda:], lda, bj, ldb, one, 1, add)
					} else {
						gemmNN(1, 1, k, a[i*lda:], lda, bj, ldb, one, 1, add)
					}
					if one[0] != c[i*ldc+j] {
						t.Fatalf("trans %v %dx%dx%d: c[%d,%d] alone %v, in place %v", trans, m, n, k, i, j, one[0], c[i*ldc+j])
					}
					continue
				}
				for i := range c {
					if math.Float32bits(c[i]) != math.Float32bits(first[i]) {
						t.Fatalf("trans %v %dx%dx%d: kernel %v c[%d] = %v, Go kernel %v", trans, m, n, k, kk.k, i, c[i], first[i])
					}
				}
			}
		}
	}
}

// TestMatMulBatchInvariantBits checks that a row of x gets the same bits
// alone and inside batches of many sizes, on 1 and several threads, with
// every kernel, and that the kernels agree bit for bit.
func TestMatMulBatchInvariantBits(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 24))
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16} { // BF16 weights compute in bf16: bf16_test.go
		for _, sh := range [][2]int{{70, 600}, {33, 257}, {64, 31}} {
			n, k := sh[0], sh[1]
			b0 := &Backend{Threads: 1}
			big, w := mmInputs(t, b0, r, 300, n, k, dt)
			bigs, _ := b0.ToHost(big)
			var ref []float32 // the kernel-independent bits of row 0
			for _, kk := range allKernels() {
				if !kk.ok {
					t.Logf("the processor lacks the %v kernel: not compared", kk.k)
					continue
				}
				if kk.k == kernGo && (n*k > 40000) {
					continue // slow; the micro-kernel test covers it
				}
				withKernel(kk.k, func() {
					for _, threads := range []int{1, 3} {
						b := &Backend{Threads: threads}
						var rows []float32
						for _, m := range []int{1, 2, 5, 12, 13, 40, 65, 241, 300} {
							x, _ := b.FromFloat32([]int{m, k}, bigs[:m*k])
							y, err := b.MatMul(x, w)
							if err != nil {
								t.Fatal(err)
							}
							ys, _ := b.ToHost(y)
							if rows == nil {
								rows = ys[:n]
								if ref == nil {
									ref = rows
								}
								for j := range n {
									if math.Float32bits(rows[j]) != math.Float32bits(ref[j]) {
										t.Fatalf("%v %dx%d kernel %v threads %d: y[0,%d] = %v, first kernel %v", dt, n, k, kk.k, threads, j, rows[j], ref[j])
									}
								}
							}
							for j := range n {
								if math.Float32bits(ys[j]) != math.Float32bits(rows[j]) {
									t.Fatalf("%v %dx%d kernel %v threads %d: row 0 of %d rows col %d = %v, alone %v", dt, n, k, kk.k, threads, m, j, ys[j], rows[j])
								}
							}
							// The last row equals itself alone.
							xl, _ := b.FromFloat32([]int{1, k}, bigs[(m-1)*k:m*k])
							yl, _ := b.MatMul(xl, w)
							yls, _ := b.ToHost(yl)
							for j := range n {
								if math.Float32bits(ys[(m-1)*n+j]) != math.Float32bits(yls[j]) {
									t.Fatalf("%v %dx%d kernel %v threads %d: row %d of %d col %d = %v, alone %v", dt, n, k, kk.k, threads, m-1, m, j, ys[(m-1)*n+j], yls[j])
								}
							}
						}
					}
				})
			}
			// Against float64.
			ws, _ := b0.ToHost(w)
			want, mag := refNT(1, n, k, bigs, k, ws, k, nil, 0, false, true)
			for j := range n {
				if !near(ref[j], want[j], mag[j], 1e-6) {
					t.Fatalf("%v %dx%d: y[0,%d] = %v, float64 %v", dt, n, k, j, ref[j], want[j])
				}
			}
		}
	}
}

// TestMatMulLargeThreads runs the threaded splits (few rows, the 2-D jobs,
// with A packed once for all threads and, past sharedA, by each job) on
// several threads against one thread, bit for bit.
func TestMatMulLargeThreads(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 25))
	b1, b4 := &Backend{Threads: 1}, &Backend{Threads: 4}
	defer func(v int) { sharedA = v }(sharedA)
	sharedA = 1 << 18
	for _, sh := range [][3]int{{500, 300, 520}, {500, 70, 1030}, {40, 200, 700}, {300, 40, sharedA/300 + 5}} {
		x, w := mmInputs(t, b1, r, sh[0], sh[1], sh[2], tensor.F32)
		y1, _ := b1.MatMul(x, w)
		y4, _ := b4.MatMul(x, w)
		h1, _ := b1.ToHost(y1)
		h4, _ := b4.ToHost(y4)
		for i := range h1 {
			if math.Float32bits(h1[i]) != math.Float32bits(h4[i]) {
				t.Fatalf("%v: y[%d]: 4 threads %v, 1 thread %v", sh, i, h4[i], h1[i])
			}
		}
	}
}

// TestPackedWeightReaders checks that a weight packed by MatMul still reads
// back as uploaded through every other operation, and that its row-major
// copy is gone.
func TestPackedWeightReaders(t *testing.T) {
	b := &Backend{Threads: 2}
	r := rand.New(rand.NewPCG(rand.Uint64(), 26))
	n, k := 37, 50
	ws := randFloats(r, n*k)
	w, _ := b.FromFloat32([]int{n, k}, ws)
	x, _ := b.FromFloat32([]int{2, k}, randFloats(r, 2*k))
	if _, err := b.MatMul(x, w); err != nil {
		t.Fatal(err)
	}
	wt := w.(*Tensor)
	if wt.f32 != nil || wt.packed.Load() == nil {
		t.Fatal("the weight is not packed in place of its row-major data")
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	h, _ := b.ToHost(w)
	same("ToHost", h, ws)
	s, err := b.SliceRows(w, 3, 36)
	if err != nil {
		t.Fatal(err)
	}
	h, _ = b.ToHost(s)
	same("SliceRows", h, ws[3*k:36*k])
	e, err := b.Embedding(w, []int32{36, 0, 31, 32})
	if err != nil {
		t.Fatal(err)
	}
	h, _ = b.ToHost(e)
	same("Embedding", h, append(append(append(append([]float32(nil), ws[36*k:37*k]...), ws[:k]...), ws[31*k:32*k]...), ws[32*k:33*k]...))
	parts, err := b.SplitCols(w, 20, 30)
	if err != nil {
		t.Fatal(err)
	}
	h, _ = b.ToHost(parts[1])
	want := make([]float32, 0, n*30)
	for i := range n {
		want = append(want, ws[i*k+20:(i+1)*k]...)
	}
	same("SplitCols", h, want)
	// The same tensor as x: MatMul(w, w) is w·wᵀ.
	y, err := b.MatMul(w, w)
	if err != nil {
		t.Fatal(err)
	}
	h, _ = b.ToHost(y)
	wantY, mag := refNT(n, n, k, ws, k, ws, k, nil, 0, false, true)
	for i := range h {
		if !near(h[i], wantY[i], mag[i], 1e-6) {
			t.Fatalf("w·wᵀ[%d] = %v, want %v", i, h[i], wantY[i])
		}
	}
	b.Free(w)
	if _, err := b.MatMul(x, w); err == nil {
		t.Fatal("MatMul on a freed packed weight: no error")
	}
}

// TestPackedWeightConcurrentFirstUse multiplies by a fresh weight from
// several goroutines at once (with readers beside them): one packing, the
// same bits everywhere. Run with -race.
func TestPackedWeightConcurrentFirstUse(t *testing.T) {
	b := &Backend{Threads: 3}
	r := rand.New(rand.NewPCG(rand.Uint64(), 27))
	x, w := mmInputs(t, b, r, 9, 70, 130, tensor.F32)
	ws := append([]float32(nil), w.(*Tensor).f32...)
	outs := make([][]float32, 8)
	var wg sync.WaitGroup
	for g := range outs {
		wg.Go(func() {
			if g%2 == 1 {
				h, err := b.ToHost(w)
				if err != nil {
					t.Error(err)
					return
				}
				for i := range h {
					if h[i] != ws[i] {
						t.Errorf("ToHost during packing: [%d] = %v, want %v", i, h[i], ws[i])
						return
					}
				}
			}
			y, err := b.MatMul(x, w)
			if err != nil {
				t.Error(err)
				return
			}
			outs[g], _ = b.ToHost(y)
		})
	}
	wg.Wait()
	for g := range outs {
		for i := range outs[g] {
			if outs[g][i] != outs[0][i] {
				t.Fatalf("goroutine %d: y[%d] = %v, goroutine 0 %v", g, i, outs[g][i], outs[0][i])
			}
		}
	}
}

// TestMatMul16Widened checks F16 weights against the same values uploaded
// as F32: the same bits (BF16 weights compute in bf16: bf16_test.go).
func TestMatMul16Widened(t *testing.T) {
	b := &Backend{Threads: 2}
	r := rand.New(rand.NewPCG(rand.Uint64(), 28))
	for _, dt := range []tensor.DType{tensor.F16} {
		x, w := mmInputs(t, b, r, 70, 45, 300, dt)
		ws, _ := b.ToHost(w)
		wf, _ := b.FromFloat32([]int{45, 300}, ws)
		y16, _ := b.MatMul(x, w)
		y32, _ := b.MatMul(x, wf)
		h16, _ := b.ToHost(y16)
		h32, _ := b.ToHost(y32)
		for i := range h16 {
			if math.Float32bits(h16[i]) != math.Float32bits(h32[i]) {
				t.Fatalf("%v: y[%d] = %v, as F32 %v", dt, i, h16[i], h32[i])
			}
		}
	}
	_ = half.BF16ToF32
}

// BenchmarkGEMM measures MatMul at the 0.8B model's shapes. KEV_GEMM_THREADS
// sets the threads (default: all), KEV_GEMM_KERNEL the micro-kernel (avx512,
// avx2, go, or gofused: the plain Go kernel as other architectures run it;
// default: the fastest the processor has). Run on one thread and
// on all to get the parallel efficiency, e.g.
//
//	KEV_GEMM_THREADS=1 go test ./tensor/cpu/ -run '^$' -bench GEMM
func BenchmarkGEMM(bn *testing.B) {
	threads := New().Threads
	if s := os.Getenv("KEV_GEMM_THREADS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			bn.Fatalf("KEV_GEMM_THREADS=%q: want a positive number", s)
		}
		threads = v
	}
	if os.Getenv("KEV_GEMM_SCHED") == "static" { // each thread one contiguous run of jobs
		defer func(v bool) { gemmStatic = v }(gemmStatic)
		gemmStatic = true
	}
	kern := gemmKern
	if s := os.Getenv("KEV_GEMM_KERNEL"); s == "gofused" { // the plain Go kernel other architectures serve with
		defer func(v bool) { plainFused = v }(plainFused)
		plainFused = true
		kern = kernGo
	} else if s != "" {
		found := false
		for _, kk := range allKernels() {
			if kk.k.String() == s {
				if !kk.ok {
					bn.Skipf("KEV_GEMM_KERNEL=%s: the processor lacks it", s)
				}
				kern, found = kk.k, true
			}
		}
		if !found {
			bn.Fatalf("KEV_GEMM_KERNEL=%q: want avx512, avx2 or go", s)
		}
	}
	withKernel(kern, func() {
		for _, nk := range [][2]int{{8192, 1024}, {1024, 2048}, {7168, 1024}, {1024, 3584}} {
			for _, m := range []int{1, 40, 58, 240, 2392} {
				n, k := nk[0], nk[1]
				bn.Run(fmt.Sprintf("N%d_K%d/M%d", n, k, m), func(bn *testing.B) {
					b := &Backend{Threads: threads}
					r := rand.New(rand.NewPCG(1, 2))
					x, _ := b.FromFloat32([]int{m, k}, randFloats(r, m*k))
					w, _ := b.FromFloat32([]int{n, k}, randFloats(r, n*k))
					y, _ := b.MatMul(x, w) // packs the weight
					b.Free(y)
					for bn.Loop() {
						y, _ := b.MatMul(x, w)
						b.Free(y)
					}
					bn.ReportMetric(float64(2*m*n*k)*float64(bn.N)/bn.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	})
}

// FuzzGemmSmall checks gemmNT and gemmNN at fuzzed shapes: every kernel the
// processor has gives the plain Go kernel's bits, and those are within
// float64's sum.
func FuzzGemmSmall(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint16(1), true, false, uint64(1))
	f.Add(uint8(13), uint8(33), uint16(257), false, true, uint64(2))
	f.Fuzz(func(t *testing.T, m8, n8 uint8, k16 uint16, trans, add bool, seed uint64) {
		m, n, k := 1+int(m8)%70, 1+int(n8)%70, int(k16)%600
		r := rand.New(rand.NewPCG(seed, 5))
		lda, ldb, ldc := k+1, k+2, n+3
		if !trans {
			ldb = n + 2
		}
		a, b := randFloats(r, m*lda+1), randFloats(r, ldb*max(n, k)+1)
		c0 := randFloats(r, m*ldc)
		var first []float32
		for _, kk := range allKernels() {
			if !kk.ok {
				continue
			}
			c := append([]float32(nil), c0...)
			withKernel(kk.k, func() {
				if trans {
					gemmNT(m, n, k, a, lda, b, ldb, c, ldc, add)
				} else {
					gemmNN(m, n, k, a, lda, b, ldb, c, ldc, add)
				}
			})
			if first == nil {
				first = c
				want, mag := refNT(m, n, k, a, lda, b, ldb, c0, ldc, add, trans)
				for i := range m {
					for j := range n {
						if !near(c[i*ldc+j], want[i*n+j], mag[i*n+j], 1e-6) {
							t.Fatalf("trans %v %dx%dx%d: c[%d,%d] = %v, want %v", trans, m, n, k, i, j, c[i*ldc+j], want[i*n+j])
						}
					}
				}
				continue
			}
			for i := range c {
				if math.Float32bits(c[i]) != math.Float32bits(first[i]) {
					t.Fatalf("trans %v %dx%dx%d: kernel %v c[%d] = %v, Go kernel %v", trans, m, n, k, kk.k, i, c[i], first[i])
				}
			}
		}
	})
}

// TestWidenBF16T8 checks the assembly widening transpose against Go.
func TestWidenBF16T8(t *testing.T) {
	if !useAVX2 {
		t.Skip("the processor lacks AVX2: no assembly widening")
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 29))
	for _, blocks := range []int{1, 3, 32} {
		lds := 8*blocks + r.IntN(9)
		src := make([]uint16, 8*lds)
		for i := range src {
			src[i] = half.BF16FromF32(float32(r.NormFloat64()))
		}
		dst := make([]float32, 8*blocks*nr)
		widenBF16T8(&dst[3], &src[0], lds, blocks)
		for p := range 8 * blocks {
			for c := range nr {
				want := float32(0)
				if c >= 3 && c < 11 {
					want = half.BF16ToF32(src[(c-3)*lds+p])
				}
				if dst[p*nr+c] != want {
					t.Fatalf("blocks %d: dst[%d, %d] = %v, want %v", blocks, p, c, dst[p*nr+c], want)
				}
			}
		}
	}
}

// TestTileGoFused checks the serving plain Go micro-kernel (the one other
// architectures run) against the exact one within float32's rounding of a
// chain, and that a row's bits do not depend on the rows computed with it.
func TestTileGoFused(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 31))
	const mr = 4
	for _, kc := range []int{1, 7, 64, 300} {
		for _, load := range []bool{false, true} {
			a, b := randFloats(r, kc*mr), randFloats(r, kc*nr)
			ldc := nr + 3
			c0 := randFloats(r, mr*ldc)
			got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
			tileGoFused(mr, mr, kc, a, b, got, ldc, load)
			tileGo(mr, mr, kc, a, b, want, ldc, load)
			for i := range mr {
				for j := range nr {
					mag := 0.0
					if load {
						mag = math.Abs(float64(c0[i*ldc+j]))
					}
					for p := range kc {
						mag += math.Abs(float64(a[p*mr+i]) * float64(b[p*nr+j]))
					}
					if !near(got[i*ldc+j], float64(want[i*ldc+j]), mag, 1e-5) {
						t.Fatalf("kc %d load %v: c[%d,%d] = %v, exact kernel %v", kc, load, i, j, got[i*ldc+j], want[i*ldc+j])
					}
				}
			}
			one := append([]float32(nil), c0...)
			tileGoFused(mr, 1, kc, a, b, one, ldc, load)
			for j := range nr {
				if math.Float32bits(one[j]) != math.Float32bits(got[j]) {
					t.Fatalf("kc %d load %v: row 0 alone c[%d] = %v, with the others %v", kc, load, j, one[j], got[j])
				}
			}
		}
	}
}

// TestConformancePlainFused runs the conformance suite on the plain Go
// kernel as other architectures serve with it.
func TestConformancePlainFused(t *testing.T) {
	defer func(v bool) { plainFused = v }(plainFused)
	plainFused = true
	backendtest.RunAll(t, &Backend{Threads: 2, generic: true}, tolerance)
}

// BenchmarkFMAPeak measures the processor's multiply-add ceiling as the
// GEMM sees it: KEV_GEMM_THREADS goroutines (default GOMAXPROCS) each run
// the micro-kernel over one A block and one B panel that stay in their
// core's L1 cache, so neither memory nor packing limits it. GFLOP/s at 1
// thread against GFLOP/s at 16 says what the cores give together (clocks
// under load, shared cores) — the bound on the GEMMs' parallel speed-up.
func BenchmarkFMAPeak(bn *testing.B) {
	threads := New().Threads
	if s := os.Getenv("KEV_GEMM_THREADS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			bn.Fatalf("KEV_GEMM_THREADS=%q: want a positive number", s)
		}
		threads = v
	}
	const kc, reps = 128, 2000
	kern := gemmKern
	mr := kern.mr()
	b := &Backend{Threads: threads}
	r := rand.New(rand.NewPCG(3, 4))
	a, w := randFloats(r, kc*mr), randFloats(r, kc*nr)
	for i := range a {
		a[i] *= 1e-3 // sums stay finite over every rep
	}
	bn.Run(fmt.Sprintf("%v/T%d", kern, threads), func(bn *testing.B) {
		for bn.Loop() {
			b.jobs(threads, func(int, int) {
				c := make([]float32, mr*nr)
				for range reps {
					kern.tile(mr, kc, a, w, c, nr, true)
				}
			})
		}
		flops := 2 * float64(mr*nr*kc) * reps * float64(threads) * float64(bn.N)
		bn.ReportMetric(flops/bn.Elapsed().Seconds()/1e9, "GFLOP/s")
		bn.ReportMetric(flops/bn.Elapsed().Seconds()/1e9/float64(threads), "GFLOP/s/thread")
	})
}
