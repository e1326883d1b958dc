package cpu

import (
	"os"
	"sync"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
)

// bf16 compute. A MatMul whose weight is stored in BF16 computes as the GPUs
// and PyTorch do in bf16: each row of x is rounded to bf16 (to nearest, ties
// to even) at the product's input, the weight is used as stored, and the
// products of the bf16 pairs are summed in float32 into a float32 output.
//
// Three kernels compute it:
//
//   - bf16AMX: the tile unit of processors with AMX-BF16 (TDPBF16PS, 32×32
//     outputs a call, every tile instruction inside one assembly call);
//   - bf16AVX512: VDPBF16PS on processors with AVX512_BF16 (12×32 outputs
//     in 24 registers, each output one lane summing the K pairs in order);
//   - bf16Widen: elsewhere, x is rounded to bf16 and the float32 kernels
//     run on it with the weight widened exactly: the same products, summed
//     in the float32 kernels' order.
//
// The first two read the weight in panels of 32 columns with the K pairs
// side by side (pairs along K, "VNNI" order), packed on first use and kept on
// the tensor. Each output's sum depends on its own row and column alone, so
// its bits never depend on M, on the other rows or on the thread count.

// bf16Kernel names a bf16 product kernel.
type bf16Kernel int

const (
	bf16Widen  bf16Kernel = iota // x rounded to bf16, float32 kernels
	bf16AVX512                   // VDPBF16PS
	bf16AMX                      // TDPBF16PS
)

// String returns the kernel's name as KEV_BF16_KERNEL spells it.
func (k bf16Kernel) String() string {
	switch k {
	case bf16AVX512:
		return "avx512bf16"
	case bf16AMX:
		return "amx"
	}
	return "widen"
}

// bf16KernelEnv names the environment variable that picks the bf16 kernel:
// amx, avx512bf16 or widen. A kernel the processor lacks is not picked.
const bf16KernelEnv = "KEV_BF16_KERNEL"

// bf16Use is the kernel MatMul runs for BF16 weights: the one named by
// KEV_BF16_KERNEL where it runs here, else the fastest that runs here.
var bf16Use = pickBF16Kernel(os.Getenv(bf16KernelEnv))

// pickBF16Kernel returns the kernel named (if it runs here) or the fastest.
func pickBF16Kernel(name string) bf16Kernel {
	for _, k := range []bf16Kernel{bf16AMX, bf16AVX512, bf16Widen} {
		if name == k.String() && bf16Runs(k) {
			return k
		}
	}
	for _, k := range []bf16Kernel{bf16AMX, bf16AVX512} {
		if bf16Runs(k) {
			return k
		}
	}
	return bf16Widen
}

// matmulBF16 sets ys [m, n] to xs [m, k] · wᵀ for a BF16 weight, in bf16.
func (b *Backend) matmulBF16(xs []float32, wt *Tensor, m, n, k int, ys []float32) {
	if b.panelledBF16() {
		b.matmulPanelsBF16(xs, wt, m, wholeOut(ys, n))
		return
	}
	b.matmulBF16Widen(xs, wt, m, n, k, ys)
}

// panelledBF16 reports whether the backend runs bf16 products on the
// weights' bf16 panels (VDPBF16PS or AMX), not the widening kernel.
func (b *Backend) panelledBF16() bool {
	return !b.generic && (bf16Use == bf16AVX512 || bf16Use == bf16AMX)
}

// matmulPanelsBF16 puts xs [m, k] · wᵀ for a BF16 weight in out with the
// kernel on the weight's panels; panelledBF16 must hold.
func (b *Backend) matmulPanelsBF16(xs []float32, wt *Tensor, m int, out colOut) {
	if bf16Use == bf16AMX {
		b.matmulAMX(xs, wt.bf16Panels(b), m, out)
		return
	}
	b.matmulDPBF16(xs, wt.bf16Panels(b), m, out)
}

