package cpu

import (
	"math"
	"os"
	"runtime"
	"sync"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
)

// The packed GEMM behind MatMul, in the manner of GotoBLAS and BLIS (the
// small products of gemm_small.go run the same micro-kernels on operands
// read in place): C [m, n] = A [m, k] · B where B is read as nr-column
// panels (each k×nr, row p holding B's nr values at p contiguously) and A
// as mr-row blocks (each kc×mr, row p holding the block's mr values at p).
// A register-blocked micro-kernel multiplies one mr-row block of A by one
// panel of B over a run of kc values of p: it broadcasts one A value and
// fuses it into nr accumulators with one multiply-add per output.
//
// Every output is one chain of fused multiply-adds over p = 0..k−1 in
// order, from zero (or from C's value when adding): the run over a kc block
// starts from the sums the previous block stored in C. Short row blocks run
// in kernels of fewer rows, and tiles past the last column on zero-padded
// panels, with the same arithmetic. So an output's bits
// depend on its own row of A and column of B alone: never on m, on the
// other rows, on the tiling, on the thread count or on which micro-kernel
// ran (every kernel computes the same chain, the plain Go one with fma32).

const (
	nr      = 32  // columns of a B panel (one AVX-512 kernel tile, two AVX2 ones)
	kcBlock = 256 // values of p a micro-kernel call runs over
	mcBlock = 240 // rows of A one job packs (a multiple of every kernel's mr)
	smallM  = 64  // up to this many rows the work splits over columns alone
)

// gemmKernel names a micro-kernel.
type gemmKernel int

const (
	kernGo     gemmKernel = iota // plain Go, exact fused multiply-adds (fma32)
	kernAVX2                     // 6×16 with AVX2 and FMA, two per tile
	kernAVX512                   // 12×32 with AVX-512, broadcasts embedded in the FMAs
)

// String returns the kernel's name as KEV_GEMM_KERNEL spells it.
func (k gemmKernel) String() string {
	switch k {
	case kernAVX2:
		return "avx2"
	case kernAVX512:
		return "avx512"
	}
	return "go"
}

// gemmKern is the fastest micro-kernel this processor runs, set at start-up
// (gemm_amd64.go); tests and benchmarks switch it.
var gemmKern = kernGo

// mr returns the rows of an A block for the kernel.
func (k gemmKernel) mr() int {
	switch k {
	case kernAVX2:
		return 6
	case kernAVX512:
		return 12
	}
	return 4
}

// tile computes rows rows (at most mr) of the mr×nr tile c (row stride
// ldc): each c[i*ldc+j] becomes the chain of fused multiply-adds of
// a[p*mr+i]·b[p*nr+j] over p < kc, from zero or, with load, from its value.
func (k gemmKernel) tile(rows, kc int, a, b, c []float32, ldc int, load bool) {
	k.tileAhead(rows, kc, a, b, c, ldc, load, false)
}

// tileAhead is tile; with ahead, the AVX-512 kernel also prefetches the kc·nr
// values after b (the panel's next kc rows, where b is a run of a packed
// panel) into L2 as it runs. The bits are tile's.
func (k gemmKernel) tileAhead(rows, kc int, a, b, c []float32, ldc int, load, ahead bool) {
	mr := k.mr()
	if rows < 1 || rows > mr {
		panic("cpu: micro-kernel rows out of range")
	}
	_, _, _ = a[kc*mr-1], b[kc*nr-1], c[(rows-1)*ldc+nr-1]
	if k == kernGo {
		if plainFused {
			tileGoFused(mr, rows, kc, a, b, c, ldc, load)
		} else {
			tileGo(mr, rows, kc, a, b, c, ldc, load)
		}
		return
	}
	tileAsm(k, rows, kc, a, b, c, ldc, load, ahead)
}

