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
