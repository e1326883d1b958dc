package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
)

// bf16Ref is the plain Go reference of the bf16 product: x rounded to bf16,
// each output one float32 sum over the K pairs in order, the odd element's
// product added before the even one's (as VDPBF16PS does). The products of
// two bf16 values are exact in float32, so a fused multiply-add gives the
// same bits as a multiply and an add.
func bf16Ref(xs []float32, ws []uint16, m, n, k int) []float32 {
	y := make([]float32, m*n)
	for i := range m {
		x := xs[i*k : (i+1)*k]
		for j := range n {
			w := ws[j*k : (j+1)*k]
			var acc float32
			for q := 0; q < k; q += 2 {
				if q+1 < k {
					acc += half.RoundBF16(x[q+1]) * half.BF16ToF32(w[q+1])
				}
				acc += half.RoundBF16(x[q]) * half.BF16ToF32(w[q])
			}
			y[i*n+j] = acc
		}
	}
	return y
}

// absRef returns Σ_p |x̂_p·w_p| for each output: the scale of its rounding
// error.
func absRef(xs []float32, ws []uint16, m, n, k int) []float64 {
	y := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += math.Abs(float64(half.RoundBF16(xs[i*k+p])) * float64(half.BF16ToF32(ws[j*k+p])))
			}
			y[i*n+j] = s
		}
	}
	return y
}

// bf16Case draws x [m, k] and a BF16 weight [n, k].
func bf16Case(r *rand.Rand, m, n, k int) ([]float32, []uint16) {
	xs := make([]float32, m*k)
	for i := range xs {
		xs[i] = float32(r.NormFloat64())
	}
	ws := make([]uint16, n*k)
	for i := range ws {
		ws[i] = half.BF16FromF32(float32(r.NormFloat64() * 0.1))
	}
	return xs, ws
}

// bf16Kernels returns the kernels that run here and, for each, the largest
// accepted error against bf16Ref relative to Σ|x̂·w|; t, when not nil, logs
// the kernels left out.
func bf16Kernels(t *testing.T) map[bf16Kernel]float64 {
	ks := map[bf16Kernel]float64{bf16Widen: 1e-5}
	// VDPBF16PS adds a lane's two products in the reference's order, each
	// rounded once: the same bits. TDPBF16PS may order a tile's sums its own
	// way.
	tols := map[bf16Kernel]float64{bf16AVX512: 0, bf16AMX: 1e-5}
	for _, k := range []bf16Kernel{bf16AVX512, bf16AMX} {
		if bf16Runs(k) {
			ks[k] = tols[k]
		} else if t != nil {
			t.Logf("kernel %v does not run on this processor: not tested", k)
		}
	}
	return ks
}

// runBF16 computes xs · wᵀ with kernel kern.
func runBF16(b *Backend, kern bf16Kernel, xs []float32, ws []uint16, m, n, k int) []float32 {
	ys := make([]float32, m*n)
	for i := range ys {
		ys[i] = float32(math.NaN())
	}
	switch kern {
	case bf16AVX512:
		b.matmulDPBF16(xs, b.packBF16(ws, n, k), m, wholeOut(ys, n))
	case bf16AMX:
		b.matmulAMX(xs, b.packBF16(ws, n, k), m, wholeOut(ys, n))
	default:
		w := &Tensor{shape: []int{n, k}, dtype: tensor.BF16, bits: ws}
		b.matmulBF16Widen(xs, w, m, n, k, ys)
	}
	return ys
}

var bf16Shapes = [][3]int{
	{1, 1, 1}, {1, 32, 2}, {3, 33, 5}, {4, 31, 16}, {5, 64, 32}, {12, 32, 33},
	{13, 70, 64}, {17, 7, 130}, {33, 96, 100}, {40, 65, 257}, {64, 37, 1030},
}