// tileS is tile on operands read in place: each c[i*ldc+j] (i < rows ≤ mr,
// j < nr) becomes the chain of fused multiply-adds of a[i*rs+p*cs]·b[p*ldb+j]
// over p < kc, from zero or, with load, from its value — the same chain,
// so the same bits, as tile on the operands packed.
func (k gemmKernel) tileS(rows, kc int, a []float32, rs, cs int, b []float32, ldb int, c []float32, ldc int, load bool) {
	mr := k.mr()
	if rows < 1 || rows > mr || kc < 1 || rs < 0 || cs < 0 {
		panic("cpu: micro-kernel arguments out of range")
	}
	_, _, _ = a[(rows-1)*rs+(kc-1)*cs], b[(kc-1)*ldb+nr-1], c[(rows-1)*ldc+nr-1]
	if k != kernGo {
		tileAsmS(k, rows, kc, a, rs, cs, b, ldb, c, ldc, load)
		return
	}
	s := scratchPool.Get().(*gemmScratch)
	if len(s.a) < kc*mr {
		s.a = make([]float32, kc*mr)
	}
	if len(s.b) < kc*nr {
		s.b = make([]float32, kc*nr)
	}
	ap, bp := s.a[:kc*mr], s.b[:kc*nr]
	for p := range kc {
		for i := range rows {
			ap[p*mr+i] = a[i*rs+p*cs]
		}
		copy(bp[p*nr:(p+1)*nr], b[p*ldb:p*ldb+nr])
	}
	k.tile(rows, kc, ap, bp, c, ldc, load)
	scratchPool.Put(s)
}

// plainFused selects tileGoFused for the plain Go kernel: on processors
// without assembly micro-kernels (every architecture but amd64), where the
// plain Go kernel is the one that serves. On amd64 the plain Go kernel is
// the assembly kernels' reference in tests and keeps tileGo's exact bits.
var plainFused = runtime.GOARCH != "amd64"

// tileGoFused is the plain Go micro-kernel for serving: each output row's nr
// sums in a local array, the K loop outside, so the compiler keeps the
// operands in registers and, on arm64, ppc64 and s390x, fuses each a·b+s
// into one instruction (Go allows fusing x*y+z). Every output is still one
// chain over p in order from its start value, so its bits never depend on
// the rows beside it (a row alone and in a block of four run the same
// chain). tileGo's software fma32 is exact on every processor, and slower.
func tileGoFused(mr, rows, kc int, a, b, c []float32, ldc int, load bool) {
	i := 0
	for ; i+4 <= rows; i += 4 {
		for j := 0; j < nr; j += 4 {
			tile4x4Go(mr, i, j, kc, a, b, c, ldc, load)
		}
	}
	var acc [nr]float32
	for ; i < rows; i++ {
		cr := c[i*ldc : i*ldc+nr]
		if load {
			copy(acc[:], cr)
		} else {
			acc = [nr]float32{}
		}
		for p := range kc {
			av := a[p*mr+i]
			bp := (*[nr]float32)(b[p*nr : p*nr+nr])
			for j := range acc {
				acc[j] += av * bp[j]
			}
		}
		copy(cr, acc[:])
	}
}

// tile4x4Go runs tileGoFused's chains for rows i..i+3 and columns j..j+3
// with sixteen accumulators in registers.
func tile4x4Go(mr, i, j, kc int, a, b, c []float32, ldc int, load bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 float32
	if load {
		r := c[i*ldc+j:]
		c00, c01, c02, c03 = r[0], r[1], r[2], r[3]
		r = r[ldc:]
		c10, c11, c12, c13 = r[0], r[1], r[2], r[3]
		r = r[ldc:]
		c20, c21, c22, c23 = r[0], r[1], r[2], r[3]
		r = r[ldc:]
		c30, c31, c32, c33 = r[0], r[1], r[2], r[3]
	}
	for p := range kc {
		ap := (*[4]float32)(a[p*mr+i : p*mr+i+4])
		bp := (*[4]float32)(b[p*nr+j : p*nr+j+4])
		a0, a1, a2, a3 := ap[0], ap[1], ap[2], ap[3]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	r := c[i*ldc+j:]
	r[0], r[1], r[2], r[3] = c00, c01, c02, c03
	r = r[ldc:]
	r[0], r[1], r[2], r[3] = c10, c11, c12, c13
	r = r[ldc:]
	r[0], r[1], r[2], r[3] = c20, c21, c22, c23
	r = r[ldc:]
	r[0], r[1], r[2], r[3] = c30, c31, c32, c33
}

// tileGo is the plain Go micro-kernel, the reference of the assembly ones.
func tileGo(mr, rows, kc int, a, b, c []float32, ldc int, load bool) {
	for i := range rows {
		cr := c[i*ldc : i*ldc+nr]
		for j := range cr {
			var s float32
			if load {
				s = cr[j]
			}
			for p := range kc {
				s = fma32(a[p*mr+i], b[p*nr+j], s)
			}
			cr[j] = s
		}
	}
}

// fma32 returns a·b+c rounded once to float32 (round to nearest even), as
// the processors' fused multiply-add does.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b) // exact: 48 significant bits at most
	cd := float64(c)
	s := p + cd
	// In float32's normal range, a float64 lies halfway between two float32
	// values only when its 29 low mantissa bits are 1000…0; anywhere else
	// rounding s is rounding a·b+c.
	if bits := math.Float64bits(s); bits&(1<<29-1) != 1<<28 {
		if e := bits >> 52 & 0x7ff; e > 1023-126 && e < 1023+128 {
			return float32(s)
		}
	}
	r := float32(s)
	if float64(r) == s || s != s || math.IsInf(float64(r), 0) {
		return r
	}
	// Rounding s again to float32 is wrong only where s lies halfway between
	// r and its other neighbour o while a·b+c itself does not.
	o := math.Nextafter32(r, float32(math.Inf(-1)))
	if float64(r) < s {
		o = math.Nextafter32(r, float32(math.Inf(1)))
	}
	if (float64(r)+float64(o))/2 != s {
		return r
	}
	bv := s - p
	e := (p - (s - bv)) + (cd - bv) // a·b + c − s, exactly (TwoSum)
	if e != 0 && (e > 0) == (o > r) {
		return o
	}
	return r
}

