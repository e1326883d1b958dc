//go:build !amd64

package cpu

// hasAVX512 is false: other architectures run the plain Go micro-kernel.
const hasAVX512 = false

// The assembly micro-kernels exist on amd64 only; gemmKern stays kernGo.

func kern12x32(kc int, a, b, c *float32, ldc int, load bool) {
	panic("cpu: kern12x32 has no assembly on this architecture")
}

func kern6x16(kc int, a, b, c *float32, ldc int, load bool) {
	panic("cpu: kern6x16 has no assembly on this architecture")
}
