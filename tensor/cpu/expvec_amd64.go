package cpu

// The vector exponential kernels (expvec_amd64.s), for AVX2 with FMA. Each
// maps n float32s of src into dst (which may be src), n a positive multiple
// of 8, every lane by the same arithmetic.

// expAVX2 sets dst[i] = e^src[i].
//
//go:noescape
func expAVX2(dst, src *float32, n int)

// siluAVX2 sets dst[i] = src[i]/(1+e^−src[i]).
//
//go:noescape
func siluAVX2(dst, src *float32, n int)

// sigmoidAVX2 sets dst[i] = 1/(1+e^−src[i]).
//
//go:noescape
func sigmoidAVX2(dst, src *float32, n int)

// mulAddAVX2 adds w[i]·x[i] to y[i], the product rounded before the sum
// (no fused multiply-add: the bits of the plain Go loop).
//
//go:noescape
func mulAddAVX2(y, w, x *float32, n int)

// convSiLU4AVX2 sets y[i] = silu(((((0 + w0[i]·x0[i]) + w1[i]·x1[i]) +
// w2[i]·x2[i]) + w3[i]·x3[i])) for i < n (a multiple of 8), each product
// rounded before its sum and the SiLU siluAVX2's: the bits of clearing y,
// four mulAdd passes and siluVec, in one pass.
//
//go:noescape
func convSiLU4AVX2(y, x0, x1, x2, x3, w0, w1, w2, w3 *float32, n int)

// expShiftAVX2 sets dst[i] = e^(src[i]−shift).
//
//go:noescape
func expShiftAVX2(dst, src *float32, n int, shift float32)

// maxAVX2 returns the largest of x[:n] (VMAXPS: a NaN operand may be
// passed over).
//
//go:noescape
func maxAVX2(x *float32, n int) float32

// sumAVX2 returns the sum of x[:n]: eight running sums, lane i taking the
// values at i, i+8, …, then added pairwise.
//
//go:noescape
func sumAVX2(x *float32, n int) float32

// scaleAVX2 sets dst[i] = a·src[i].
//
//go:noescape
func scaleAVX2(dst, src *float32, n int, a float32)

// mulAVX2 sets dst[i] = x[i]·y[i].
//
//go:noescape
func mulAVX2(dst, x, y *float32, n int)

// sumSqAVX2 returns the sum of the squares of x[:n], each fused into one of
// four running sums of eight lanes (the i-th eight values into sum i mod
// 4), then the sums added pairwise.
//
//go:noescape
func sumSqAVX2(x *float32, n int) float32

// useAVX512 reports whether the AVX-512 forms below run (tests switch it).
var useAVX512 = hasAVX512 && useAVX2

// expShift512 is expShiftAVX2 with AVX-512 for any positive n: the same
// bits.
//
//go:noescape
func expShift512(dst, src *float32, n int, shift float32)

// softmax512 sets mx to m, or to the largest of m and x[:n] (n positive)
// where that exceeds m+slack, x[i] to e^(x[i]−mx) as expShift512 does, and
// sum to their sum: sixteen lane sums (lane i taking the values at i, i+16,
// …), then added pairwise.
//
//go:noescape
func softmax512(x *float32, n int, m, slack float32) (mx, sum float32)
