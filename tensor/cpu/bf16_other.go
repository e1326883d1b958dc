//go:build !amd64

package cpu

// hasDPBF16 is false: no VDPBF16PS off amd64.
const hasDPBF16 = false

// bf16Runs reports whether this processor runs kernel k: only the widening
// kernel runs off amd64.
func bf16Runs(k bf16Kernel) bool { return k == bf16Widen }

// The assembly kernels exist on amd64 only; bf16Runs keeps these unreached.

func dpbf16x12(x *uint32, w *uint32, kh int, y *float32, ldy int) {
	panic("cpu: dpbf16x12 has no assembly on this architecture")
}

func dpbf16x4(x *uint32, w *uint32, kh int, y *float32, ldy int) {
	panic("cpu: dpbf16x4 has no assembly on this architecture")
}

func amxBF16x32(cfg *byte, a *uint32, lda int, w *uint32, kt int, c *float32) {
	panic("cpu: amxBF16x32 has no assembly on this architecture")
}

func roundBF16Pairs(dst *uint32, src *float32, n int) {
	panic("cpu: roundBF16Pairs has no assembly on this architecture")
}