// colOut is where the bf16 kernels put a product's columns: in blocks, block
// b holding columns offs[b] … offs[b+1]−1 as dst[b] [m, offs[b+1]−offs[b]]
// (MatMulSplit's), or in one block, the whole product (wholeOut).
type colOut struct {
	offs []int
	dst  [][]float32
}

// wholeOut is the product ys [m, n] as one block.
func wholeOut(ys []float32, n int) colOut { return colOut{offs: []int{0, n}, dst: [][]float32{ys}} }

// block returns the block holding column j.
func (o *colOut) block(j int) int {
	b := 0
	for o.offs[b+1] <= j {
		b++
	}
	return b
}

// span returns where columns j … j+cols−1 of row i start and the row
// stride, when one block holds them all.
func (o *colOut) span(i, j, cols int) (dst []float32, ld int, ok bool) {
	b := o.block(j)
	if j+cols > o.offs[b+1] {
		return nil, 0, false
	}
	ld = o.offs[b+1] - o.offs[b]
	return o.dst[b][i*ld+j-o.offs[b]:], ld, true
}

// put sets columns j … j+len(v)−1 of row i to v.
func (o *colOut) put(i, j int, v []float32) {
	for len(v) > 0 {
		b := o.block(j)
		w := o.offs[b+1] - o.offs[b]
		k := min(len(v), o.offs[b+1]-j)
		copy(o.dst[b][i*w+j-o.offs[b]:], v[:k])
		v, j = v[k:], j+k
	}
}

// matmulBF16Widen rounds x to bf16 and runs the float32 kernels on it.
func (b *Backend) matmulBF16Widen(xs []float32, wt *Tensor, m, n, k int, ys []float32) {
	xr := make([]float32, m*k)
	b.parallel(m, 1, func(lo, hi int) {
		for i, v := range xs[lo*k : hi*k] {
			xr[lo*k+i] = half.RoundBF16(v)
		}
	})
	w := &Tensor{shape: wt.shape, dtype: tensor.BF16, bits: wt.halfBits()}
	clear(ys)
	b.matmul16(xr, w, m, n, k, ys)
}

// bf16Panels is a BF16 weight [n, k] in panels of 32 columns: panel q holds,
// for each pair index p < kh, the 32-bit pairs (w[j][2p], w[j][2p+1]) of
// columns j = 32q … 32q+31 (the even element in the low half). Columns past
// n and elements past k are zero; kh is ⌈k/2⌉ rounded up to 16, a whole AMX
// tile of pairs.
type bf16Panels struct {
	n, k, kh int
	w        []uint32
}

// bf16PanelCols is the number of columns of a panel.
const bf16PanelCols = 32

// panel returns panel q.
func (p *bf16Panels) panel(q int) []uint32 {
	sz := p.kh * bf16PanelCols
	return p.w[q*sz : (q+1)*sz]
}

// panels returns the number of panels.
func (p *bf16Panels) panels() int { return (p.n + bf16PanelCols - 1) / bf16PanelCols }

// packBF16 packs a row-major BF16 weight [n, k], the panels split over the
// backend's threads.
func (b *Backend) packBF16(bits []uint16, n, k int) *bf16Panels {
	kh := ((k+1)/2 + 15) &^ 15
	p := &bf16Panels{n: n, k: k, kh: kh}
	p.w = make([]uint32, p.panels()*kh*bf16PanelCols)
	b.parallel(p.panels(), 1, func(lo, hi int) {
		for j := lo * bf16PanelCols; j < min(hi*bf16PanelCols, n); j++ {
			row := bits[j*k : (j+1)*k]
			dst := p.panel(j / bf16PanelCols)[j%bf16PanelCols:]
			for q := 0; q+1 < k; q += 2 {
				dst[(q/2)*bf16PanelCols] = uint32(row[q]) | uint32(row[q+1])<<16
			}
			if k%2 == 1 {
				dst[(k/2)*bf16PanelCols] = uint32(row[k-1])
			}
		}
	})
	return p
}

