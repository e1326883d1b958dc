//go:build !amd64

package cpu

// useAVX2 is false: other architectures run the plain Go loop.
const useAVX2 = false

// axpyRows exists in assembly on amd64 only; useAVX2 keeps it unreached.
func axpyRows(y *float32, x *float32, ldx int, c *float32, rows int, n int) {
	panic("cpu: axpyRows has no assembly on this architecture")
}

// prefetchRows has no portable form; it does nothing here.
func prefetchRows(p *float32, stride, rows, n int) {}
