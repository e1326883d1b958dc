package cpu

import "golang.org/x/sys/cpu"

// useAVX2 reports whether the processor runs the assembly kernels.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

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