func TestBF16KernelsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	b := &Backend{Threads: 3}
	for kern, tol := range bf16Kernels(t) {
		for _, sh := range bf16Shapes {
			m, n, k := sh[0], sh[1], sh[2]
			xs, ws := bf16Case(r, m, n, k)
			want, scale := bf16Ref(xs, ws, m, n, k), absRef(xs, ws, m, n, k)
			got := runBF16(b, kern, xs, ws, m, n, k)
			exact := 0
			for i := range got {
				d := math.Abs(float64(got[i]) - float64(want[i]))
				if !(d <= tol*scale[i]) {
					t.Fatalf("%v %dx%dx%d: y[%d] = %v, reference %v (Σ|x̂w| %.3g)", kern, m, n, k, i, got[i], want[i], scale[i])
				}
				if got[i] == want[i] {
					exact++
				}
			}
			t.Logf("%v %dx%dx%d: %d of %d outputs equal the reference's bits", kern, m, n, k, exact, len(got))
		}
	}
}

// FuzzBF16Kernels compares every kernel that runs here with the reference
// on shapes drawn by the fuzzer.
func FuzzBF16Kernels(f *testing.F) {
	f.Add(uint8(1), uint8(1), uint16(1), uint64(1))
	f.Add(uint8(13), uint8(33), uint16(65), uint64(2))
	f.Add(uint8(40), uint8(64), uint16(1024), uint64(3))
	f.Fuzz(func(t *testing.T, m, n uint8, k uint16, seed uint64) {
		mm, nn, kk := 1+int(m)%70, 1+int(n)%100, 1+int(k)%1500
		r := rand.New(rand.NewPCG(seed, 15))
		xs, ws := bf16Case(r, mm, nn, kk)
		want, scale := bf16Ref(xs, ws, mm, nn, kk), absRef(xs, ws, mm, nn, kk)
		for kern, tol := range bf16Kernels(nil) {
			got := runBF16(&Backend{Threads: 2}, kern, xs, ws, mm, nn, kk)
			for i := range got {
				if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol*scale[i]) {
					t.Fatalf("%v %dx%dx%d: y[%d] = %v, reference %v", kern, mm, nn, kk, i, got[i], want[i])
				}
			}
		}
	})
}

// TestBF16KernelsBatchInvariant checks that each kernel gives a row the same
// bits alone, in a batch at any position, and on any number of threads.
func TestBF16KernelsBatchInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for kern := range bf16Kernels(t) {
		// One panel and many rows: the threads split the rows.
		for _, sh := range [][3]int{{29, 70, 130}, {50, 96, 1024}, {100, 20, 130}} {
			m, n, k := sh[0], sh[1], sh[2]
			xs, ws := bf16Case(r, m, n, k)
			all := runBF16(&Backend{Threads: 4}, kern, xs, ws, m, n, k)
			one := runBF16(&Backend{Threads: 1}, kern, xs, ws, m, n, k)
			for i := range all {
				if math.Float32bits(all[i]) != math.Float32bits(one[i]) {
					t.Fatalf("%v %dx%dx%d: y[%d] = %v on 4 threads, %v on 1", kern, m, n, k, i, all[i], one[i])
				}
			}
			for _, lo := range []int{0, 7, m - 1} {
				for _, hi := range []int{lo + 1, min(m, lo+5)} {
					part := runBF16(&Backend{Threads: 2}, kern, xs[lo*k:hi*k], ws, hi-lo, n, k)
					for i := range part {
						if math.Float32bits(part[i]) != math.Float32bits(all[lo*n+i]) {
							t.Fatalf("%v %dx%dx%d: rows [%d, %d): y[%d] = %v, %v in the whole batch", kern, m, n, k, lo, hi, i, part[i], all[lo*n+i])
						}
					}
				}
			}
		}
	}
}

