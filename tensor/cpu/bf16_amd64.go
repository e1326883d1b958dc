package cpu

import "golang.org/x/sys/cpu"

// hasDPBF16 reports whether the processor runs VDPBF16PS (AVX512_BF16; x/sys
// reports it only where the OS saves the AVX-512 state).
var hasDPBF16 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16

// bf16Runs reports whether this processor runs kernel k.
func bf16Runs(k bf16Kernel) bool {
	switch k {
	case bf16AVX512:
		return hasDPBF16
	case bf16AMX:
		return hasAMX
	}
	return true
}

// The VDPBF16PS kernels (bf16_amd64.s). x holds kh groups of 12 (or 4)
// 32-bit bf16 pairs, one a row; w kh groups of 32 pairs, one a column; kh >
// 0. They set y[r*ldy + c] for the block's rows r and c < 32.

// dpbf16x12 computes a 12×32 block.
//
//go:noescape
func dpbf16x12(x *uint32, w *uint32, kh int, y *float32, ldy int)

// dpbf16x4 computes a 4×32 block with the arithmetic of dpbf16x12.
//
//go:noescape
func dpbf16x4(x *uint32, w *uint32, kh int, y *float32, ldy int)

// roundBF16Pairs sets dst[i] for i < n/2 to the bf16 pair of src[2i] and
// src[2i+1] (bf16Pair's layout; a subnormal input counts as zero); n is a
// positive multiple of 32. It needs AVX512_BF16.
//
//go:noescape
func roundBF16Pairs(dst *uint32, src *float32, n int)