// unpackRows sets dst [hi−lo, k] to rows [lo, hi) of the weight.
func (p *bf16Panels) unpackRows(dst []uint16, lo, hi int) {
	k := p.k
	for j := lo; j < hi; j++ {
		src := p.panel(j / bf16PanelCols)[j%bf16PanelCols:]
		row := dst[(j-lo)*k : (j-lo+1)*k]
		for q := range row {
			row[q] = uint16(src[(q/2)*bf16PanelCols] >> (16 * (q % 2)))
		}
	}
}

// bf16Panels returns the weight's panels, packing them on first use on b's
// threads (one call packs, others wait). Once packed, a weight whose bits are the
// tensor's own heap copy drops them: the panels are then its only copy
// (halfBits and halfRows read them back). Mapped file memory is kept.
func (t *Tensor) bf16Panels(b *Backend) *bf16Panels {
	if p := t.packedBF16.Load(); p != nil {
		return p
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.packedBF16.Load(); p != nil {
		return p
	}
	p := b.packBF16(t.bits, t.shape[0], t.shape[1])
	t.packedBF16.Store(p)
	if t.heap {
		t.bits = nil
	}
	return p
}

// halfBits returns the 16-bit values of a BF16 or F16 tensor, row-major: its
// bits, or a copy unpacked from its panels when it dropped them.
func (t *Tensor) halfBits() []uint16 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if p := t.packedBF16.Load(); t.bits == nil && p != nil {
		out := make([]uint16, p.n*p.k)
		p.unpackRows(out, 0, p.n)
		return out
	}
	return t.bits
}

// halfRows returns rows [lo, hi) of a 2-D BF16 or F16 tensor [n, k]: a slice
// of its bits, or a copy unpacked from its panels when it dropped them.
func (t *Tensor) halfRows(lo, hi int) []uint16 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if p := t.packedBF16.Load(); t.bits == nil && p != nil {
		out := make([]uint16, (hi-lo)*p.k)
		p.unpackRows(out, lo, hi)
		return out
	}
	k := t.shape[len(t.shape)-1]
	return t.bits[lo*k : hi*k]
}

// bf16Pair returns the 32-bit pair of x[q] and x[q+1] rounded to bf16 (the
// even element in the low half); a q+1 past the row's end counts as zero.
func bf16Pair(row []float32, q int) uint32 {
	lo := uint32(half.BF16FromF32(row[q]))
	if q+1 < len(row) {
		return lo | uint32(half.BF16FromF32(row[q+1]))<<16
	}
	return lo
}

// roundRow sets dst[p] for p < ⌈len(row)/2⌉ to bf16Pair(row, 2p), with
// VCVTNE2PS2BF16 where the processor has it.
func roundRow(dst []uint32, row []float32) {
	n := 0
	if hasDPBF16 {
		if n = len(row) &^ 31; n > 0 {
			roundBF16Pairs(&dst[0], &row[0], n)
		}
	}
	for q := n; q < len(row); q += 2 {
		dst[q/2] = bf16Pair(row, q)
	}
}

// dpbf16Rows is the height of the VDPBF16PS kernel's main block; the rows
// past the last whole block go in blocks of dpbf16Tail.
const (
	dpbf16Rows = 12
	dpbf16Tail = 4
)

// dpbf16Block is a block of rows for the VDPBF16PS kernels: rows [i0, i0+h)
// of the padded x, stored from xp[i0·kh] as kh groups of h pairs.
type dpbf16Block struct{ i0, h int }

// dpbf16Blocks splits m rows into blocks of 12, then blocks of 4; it returns
// them and the padded row count.
func dpbf16Blocks(m int) ([]dpbf16Block, int) {
	var bs []dpbf16Block
	i := 0
	for ; i+dpbf16Rows <= m; i += dpbf16Rows {
		bs = append(bs, dpbf16Block{i, dpbf16Rows})
	}
	for ; i < m; i += dpbf16Tail {
		bs = append(bs, dpbf16Block{i, dpbf16Tail})
	}
	return bs, i
}

