//go:build !amd64

package cpu

// hasAVX512 is false: other architectures run the plain Go micro-kernel.
const hasAVX512 = false

// tileAsm is never reached: gemmKern stays kernGo off amd64.
func tileAsm(k gemmKernel, rows, kc int, a, b, c []float32, ldc int, load, ahead bool) {
	panic("cpu: no assembly micro-kernels on this architecture")
}

// tileAsmS is never reached either.
func tileAsmS(k gemmKernel, rows, kc int, a []float32, rs, cs int, b []float32, ldb int, c []float32, ldc int, load bool) {
	panic("cpu: no assembly micro-kernels on this architecture")
}

func widenBF16T8(dst *float32, src *uint16, lds int, blocks int) {
	panic("cpu: no assembly widening on this architecture")
}

func transpose8(dst *float32, ldd int, src *float32, lds int, blocks int) {
	panic("cpu: no assembly transpose on this architecture")
}