// panels is an F32 weight [n, k] packed for the micro-kernels: panel q
// holds rows q·nr… of the weight as k rows of nr values,
// data[q*k*nr+p*nr+j] = w[q*nr+j, p], zero past row n.
type panels struct {
	n, k int
	data []float32
}

// packPanels packs the row-major weight w [n, k].
func (b *Backend) packPanels(w []float32, n, k int) *panels {
	np := (n + nr - 1) / nr
	pk := &panels{n: n, k: k, data: make([]float32, np*k*nr)}
	src := bSource{b: w, ldb: k, trans: true, n: n, k: k}
	b.parallel(np, 1, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			src.panel(q, 0, k, pk.data[q*k*nr:(q+1)*k*nr])
		}
	})
	return pk
}

// unpackRows sets dst to rows [lo, hi) of the weight, row-major.
func (pk *panels) unpackRows(dst []float32, lo, hi int) {
	k := pk.k
	for r := lo; r < hi; r++ {
		src := pk.data[(r/nr)*k*nr+r%nr:]
		row := dst[(r-lo)*k : (r-lo+1)*k]
		for p := range row {
			row[p] = src[p*nr]
		}
	}
}

// packedWeight returns the panels of an uploaded F32 matrix, packing it on
// first use and dropping its row-major copy (one copy of a weight in
// memory). Concurrent first uses pack once.
func (b *Backend) packedWeight(t *Tensor) *panels {
	if pk := t.packed.Load(); pk != nil {
		return pk
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if pk := t.packed.Load(); pk != nil {
		return pk
	}
	pk := b.packPanels(t.f32, t.shape[0], t.shape[1])
	t.packed.Store(pk)
	t.f32 = nil
	return pk
}

// storage returns an F32 tensor's row-major data, or its panels once packed
// (then f32 is nil).
func (t *Tensor) storage() (f32 []float32, pk *panels) {
	if !t.uploaded {
		return t.f32, nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.f32, t.packed.Load()
}

// rowMajor returns an F32 tensor's data in row-major order (a new copy for
// a packed weight).
func (t *Tensor) rowMajor() []float32 {
	f, pk := t.storage()
	if f != nil || pk == nil {
		return f
	}
	out := make([]float32, pk.n*pk.k)
	pk.unpackRows(out, 0, pk.n)
	return out
}

// copyRows sets dst to rows [lo, hi) of the matrix t as float32.
func (t *Tensor) copyRows(dst []float32, lo, hi int) {
	w := t.shape[1]
	if t.dtype != tensor.F32 {
		widen(dst[:(hi-lo)*w], t.halfRows(lo, hi), t.dtype)
		return
	}
	f, pk := t.storage()
	if f == nil && pk != nil {
		pk.unpackRows(dst, lo, hi)
		return
	}
	copy(dst[:(hi-lo)*w], f[lo*w:hi*w])
}

// bSource is where the micro-kernels' B panels come from: packed weight
// panels, or a matrix packed panel by panel into scratch — a 16-bit weight
// [n, k] (widened), or float32 b stored [n, k] (trans) or [k, n], row
// stride ldb.
type bSource struct {
	pk    *panels
	w16   []uint16
	dt    tensor.DType
	b     []float32
	ldb   int
	trans bool
	n, k  int
}

// panel returns rows [pc, pc+kc) of panel q, in buf (kc*nr values) unless
// the source is packed already.
func (s *bSource) panel(q, pc, kc int, buf []float32) []float32 {
	if s.pk != nil {
		off := q*s.k*nr + pc*nr
		return s.pk.data[off : off+kc*nr]
	}
	buf = buf[:kc*nr]
	j0 := q * nr
	cols := min(nr, s.n-j0)
	switch {
	case s.w16 != nil && s.dt == tensor.BF16:
		j := 0
		if k8 := kc &^ 7; useAVX2 && k8 > 0 {
			for ; j+8 <= cols; j += 8 { // eight rows, eight columns at a time in registers
				o := (j0+j)*s.k + pc
				_ = s.w16[o+7*s.k+kc-1]
				widenBF16T8(&buf[j], &s.w16[o], s.k, k8/8)
				for r := range 8 {
					for p := k8; p < kc; p++ {
						buf[p*nr+j+r] = half.BF16ToF32(s.w16[o+r*s.k+p])
					}
				}
			}
		}
		for ; j+4 <= cols; j += 4 { // four rows at a time, as below
			o := (j0+j)*s.k + pc
			r0, r1, r2, r3 := s.w16[o:o+kc], s.w16[o+s.k:o+s.k+kc], s.w16[o+2*s.k:o+2*s.k+kc], s.w16[o+3*s.k:o+3*s.k+kc]
			for p, h := range r0 {
				d := buf[p*nr+j : p*nr+j+4 : p*nr+j+4]
				d[0], d[1], d[2], d[3] = half.BF16ToF32(h), half.BF16ToF32(r1[p]), half.BF16ToF32(r2[p]), half.BF16ToF32(r3[p])
			}
		}
		for ; j < cols; j++ {
			for p, h := range s.w16[(j0+j)*s.k+pc : (j0+j)*s.k+pc+kc] {
				buf[p*nr+j] = half.BF16ToF32(h)
			}
		}
	case s.w16 != nil:
		for j := range cols {
			for p, h := range s.w16[(j0+j)*s.k+pc : (j0+j)*s.k+pc+kc] {
				buf[p*nr+j] = half.F16ToF32(h)
			}
		}
	case s.trans:
		j := 0
		for ; j+4 <= cols; j += 4 { // four rows of b at a time: one 16-byte store a row of buf
			o := (j0+j)*s.ldb + pc
			r0, r1, r2, r3 := s.b[o:o+kc], s.b[o+s.ldb:o+s.ldb+kc], s.b[o+2*s.ldb:o+2*s.ldb+kc], s.b[o+3*s.ldb:o+3*s.ldb+kc]
			for p, v := range r0 {
				d := buf[p*nr+j : p*nr+j+4 : p*nr+j+4]
				d[0], d[1], d[2], d[3] = v, r1[p], r2[p], r3[p]
			}
		}
		for ; j < cols; j++ {
			src := s.b[(j0+j)*s.ldb+pc : (j0+j)*s.ldb+pc+kc]
			for p, v := range src {
				buf[p*nr+j] = v
			}
		}
	default:
		for p := range kc {
			copy(buf[p*nr:p*nr+cols], s.b[(pc+p)*s.ldb+j0:(pc+p)*s.ldb+j0+cols])
		}
	}
	if cols < nr {
		for p := range kc {
			clear(buf[p*nr+cols : (p+1)*nr])
		}
	}
	return buf
}

// packA sets dst to rows [i0, i1) and columns [pc, pc+kc) of a (row stride
// lda) as mr-row blocks, dst[blk*kc*mr+p*mr+i] = a[(i0+blk*mr+i)*lda+pc+p].
// The slots past row i1 keep what they held: the micro-kernels read the
// rows they compute alone.
func packA(dst, a []float32, lda, i0, i1, pc, kc, mr int) {
	for blk, r0 := 0, i0; r0 < i1; blk, r0 = blk+1, r0+mr {
		d := dst[blk*kc*mr : (blk+1)*kc*mr]
		rows := min(mr, i1-r0)
		for i := range rows {
			src := a[(r0+i)*lda+pc : (r0+i)*lda+pc+kc]
			for p, v := range src {
				d[p*mr+i] = v
			}
		}
	}
}

// packAFull sets dst to rows [i0, i1) of a (row stride lda) as mr-row
// blocks over all of K: dst[blk*mr*k+p*mr+i] = a[(i0+blk*mr+i)*lda+p].
func packAFull(dst, a []float32, lda, i0, i1, k, mr int) {
	for blk, r0 := 0, i0; r0 < i1; blk, r0 = blk+1, r0+mr {
		d := dst[blk*mr*k : (blk+1)*mr*k]
		for i := range min(mr, i1-r0) {
			for p, v := range a[(r0+i)*lda : (r0+i)*lda+k] {
				d[p*mr+i] = v
			}
		}
	}
}

// gemmScratch is one goroutine's packing space.
type gemmScratch struct {
	a, b, c []float32
	d       []float32 // a fused job's block of C (swiGLUF32)
}

var scratchPool = sync.Pool{New: func() any { return new(gemmScratch) }}

// grow makes room for na values of packed A.
func (s *gemmScratch) grow(na int) {
	if len(s.a) < na {
		s.a = make([]float32, na)
	}
	if len(s.b) < kcBlock*nr {
		s.b = make([]float32, kcBlock*nr)
	}
	if len(s.c) < 12*nr {
		s.c = make([]float32, 12*nr)
	}
}

// gemmArgs is one product C [m, n] (row stride ldc) = A [m, k] (row stride
// lda) · B, added to C's values when add is set.
type gemmArgs struct {
	m, n, k int
	a       []float32
	lda     int
	b       bSource
	c       []float32
	ldc     int
	add     bool
	kern    gemmKernel
	// cr and cq place C in c: output (i, q·nr+j) is c[(i−cr)·ldc+(q−cq)·nr+j]
	// (zero for a whole C; a job's own buffer of its rows and panels else).
	cr, cq int
	// q0 is the first panel computed: the product covers output columns
	// q0·nr … n−1 of x·wᵀ (zero for all of them; MatMulSplit's blocks else).
	q0 int
	// apk, when set, is all of A packed by packShared for this kernel,
	// shared by the products of one A (MatMulSplit's blocks).
	apk []float32
}

// wholeA is the most values of A a job packs over all of K at once.
const wholeA = 1 << 17

// block computes rows [i0, i1) of C in the columns of panels [q0, q1).
//
// When those rows of A are few enough to pack over all of K at once, each
// panel streams through whole (its k×nr values in one sequential read, the
// C tile in cache across the kc blocks); otherwise, in the GotoBLAS order,
// the rows of A are packed one kc block at a time and every panel's block
// runs against them. Both orders do the same arithmetic. With apk (all of
// A packed by packAFull, i0 a multiple of mr) the rows are not packed
// again.
func (g *gemmArgs) block(i0, i1, q0, q1 int, s *gemmScratch, apk []float32) {
	mr := g.kern.mr()
	padded := (i1 - i0 + mr - 1) / mr * mr
	whole := padded*g.k <= wholeA
	// a returns the packed A blocks of the kc block at pc and their stride.
	var a func(pc, kc int) ([]float32, int)
	switch {
	case apk != nil:
		base := i0 * g.k
		s.grow(0)
		a = func(pc, kc int) ([]float32, int) { return apk[base+pc*mr:], mr * g.k }
	case whole:
		s.grow(padded * g.k)
		for pc := 0; pc < g.k; pc += kcBlock {
			packA(s.a[pc*padded:], g.a, g.lda, i0, i1, pc, min(kcBlock, g.k-pc), mr)
		}
		a = func(pc, kc int) ([]float32, int) { return s.a[pc*padded:], kc * mr }
	default:
		s.grow(padded * kcBlock)
		a = func(pc, kc int) ([]float32, int) { return s.a, kc * mr }
	}
	if whole {
		// A panel's runs of K follow each other in packed weights: each
		// run's kernels prefetch the next while they work.
		ahead := prefetchAhead && g.b.pk != nil
		for q := q0; q < q1; q++ {
			for pc := 0; pc < g.k; pc += kcBlock {
				kc := min(kcBlock, g.k-pc)
				ap, stride := a(pc, kc)
				g.tiles(ap, stride, g.b.panel(q, pc, kc, s.b), i0, i1, q, pc, kc, s, ahead)
			}
		}
		return
	}
	for pc := 0; pc < g.k; pc += kcBlock {
		kc := min(kcBlock, g.k-pc)
		if apk == nil {
			packA(s.a, g.a, g.lda, i0, i1, pc, kc, mr)
		}
		ap, stride := a(pc, kc)
		for q := q0; q < q1; q++ {
			g.tiles(ap, stride, g.b.panel(q, pc, kc, s.b), i0, i1, q, pc, kc, s, false)
		}
	}
}

// tiles runs the micro-kernel over rows [i0, i1) of C in panel q's columns
// for the kc block at pc: the rows' packed A blocks lie stride values apart
// from ap on, bp holds the panel's block (ahead: a run of packed panels whose
// next run the kernels prefetch). A tile past the last column runs on a
// zero-padded copy of C.
func (g *gemmArgs) tiles(ap []float32, stride int, bp []float32, i0, i1, q, pc, kc int, s *gemmScratch, ahead bool) {
	mr := g.kern.mr()
	load := pc > 0 || g.add
	j0 := q * nr
	cols := min(nr, g.n-j0)
	c := g.c[j0-g.cq*nr:] // C's column j0 is c's column 0; row r is c's row r − cr
	for blk, r0 := 0, i0; r0 < i1; blk, r0 = blk+1, r0+mr {
		a := ap[blk*stride : blk*stride+kc*mr]
		rows := min(mr, i1-r0)
		cr := (r0 - g.cr) * g.ldc
		if cols == nr {
			g.kern.tileAhead(rows, kc, a, bp, c[cr:], g.ldc, load, ahead)
			continue
		}
		t := s.c[:rows*nr]
		if load {
			for i := range rows {
				copy(t[i*nr:i*nr+cols], c[cr+i*g.ldc:])
			}
		}
		g.kern.tileAhead(rows, kc, a, bp, t, nr, load, ahead)
		for i := range rows {
			copy(c[cr+i*g.ldc:cr+i*g.ldc+cols], t[i*nr:])
		}
	}
}

// serial runs the whole product on the calling goroutine.
func (g *gemmArgs) serial() {
	if g.m == 0 || g.n == 0 {
		return
	}
	if g.k == 0 {
		if !g.add {
			for i := range g.m {
				clear(g.c[i*g.ldc : i*g.ldc+g.n])
			}
		}
		return
	}
	s := scratchPool.Get().(*gemmScratch)
	np := (g.n + nr - 1) / nr
	for i0 := 0; i0 < g.m; i0 += mcBlock {
		g.block(i0, min(i0+mcBlock, g.m), g.q0, np, s, nil)
	}
	scratchPool.Put(s)
}

// sharedA is the most values of packed A a threaded product packs once,
// before its jobs, for all of them to read (64 MiB: a 2,400-row state at
// K = 3,584; past it, each job packs its own rows, again for every run of
// panels it takes). A variable for the tests.
var sharedA = 1 << 24

// aPool recycles the buffers of A packed for a threaded product.
var aPool sync.Pool

// runGEMM runs the product on the backend's threads. Up to smallM rows the
// work is cut into jobs of a few panels over all rows (each weight is read
// once); above, into jobs of mcBlock rows by up to 16 panels, consecutive
// jobs sharing panels. The threads claim jobs one at a time as they come
// free, so a thread slowed by the machine holds back one job, not a
// sixteenth of the product. Each output is computed by one thread. Where A
// is small enough, the threads first pack it together, once, and the jobs
// read it from there.
func (b *Backend) runGEMM(g *gemmArgs) {
	threads := max(b.Threads, 1)
	if threads == 1 || g.m*(g.n-g.q0*nr)*g.k < 1<<17 || g.k == 0 {
		g.serial()
		return
	}
	apk := g.apk
	if apk == nil {
		if apk = b.packShared(g); apk != nil {
			defer aPool.Put(&apk)
		}
	}
	q0, np := g.q0, (g.n+nr-1)/nr-g.q0 // the panels computed: q0 … q0+np−1
	run := b.jobs
	if gemmStatic {
		run = func(n int, f func(lo, hi int)) { b.parallel(n, 1, f) }
	}
	if g.m <= smallM {
		pj := max(1, np/(4*threads))
		run((np+pj-1)/pj, func(lo, hi int) {
			s := scratchPool.Get().(*gemmScratch)
			g.block(0, g.m, q0+lo*pj, q0+min(hi*pj, np), s, apk)
			scratchPool.Put(s)
		})
		return
	}
	mb, pj := jobGrid(g.m, np, g.k, threads)
	rb := (g.m + mb - 1) / mb
	chunks := (np + pj - 1) / pj
	run(chunks*rb, func(lo, hi int) {
		s := scratchPool.Get().(*gemmScratch)
		for j := lo; j < hi; j++ {
			ch, r := j/rb, j%rb
			g.block(r*mb, min((r+1)*mb, g.m), q0+ch*pj, q0+min((ch+1)*pj, np), s, apk)
		}
		scratchPool.Put(s)
	})
}

// packShared packs all of A for a threaded product's jobs, once, on the
// backend's threads, where it fits in sharedA values (i0 of a job then a
// multiple of mr); else it returns nil and each job packs its own rows. The
// caller hands the buffer back to aPool.
func (b *Backend) packShared(g *gemmArgs) []float32 {
	mr := g.kern.mr()
	nb := (g.m + mr - 1) / mr
	n := nb * mr * g.k
	if n > sharedA {
		return nil
	}
	var apk []float32
	if p, ok := aPool.Get().(*[]float32); ok && cap(*p) >= n {
		apk = (*p)[:n]
	} else {
		apk = make([]float32, n)
	}
	b.parallel(nb, 1, func(lo, hi int) {
		packAFull(apk[lo*mr*g.k:], g.a, g.lda, lo*mr, min(hi*mr, g.m), g.k, mr)
	})
	return apk
}

// jobGrid picks the jobs of a product of m rows by np panels over K = k: mb
// rows (240, 120 or 60: multiples of every kernel's rows) by pj panels (16
// down to 1). A job reads its rows of A and its panels from the shared
// cache once, so the product moves chunks·(m·k) + rowBlocks·(np·nr·k)
// values: the grid that moves least among those with at least four jobs a
// thread (the last ones short, whichever thread is slow), or the one with
// the most jobs where none has. A narrow weight (N = 1,024) then takes a few
// wide jobs instead of one panel each re-reading all of A.
func jobGrid(m, np, k, threads int) (mb, pj int) {
	bestJobs, bestCost := 0, 0
	for _, b := range []int{mcBlock, mcBlock / 2, mcBlock / 4} {
		for _, p := range []int{16, 8, 4, 2, 1} {
			rb, ch := (m+b-1)/b, (np+p-1)/p
			jobs, cost := rb*ch, ch*m*k+rb*np*nr*k
			enough, bestEnough := jobs >= 4*threads, bestJobs >= 4*threads
			better := bestJobs == 0 ||
				enough && (!bestEnough || cost < bestCost) ||
				!enough && !bestEnough && (jobs > bestJobs || jobs == bestJobs && cost < bestCost)
			if better {
				mb, pj, bestJobs, bestCost = b, p, jobs, cost
			}
		}
	}
	return mb, pj
}

// prefetchAhead lets the kernels of the whole order (gemmArgs.block)
// prefetch a packed panel's next run of K (tileAhead); KEV_GEMM_PREFETCH=0
// turns it off, for benchmarks to compare.
var prefetchAhead = os.Getenv("KEV_GEMM_PREFETCH") != "0"

// gemmStatic makes runGEMM hand each thread one contiguous run of its jobs
// instead of letting the threads claim them one at a time (benchmarks
// compare the two: KEV_GEMM_SCHED=static).
var gemmStatic = false

// kernel returns the micro-kernel the backend runs.
func (b *Backend) kernel() gemmKernel {
	if b.generic {
		return kernGo
	}
	return gemmKern
}

// matmulF32 sets ys [m, n] to xs [m, k] · wᵀ for an F32 weight: an uploaded
// one from its cached panels, any other packed panel by panel.
func (b *Backend) matmulF32(xs []float32, wt *Tensor, m, n, k int, ys []float32) {
	b.runGEMM(&gemmArgs{m: m, n: n, k: k, a: xs, lda: k, b: b.f32Source(wt, n, k), c: ys, ldc: n, kern: b.kernel()})
}

// f32Source returns where the panels of an F32 weight [n, k] come from: an
// uploaded one's cached panels, any other packed panel by panel.
func (b *Backend) f32Source(wt *Tensor, n, k int) bSource {
	src := bSource{n: n, k: k}
	if wt.uploaded {
		src.pk = b.packedWeight(wt)
	} else {
		src.b, src.ldb, src.trans = wt.f32, k, true
	}
	return src
}

// matmul16 sets ys [m, n] to xs [m, k] · wᵀ for a BF16 or F16 weight,
// widened exactly into float32 panels block by block.
func (b *Backend) matmul16(xs []float32, wt *Tensor, m, n, k int, ys []float32) {
	b.runGEMM(&gemmArgs{m: m, n: n, k: k, a: xs, lda: k, b: b.weightSource(wt, n, k), c: ys, ldc: n, kern: b.kernel()})
}

// weightSource returns where the float32 panels of a weight [n, k] come
// from: an F32 weight's as f32Source says, a 16-bit one's widened exactly,
// block by block.
func (b *Backend) weightSource(wt *Tensor, n, k int) bSource {
	if wt.dtype == tensor.F32 {
		return b.f32Source(wt, n, k)
	}
	return bSource{w16: wt.halfBits(), dt: wt.dtype, n: n, k: k}
}

// swiGLUF32 sets out [m, h] to silu(x·Wgᵀ)·(x·Wuᵀ) for an F32 weight
// [Wg; Wu] of 2h rows (the panels of an uploaded one when pk is set), h a
// multiple of nr: MatMul then SwiGLU in one pass over C. Each job computes
// its rows of a run of gate panels and of the matching up panels into its
// own buffer and writes their SwiGLU alone, so the product [m, 2h] never
// goes to memory. The products are the GEMM's, bit for bit.
func (b *Backend) swiGLUF32(xs []float32, wt *Tensor, m, h, k int, out []float32) {
	g := &gemmArgs{m: m, n: 2 * h, k: k, a: xs, lda: k, b: b.f32Source(wt, 2*h, k), kern: b.kernel()}
	threads := max(b.Threads, 1)
	var apk []float32
	if threads > 1 {
		if apk = b.packShared(g); apk != nil {
			defer aPool.Put(&apk)
		}
	}
	np := h / nr // gate panels; up panel q+np pairs with gate panel q
	rows, pj := jobGrid(m, np, k, threads)
	rb := (m + rows - 1) / rows
	chunks := (np + pj - 1) / pj
	b.jobs(chunks*rb, func(lo, hi int) {
		s := scratchPool.Get().(*gemmScratch)
		defer scratchPool.Put(s)
		for j := lo; j < hi; j++ {
			ch, r := j/rb, j%rb
			i0, i1 := r*rows, min((r+1)*rows, m)
			q0, q1 := ch*pj, min((ch+1)*pj, np)
			w := (q1 - q0) * nr
			buf := getF32(&s.d, (i1-i0)*2*w)
			jg := *g
			jg.c, jg.ldc, jg.cr, jg.cq = buf, 2*w, i0, q0
			jg.block(i0, i1, q0, q1, s, apk)
			jg.cq = q0 + np - (q1 - q0) // up panel q0+np lands at column w
			jg.block(i0, i1, q0+np, q1+np, s, apk)
			for i := i0; i < i1; i++ {
				gu := buf[(i-i0)*2*w : (i-i0+1)*2*w]
				y := out[i*h+q0*nr : i*h+q0*nr+w]
				siluVec(y, gu[:w])
				for c, v := range gu[w:] {
					y[c] *= v
				}
			}
		}
	})
}

// getF32 returns n float32s of undefined value from *p, growing it.
func getF32(p *[]float32, n int) []float32 {
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	return (*p)[:n]
}