// TestBF16MatMulWeightCache checks MatMul on a BF16 weight: concurrent first
// use packs the weight once and every caller gets the reference's values; a
// heap weight then drops its bits and still reads back exactly (ToHost,
// Embedding, SliceRows); a mapped one keeps them.
func TestBF16MatMulWeightCache(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, n, k := 9, 45, 67
	xs, ws := bf16Case(r, m, n, k)
	want, scale := bf16Ref(xs, ws, m, n, k), absRef(xs, ws, m, n, k)
	b := New()
	for _, mapped := range []bool{false, true} {
		wt, err := b.FromBits(tensor.BF16, []int{n, k}, ws)
		if err != nil {
			t.Fatal(err)
		}
		if mapped {
			wt = &Tensor{shape: []int{n, k}, dtype: tensor.BF16, bits: ws}
		}
		x, err := b.FromFloat32([]int{m, k}, xs)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		outs := make([][]float32, 6)
		errs := make([]error, len(outs))
		for g := range outs {
			wg.Go(func() {
				y, err := b.MatMul(x, wt)
				if err == nil {
					outs[g], err = b.ToHost(y)
				}
				errs[g] = err
			})
		}
		wg.Wait()
		for g, y := range outs {
			if errs[g] != nil {
				t.Fatal(errs[g])
			}
			for i := range y {
				if d := math.Abs(float64(y[i]) - float64(want[i])); !(d <= 1e-5*scale[i]) {
					t.Fatalf("mapped=%v goroutine %d: y[%d] = %v, reference %v", mapped, g, i, y[i], want[i])
				}
			}
		}
		c := wt.(*Tensor)
		if packed := c.packedBF16.Load() != nil; packed != (bf16Use != bf16Widen) {
			t.Errorf("mapped=%v: packed %v with kernel %v", mapped, packed, bf16Use)
		}
		if dropped := c.bits == nil; dropped != (!mapped && bf16Use != bf16Widen) {
			t.Errorf("mapped=%v: bits dropped %v with kernel %v", mapped, dropped, bf16Use)
		}
		host, err := b.ToHost(wt)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range host {
			if v != half.BF16ToF32(ws[i]) {
				t.Fatalf("mapped=%v: ToHost[%d] = %v, want %v", mapped, i, v, half.BF16ToF32(ws[i]))
			}
		}
		e, err := b.Embedding(wt, []int32{44, 0, 31, 32})
		if err != nil {
			t.Fatal(err)
		}
		eh, _ := b.ToHost(e)
		for i, id := range []int{44, 0, 31, 32} {
			for q := range k {
				if eh[i*k+q] != half.BF16ToF32(ws[id*k+q]) {
					t.Fatalf("mapped=%v: Embedding row %d [%d] = %v, want %v", mapped, id, q, eh[i*k+q], half.BF16ToF32(ws[id*k+q]))
				}
			}
		}
		s, err := b.SliceRows(wt, 30, 34)
		if err != nil {
			t.Fatal(err)
		}
		sh, _ := b.ToHost(s)
		for i, v := range sh {
			if v != half.BF16ToF32(ws[30*k+i]) {
				t.Fatalf("mapped=%v: SliceRows [%d] = %v, want %v", mapped, i, v, half.BF16ToF32(ws[30*k+i]))
			}
		}
		b.Free(wt)
		if _, err := b.MatMul(x, wt); err == nil {
			t.Errorf("mapped=%v: MatMul after Free: no error", mapped)
		}
	}
}

// TestBF16PackRoundTrip checks that unpacking the panels gives the weight back.
func TestBF16PackRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range [][2]int{{1, 1}, {33, 5}, {64, 32}, {70, 257}, {200, 63}} {
		n, k := sh[0], sh[1]
		_, ws := bf16Case(r, 0, n, k)
		p := (&Backend{Threads: 3}).packBF16(ws, n, k)
		if p.kh%16 != 0 || p.kh < (k+1)/2 {
			t.Fatalf("%dx%d: kh = %d", n, k, p.kh)
		}
		got := make([]uint16, n*k)
		p.unpackRows(got, 0, n)
		for i := range got {
			if got[i] != ws[i] {
				t.Fatalf("%dx%d: element %d = %#x, want %#x", n, k, i, got[i], ws[i])
			}
		}
	}
}

func TestBF16PickKernel(t *testing.T) {
	if got := pickBF16Kernel("widen"); got != bf16Widen {
		t.Errorf("widen: %v", got)
	}
	best := pickBF16Kernel("")
	for _, k := range []bf16Kernel{bf16AMX, bf16AVX512} {
		if got := pickBF16Kernel(k.String()); bf16Runs(k) && got != k || !bf16Runs(k) && got != best {
			t.Errorf("%v: picked %v (runs here: %v, best %v)", k, got, bf16Runs(k), best)
		}
	}
	if bf16Runs(bf16AMX) && best != bf16AMX || !bf16Runs(bf16AMX) && bf16Runs(bf16AVX512) && best != bf16AVX512 {
		t.Errorf("best kernel %v", best)
	}
}

