package cpu

import (
	"golang.org/x/sys/cpu"

	"github.com/kevgo/kev/tensor"
)

// useAVX2 reports whether the processor runs the assembly kernels.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

func init() {
	if useAVX2 {
		fastMatMul = matmulAVX2
	}
}

// The assembly kernels (matmul_amd64.s). All read k float32 values per row,
// k a positive multiple of 8, and add their sums to y.

// dot3x4 adds x_r · w_c to y[r*ldy+c] for three rows of x (stride ldx) and
// four rows of w (stride ldw).
//
//go:noescape
func dot3x4(x *float32, ldx int, w *float32, ldw int, k int, y *float32, ldy int)

// dot1x4 adds x · w_c to y[c] for one row of x and four rows of w (stride
// ldw).
//
//go:noescape
func dot1x4(x *float32, w *float32, ldw int, k int, y *float32)

// axpyRows adds Σ_{r<rows} c[r]·x[r*ldx+j] to y[j] for j < n, n a positive
// multiple of 8 and rows positive, the rows in order.
//
//go:noescape
func axpyRows(y *float32, x *float32, ldx int, c *float32, rows int, n int)

// widenBF16 sets dst[i] to the float32 value of the bfloat16 src[i] for
// i < n, n a positive multiple of 8.
//
//go:noescape
func widenBF16(dst *float32, src *uint16, n int)

// kBlock is the K block length (a multiple of 8). It is fixed, so each
// output's arithmetic depends on K alone, never on M: a row gets the same
// bits alone or in a batch.
const kBlock = 512

// mBlock is how many rows of x one pass takes: mBlock·kBlock float32s
// (1 MiB) stay in a core's L2 cache while the weight rows stream past them.
const mBlock = 512

// stageRows is how many 16-bit weight rows are widened into a contiguous
// float32 buffer at a time: one long sequential read of the weights.
const stageRows = 32

// matmulAVX2 sets ys [m, n] to xs [m, k] · wᵀ with the assembly kernels.
//
// Rows of x run in blocks of mBlock, K in blocks of kBlock. Within a block,
// stageRows weight rows at a time are widened to float32 if stored in 16
// bits (F32 rows are read in place), then every four of them are multiplied
// against three rows of x at a time (twelve eight-lane accumulators, summed
// across lanes at the end of the block and added to y; a lone row of x gets
// the same arithmetic). The last k mod 8 columns of a block and the last
// n mod 4 weight rows are added in Go.
func matmulAVX2(b *Backend, xs []float32, wt *Tensor, m, n, k int, ys []float32) {
	kb := min(kBlock, k)
	direct := wt.dtype == tensor.F32
	work := func(lo, hi int) {
		var buf []float32
		if !direct {
			buf = make([]float32, stageRows*kb)
		}
		for i0 := 0; i0 < m; i0 += mBlock {
			i1 := min(i0+mBlock, m)
			for pc := 0; pc < k; pc += kb {
				kc := min(kb, k-pc)
				k8 := kc &^ 7
				for j0 := lo; j0 < hi; j0 += stageRows {
					rows := min(stageRows, hi-j0)
					ws, ldw := wt.f32, k
					if direct {
						ws = ws[j0*k+pc:]
					} else {
						for r := range rows {
							stageRow(wt, j0+r, k, pc, buf[r*kb:r*kb+kc])
						}
						ws, ldw = buf, kb
					}
					j := 0
					if k8 > 0 {
						for ; j+4 <= rows; j += 4 {
							yj := ys[j0+j:]
							w0 := &ws[j*ldw]
							i := i0
							for ; i+3 <= i1; i += 3 {
								dot3x4(&xs[i*k+pc], k, w0, ldw, k8, &yj[i*n], n)
							}
							for ; i < i1; i++ {
								dot1x4(&xs[i*k+pc], w0, ldw, k8, &yj[i*n])
							}
						}
					}
					// Weight rows below j still need columns from k8; rows
					// from j need the whole block.
					for i := i0; i < i1; i++ {
						xr := xs[i*k+pc : i*k+pc+kc]
						for r := 0; r < rows; r++ {
							from := k8
							if r >= j {
								from = 0
							}
							if from < kc {
								ys[i*n+j0+r] += dot(xr[from:], ws[r*ldw+from:r*ldw+kc])
							}
						}
					}
				}
			}
		}
	}
	if m*n*k < 1<<16 {
		work(0, n)
	} else {
		b.parallel(n, 4, work)
	}
}

// stageRow sets dst to columns [pc, pc+len(dst)) of 16-bit weight row j,
// widened to float32.
func stageRow(wt *Tensor, j, k, pc int, dst []float32) {
	off := j*k + pc
	src := wt.bits[off : off+len(dst)]
	n8 := 0
	if wt.dtype == tensor.BF16 {
		n8 = len(dst) &^ 7
		if n8 > 0 {
			widenBF16(&dst[0], &src[0], n8)
		}
	}
	widen(dst[n8:], src[n8:], wt.dtype)
}