// packXDP packs the rows of x [m, k] for the VDPBF16PS kernels: each block's
// rows rounded to bf16, pair index major, rows past m zero.
func (b *Backend) packXDP(xs []float32, m, k, kh int, blocks []dpbf16Block, mp int) []uint32 {
	xp := getU32(mp * kh)
	if n := len(blocks); n > 0 && blocks[n-1].i0+blocks[n-1].h > m {
		clear(xp[blocks[n-1].i0*kh:]) // the block holding rows past m, which the kernels read
	}
	b.parallel(len(blocks), 1, func(lo, hi int) {
		pairs := make([]uint32, (k+1)/2)
		for _, bl := range blocks[lo:hi] {
			dst := xp[bl.i0*kh : (bl.i0+bl.h)*kh]
			for r := 0; r < bl.h && bl.i0+r < m; r++ {
				roundRow(pairs, xs[(bl.i0+r)*k:(bl.i0+r+1)*k])
				for p, v := range pairs {
					dst[p*bl.h+r] = v
				}
			}
		}
	})
	return xp
}

// bf16ChunkBytes bounds the packed rows of x one pass keeps in cache while a
// panel streams past them.
const bf16ChunkBytes = 256 << 10

// matmulDPBF16 sets ys [m, n] to xs [m, k] · wᵀ with the VDPBF16PS kernels.
//
// The threads split the panels or the row blocks (splitBF16); each runs over
// chunks of its row blocks (about bf16ChunkBytes of packed x), and within a
// chunk every one of its panels against every block. A block that fills its 12 or 4 rows and 32 columns
// writes to ys directly, others through a buffer.
func (b *Backend) matmulDPBF16(xs []float32, p *bf16Panels, m int, out colOut) {
	n, k, kh := p.n, p.k, p.kh
	blocks, mp := dpbf16Blocks(m)
	xp := b.packXDP(xs, m, k, kh, blocks, mp)
	defer putU32(xp)
	chunkRows := max(dpbf16Rows, bf16ChunkBytes/(4*kh))
	// work runs panels [lo, hi) against blocks [blo, bhi).
	work := func(lo, hi, blo, bhi int) {
		var tmp [dpbf16Rows * bf16PanelCols]float32
		for c0 := blo; c0 < bhi; {
			c1, rows := c0, 0
			for c1 < bhi && (c1 == c0 || rows+blocks[c1].h <= chunkRows) {
				rows += blocks[c1].h
				c1++
			}
			for q := lo; q < hi; q++ {
				w := p.panel(q)
				j0 := q * bf16PanelCols
				cols := min(bf16PanelCols, n-j0)
				for _, bl := range blocks[c0:c1] {
					x := &xp[bl.i0*kh]
					kern := dpbf16x12
					if bl.h == dpbf16Tail {
						kern = dpbf16x4
					}
					if cols == bf16PanelCols && bl.i0+bl.h <= m {
						if d, ld, ok := out.span(bl.i0, j0, cols); ok {
							kern(x, &w[0], kh, &d[0], ld)
							continue
						}
					}
					kern(x, &w[0], kh, &tmp[0], bf16PanelCols)
					for r := 0; r < bl.h && bl.i0+r < m; r++ {
						out.put(bl.i0+r, j0, tmp[r*bf16PanelCols:r*bf16PanelCols+cols])
					}
				}
			}
			c0 = c1
		}
	}
	b.splitBF16(m*n*k, p.panels(), len(blocks), work)
}

// splitBF16 runs work over panels × row blocks on the backend's threads:
// split over the panels where there are enough of them for every thread,
// else over the row blocks; on one thread for small products. Each output's
// arithmetic is the same however the work is split.
func (b *Backend) splitBF16(size, panels, blocks int, work func(lo, hi, blo, bhi int)) {
	// Jobs of a few panels (or blocks) each, claimed as threads come free:
	// about four a thread.
	grain := func(n int) int { return max(1, n/(4*max(b.Threads, 1))) }
	switch {
	case size < 1<<16:
		work(0, panels, 0, blocks)
	case panels >= b.Threads || blocks < 2*panels:
		g := grain(panels)
		b.jobs((panels+g-1)/g, func(lo, hi int) { work(lo*g, min(hi*g, panels), 0, blocks) })
	default:
		g := grain(blocks)
		b.jobs((blocks+g-1)/g, func(blo, bhi int) { work(0, panels, blo*g, min(bhi*g, blocks)) })
	}
}

