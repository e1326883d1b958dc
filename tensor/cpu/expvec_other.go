//go:build !amd64

package cpu

// The vector exponential kernels exist on amd64 only; useAVX2 keeps these
// unreached.

func expAVX2(dst, src *float32, n int) { panic("cpu: expAVX2 has no assembly on this architecture") }

func siluAVX2(dst, src *float32, n int) { panic("cpu: siluAVX2 has no assembly on this architecture") }

func sigmoidAVX2(dst, src *float32, n int) {
	panic("cpu: sigmoidAVX2 has no assembly on this architecture")
}

func mulAddAVX2(y, w, x *float32, n int) {
	panic("cpu: mulAddAVX2 has no assembly on this architecture")
}

func convSiLU4AVX2(y, x0, x1, x2, x3, w0, w1, w2, w3 *float32, n int) {
	panic("cpu: convSiLU4AVX2 has no assembly on this architecture")
}

func expShiftAVX2(dst, src *float32, n int, shift float32) {
	panic("cpu: expShiftAVX2 has no assembly on this architecture")
}

func maxAVX2(x *float32, n int) float32 { panic("cpu: maxAVX2 has no assembly on this architecture") }

func sumAVX2(x *float32, n int) float32 { panic("cpu: sumAVX2 has no assembly on this architecture") }

func scaleAVX2(dst, src *float32, n int, a float32) {
	panic("cpu: scaleAVX2 has no assembly on this architecture")
}

func mulAVX2(dst, x, y *float32, n int) { panic("cpu: mulAVX2 has no assembly on this architecture") }

func sumSqAVX2(x *float32, n int) float32 {
	panic("cpu: sumSqAVX2 has no assembly on this architecture")
}

// useAVX512 is false: no AVX-512 forms off amd64.
const useAVX512 = false

func expShift512(dst, src *float32, n int, shift float32) {
	panic("cpu: expShift512 has no assembly on this architecture")
}

func softmax512(x *float32, n int, m, slack float32) (mx, sum float32) {
	panic("cpu: softmax512 has no assembly on this architecture")
}
