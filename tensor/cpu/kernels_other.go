//go:build !amd64

package cpu

// useAVX2 is false: other architectures run the plain Go kernels.
const useAVX2 = false

// The assembly kernels exist on amd64 only; useAVX2 keeps these unreached.

func dot3x4(x *float32, ldx int, w *float32, ldw int, k int, y *float32, ldy int) {
	panic("cpu: dot3x4 has no assembly on this architecture")
}

func dot1x4(x *float32, w *float32, ldw int, k int, y *float32) {
	panic("cpu: dot1x4 has no assembly on this architecture")
}

func axpyRows(y *float32, x *float32, ldx int, c *float32, rows int, n int) {
	panic("cpu: axpyRows has no assembly on this architecture")
}