// u32Pool recycles the packed-x buffers of the bf16 kernels (megabytes at
// long states: a fresh one is zeroed by one thread).
var u32Pool sync.Pool

// getU32 returns n uint32s of undefined value.
func getU32(n int) []uint32 {
	if p, ok := u32Pool.Get().(*[]uint32); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]uint32, n)
}

// putU32 hands a buffer from getU32 back.
func putU32(s []uint32) { u32Pool.Put(&s) }

// amxRows is the height of the AMX kernel's block.
const amxRows = 32

// amxChunkBytes bounds the rows of x an AMX pass keeps in cache while a panel
// streams past them: AMX processors have 2 MiB of L2 a core, and a panel of
// K = 3584 takes 224 KiB of it.
const amxChunkBytes = 1 << 20

// matmulAMX sets ys [m, n] to xs [m, k] · wᵀ with the AMX kernel.
//
// x is rounded to bf16 into a row-major buffer of pairs (rows padded to a
// multiple of 32 and K to 2·kh with zeros); the threads split the panels or
// the 32-row blocks (splitBF16), and each runs over chunks of blocks, every
// panel of its own against every block of the chunk; each call's 32×32
// block goes through a buffer into ys.
func (b *Backend) matmulAMX(xs []float32, p *bf16Panels, m int, out colOut) {
	n, k, kh := p.n, p.k, p.kh
	mp := (m + amxRows - 1) / amxRows * amxRows
	// Rows of x lie 64 bytes further apart than their kh pairs: at a
	// stride of a multiple of 4 KiB the sixteen rows of a tile load would
	// all fall in one set of the L1 cache.
	ldx := kh + 16
	xa := getU32(mp * ldx)
	defer putU32(xa)
	clear(xa[m*ldx:]) // the rows past m; the kernel reads them
	b.parallel(m, 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			roundRow(xa[i*ldx:i*ldx+kh], xs[i*k:(i+1)*k])
		}
	})
	chunkRows := max(amxRows, amxChunkBytes/(4*ldx)/amxRows*amxRows)
	cfg := amxConfig()
	// work runs panels [lo, hi) against 32-row blocks [blo, bhi).
	work := func(lo, hi, blo, bhi int) {
		var tmp [amxRows * bf16PanelCols]float32
		for c0 := blo * amxRows; c0 < bhi*amxRows; c0 += chunkRows {
			c1 := min(c0+chunkRows, bhi*amxRows)
			for q := lo; q < hi; q++ {
				w := p.panel(q)
				j0 := q * bf16PanelCols
				cols := min(bf16PanelCols, n-j0)
				for i0 := c0; i0 < c1; i0 += amxRows {
					amxBlock(&cfg[0], &xa[i0*ldx], 4*ldx, &w[0], kh/16, &tmp[0])
					for r := 0; r < amxRows && i0+r < m; r++ {
						out.put(i0+r, j0, tmp[r*bf16PanelCols:r*bf16PanelCols+cols])
					}
				}
			}
		}
	}
	b.splitBF16(m*n*k, p.panels(), mp/amxRows, work)
}

// amxBlock is the AMX kernel matmulAMX calls: amxBF16x32, or in tests a Go
// model of it on processors without AMX.
var amxBlock = amxBF16x32

// amxConfig returns the tile configuration of amxBF16x32: palette 1, tiles
// 0–7 of 16 rows of 64 bytes.
func amxConfig() [64]byte {
	var c [64]byte
	c[0] = 1 // palette
	for t := range 8 {
		c[16+2*t] = 64 // bytes a row
		c[48+t] = 16   // rows
	}
	return c
}
