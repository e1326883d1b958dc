package cpu

import "golang.org/x/sys/cpu"

// useAVX2 reports whether the processor runs the vector kernel below.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// axpyRows adds Σ_{r<rows} c[r]·x[r*ldx+j] to y[j] for j < n, n a positive
// multiple of 8 and rows positive, the rows in order (vec_amd64.s).
//
//go:noescape
func axpyRows(y *float32, x *float32, ldx int, c *float32, rows int, n int)

// prefetchRows asks for rows (positive) rows of n (positive) float32s from
// p, stride apart, to be brought into the L2 cache; it reads nothing.
//
//go:noescape
func prefetchRows(p *float32, stride, rows, n int)
