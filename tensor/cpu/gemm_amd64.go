package cpu

import "golang.org/x/sys/cpu"

// hasAVX512 reports whether the processor (and its operating system) runs
// the AVX-512 micro-kernel.
var hasAVX512 = cpu.X86.HasAVX512F

func init() {
	switch {
	case hasAVX512:
		gemmKern = kernAVX512
	case useAVX2:
		gemmKern = kernAVX2
	}
}

// The GEMM micro-kernels (gemm_amd64.s). Each computes a tile of C (row
// stride ldc) as described at gemmKernel.tile: a holds kc rows of mr values,
// b kc rows of a panel (nr = 32 values apart), and each output is the chain
// of fused multiply-adds over the kc rows from zero or, with load, from C.

// kern12x32 computes a 12×32 tile with AVX-512.
//
//go:noescape
func kern12x32(kc int, a, b, c *float32, ldc int, load bool)

// kern6x16 computes a 6×16 tile (the first 16 columns of the panel at b)
// with AVX2 and FMA.
//
//go:noescape
func kern6x16(kc int, a, b, c *float32, ldc int, load bool)