// BenchmarkGEMMBF16 times MatMul with a BF16 weight over the projection
// shapes of the models at three batch sizes. KEV_BF16_KERNEL picks the kernel
// (amx, avx512bf16, widen), KEV_GEMM_THREADS the thread count.
func BenchmarkGEMMBF16(bn *testing.B) {
	threads := New().Threads
	if s := os.Getenv("KEV_GEMM_THREADS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			bn.Fatalf("KEV_GEMM_THREADS=%q: want a positive integer", s)
		}
		threads = v
	}
	if s := os.Getenv(bf16KernelEnv); s != "" && s != bf16Use.String() {
		bn.Skipf("%s=%s does not run on this processor", bf16KernelEnv, s)
	}
	b := &Backend{Threads: threads}
	r := rand.New(rand.NewPCG(9, 10))
	for _, nk := range [][2]int{{8192, 1024}, {1024, 2048}, {7168, 1024}, {1024, 3584}} {
		n, k := nk[0], nk[1]
		_, ws := bf16Case(r, 0, n, k)
		w, err := b.FromBits(tensor.BF16, []int{n, k}, ws)
		if err != nil {
			bn.Fatal(err)
		}
		for _, m := range []int{40, 240, 2392} {
			xs, _ := bf16Case(r, m, 0, k)
			x, err := b.FromFloat32([]int{m, k}, xs)
			if err != nil {
				bn.Fatal(err)
			}
			bn.Run(fmt.Sprintf("%v/N%d/K%d/M%d/T%d", bf16Use, n, k, m, threads), func(bn *testing.B) {
				y, err := b.MatMul(x, w) // packs the weight
				if err != nil {
					bn.Fatal(err)
				}
				b.Free(y)
				for bn.Loop() {
					y, _ := b.MatMul(x, w)
					b.Free(y)
				}
				bn.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(bn.N)/bn.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestBF16RoundRow checks the rounding of x to bf16 pairs against bf16Pair
// (and so half.BF16FromF32): random values, ties, the largest floats (which
// round to infinity), infinities and NaNs, at lengths around the assembly's
// 32-element steps. Subnormal inputs are left out: VCVTNE2PS2BF16 reads them
// as zero.
func TestBF16RoundRow(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	special := []uint32{0x3f808000, 0x3f818000, 0xbf808000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,
		0x7fc00001, 0xffa00000, 0x7f800001, 0, 0x80000000, 0x00800000}
	for _, n := range []int{1, 2, 31, 32, 33, 64, 95, 130} {
		row := make([]float32, n)
		for i := range row {
			if r.IntN(3) == 0 {
				row[i] = math.Float32frombits(special[r.IntN(len(special))])
			} else {
				row[i] = float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
			}
		}
		got := make([]uint32, (n+1)/2)
		roundRow(got, row)
		for p := range got {
			if want := bf16Pair(row, 2*p); got[p] != want {
				t.Fatalf("n=%d pair %d of (%#x, …): %#x, want %#x", n, p, math.Float32bits(row[2*p]), got[p], want)
			}
		}
	}
}

// amxModel is a plain Go model of amxBF16x32: the tile configuration is
// checked, then tiles 4 and 5 (x rows 0–15 and 16–31), 6 and 7 (panel
// columns 0–15 and 16–31) are multiplied into four 16×16 float32 tiles and
// stored to c, as TDPBF16PS defines the product.
func amxModel(t *testing.T) func(cfg *byte, a *uint32, lda int, w *uint32, kt int, c *float32) {
	return func(cfg *byte, a *uint32, lda int, w *uint32, kt int, c *float32) {
		want := amxConfig()
		// Errorf, not Fatalf: the model runs on the product's goroutines.
		if got := *(*[64]byte)(unsafe.Pointer(cfg)); got != want {
			t.Errorf("tile configuration % x", got)
			return
		}
		if lda%4 != 0 || kt < 1 {
			t.Errorf("lda %d, kt %d", lda, kt)
			return
		}
		ld := lda / 4
		xs := unsafe.Slice(a, 31*ld+16*kt) // the last row's last pair
		ws := unsafe.Slice(w, 16*kt*32)    // kt·16 pair rows of 32 columns
		cs := unsafe.Slice(c, 32*32)
		f := func(v uint32, hi bool) float32 {
			if hi {
				v >>= 16
			}
			return half.BF16ToF32(uint16(v))
		}
		for i := range 32 {
			for j := range 32 {
				var acc float32
				for p := range 16 * kt {
					xv, wv := xs[i*ld+p], ws[p*32+j]
					acc += f(xv, false) * f(wv, false)
					acc += f(xv, true) * f(wv, true)
				}
				cs[i*32+j] = acc
			}
		}
	}
}

// TestAMXBlocking runs matmulAMX's blocking, padding and copies with the Go
// model of the AMX kernel in place of the tile instructions, so that they
// are checked on processors without AMX too.
func TestAMXBlocking(t *testing.T) {
	defer func(k func(*byte, *uint32, int, *uint32, int, *float32)) { amxBlock = k }(amxBlock)
	amxBlock = amxModel(t)
	r := rand.New(rand.NewPCG(16, 17))
	for _, sh := range [][3]int{{1, 1, 1}, {31, 33, 31}, {33, 64, 64}, {40, 20, 130}, {70, 100, 257}, {100, 40, 1100}} {
		m, n, k := sh[0], sh[1], sh[2]
		xs, ws := bf16Case(r, m, n, k)
		want, scale := bf16Ref(xs, ws, m, n, k), absRef(xs, ws, m, n, k)
		for _, threads := range []int{1, 3} {
			ys := make([]float32, m*n)
			for i := range ys {
				ys[i] = float32(math.NaN())
			}
			b := &Backend{Threads: threads}
			b.matmulAMX(xs, b.packBF16(ws, n, k), m, wholeOut(ys, n))
			for i := range ys {
				if d := math.Abs(float64(ys[i]) - float64(want[i])); !(d <= 1e-5*scale[i]) {
					t.Fatalf("%dx%dx%d threads %d: y[%d] = %v, reference %v", m, n, k, threads, i, ys[i], want[i])
				}
			}
		}
	}
}

// TestMatMulSplitBF16 checks MatMulSplit against MatMul then SplitCols, bit
// for bit, with each bf16 kernel that puts a panel's columns in the blocks
// holding them: VDPBF16PS where the processor has it, and the AMX blocking
// with the Go model of its kernel in place of the tile instructions.
func TestMatMulSplitBF16(t *testing.T) {
	defer func(k bf16Kernel, f func(*byte, *uint32, int, *uint32, int, *float32)) { bf16Use, amxBlock = k, f }(bf16Use, amxBlock)
	kernels := []bf16Kernel{bf16AMX}
	if hasDPBF16 {
		kernels = append(kernels, bf16AVX512)
	}
	amxBlock = amxModel(t)
	r := rand.New(rand.NewPCG(18, 19))
	for _, kern := range kernels {
		bf16Use = kern
		for _, c := range []struct {
			m, k   int
			widths []int
		}{
			{1, 8, []int{32, 32}},
			{13, 40, []int{64, 0, 16, 16}},
			{40, 70, []int{100, 28, 3, 1}},
			{130, 64, []int{33, 31, 64}},
		} {
			n := 0
			for _, v := range c.widths {
				n += v
			}
			xs, ws := bf16Case(r, c.m, n, c.k)
			for _, threads := range []int{1, 3} {
				b := &Backend{Threads: threads}
				x, _ := b.FromFloat32([]int{c.m, c.k}, xs)
				w, _ := b.FromBits(tensor.BF16, []int{n, c.k}, ws)
				y, err := b.MatMul(x, w)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := b.SplitCols(y, c.widths...)
				got, err := b.MatMulSplit(x, w, c.widths...)
				if err != nil {
					t.Fatal(err)
				}
				for i := range got {
					g, wv := got[i].(*Tensor).f32, want[i].(*Tensor).f32
					for j := range wv {
						if math.Float32bits(g[j]) != math.Float32bits(wv[j]) {
							t.Fatalf("%v %dx%d %v threads %d: block %d element %d = %v, MatMul then SplitCols %v", kern, c.m, c.k, c.widths, threads, i, j, g[j], wv[j])
						}
					}
				}
			}
		}
	}
}
