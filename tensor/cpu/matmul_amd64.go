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

// maxPanel bounds the bytes of x one K block touches, so that the block
// stays in a core's L2 cache while the weight rows stream past it.
const maxPanel = 1 << 20

// matmulAVX2 sets ys [m, n] to xs [m, k] · wᵀ with the assembly kernels.
//
// K runs in blocks of kb columns (a multiple of 8, at most maxPanel bytes of
// x). Within a block, each band of four weight rows is widened to float32
// if stored in 16 bits, then multiplied against three rows of x at a time
// (twelve eight-lane accumulators, summed across lanes at the end of the
// block and added to y). The last k mod 8 columns are added in Go.
func matmulAVX2(b *Backend, xs []float32, wt *Tensor, m, n, k int, ys []float32) {
	kb := max(256, maxPanel/(4*m)) &^ 7
	kb = min(kb, k)
	work := func(lo, hi int) {
		var buf []float32
		if wt.dtype != tensor.F32 {
			buf = make([]float32, 4*kb)
		}
		for pc := 0; pc < k; pc += kb {
			kc := min(kb, k-pc)
			k8 := kc &^ 7
			for j := lo; j < hi; j += 4 {
				if hi-j < 4 {
					for jj := j; jj < hi; jj++ {
						wr := widenedRow(wt, jj, k, pc, kc, buf)
						for i := 0; i < m; i++ {
							ys[i*n+jj] += dot(xs[i*k+pc:i*k+pc+kc], wr)
						}
					}
					continue
				}
				var ws []float32
				ldw := k
				if wt.dtype == tensor.F32 {
					ws = wt.f32[j*k+pc:]
				} else {
					ldw = kb
					for r := range 4 {
						widenedRow(wt, j+r, k, pc, kc, buf[r*kb:])
					}
					ws = buf
				}
				if k8 > 0 {
					i := 0
					for ; i+3 <= m; i += 3 {
						dot3x4(&xs[i*k+pc], k, &ws[0], ldw, k8, &ys[i*n+j], n)
					}
					for ; i < m; i++ {
						dot1x4(&xs[i*k+pc], &ws[0], ldw, k8, &ys[i*n+j])
					}
				}
				if k8 < kc {
					for i := 0; i < m; i++ {
						xr := xs[i*k+pc+k8 : i*k+pc+kc]
						y := ys[i*n+j : i*n+j+4]
						for c := range 4 {
							y[c] += dot(xr, ws[c*ldw+k8:c*ldw+kc])
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

// widenedRow returns columns [pc, pc+kc) of weight row j as float32: a view
// of F32 storage, or the row widened into buf.
func widenedRow(wt *Tensor, j, k, pc, kc int, buf []float32) []float32 {
	off := j*k + pc
	if wt.dtype == tensor.F32 {
		return wt.f32[off : off+kc]
	}
	dst, src := buf[:kc], wt.bits[off:off+kc]
	n8 := 0
	if wt.dtype == tensor.BF16 {
		n8 = kc &^ 7
		if n8 > 0 {
			widenBF16(&dst[0], &src[0], n8)
		}
	}
	widen(dst[n8:], src[n8:], wt.dtype)
	return dst
}
