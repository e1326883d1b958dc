package cpu

import "math"

// Elementwise exponentials over slices. With the assembly kernels every
// element gets the same arithmetic wherever it sits (the last len mod 8
// run through the kernel on a padded copy), about 2 ulp of float32 from the
// exact value, 0 below −87 and +Inf above 88; without them, the float64
// exponential rounded.

// mapVec sets dst[:len(src)] to f(src) with kernel or, without the
// assembly kernels, scalar.
func mapVec(dst, src []float32, kernel func(dst, src *float32, n int), scalar func(float32) float32) {
	n := len(src)
	dst = dst[:n]
	if !useAVX2 {
		for i, x := range src {
			dst[i] = scalar(x)
		}
		return
	}
	n8 := n &^ 7
	if n8 > 0 {
		kernel(&dst[0], &src[0], n8)
	}
	if n8 < n {
		var buf [8]float32
		copy(buf[:], src[n8:])
		kernel(&buf[0], &buf[0], 8)
		copy(dst[n8:], buf[:n-n8])
	}
}

// expVec sets dst[i] = e^src[i].
func expVec(dst, src []float32) {
	mapVec(dst, src, expAVX2, func(x float32) float32 { return float32(math.Exp(float64(x))) })
}

// siluVec sets dst[i] = silu(src[i]).
func siluVec(dst, src []float32) { mapVec(dst, src, siluAVX2, silu) }

// sigmoidVec sets dst[i] = sigmoid(src[i]).
func sigmoidVec(dst, src []float32) { mapVec(dst, src, sigmoidAVX2, sigmoid) }

// mulAdd adds w[i]·x[i] to y[i], the product rounded before the sum.
func mulAdd(y, w, x []float32) {
	n := len(y)
	w, x = w[:n], x[:n]
	n8 := 0
	if useAVX2 {
		if n8 = n &^ 7; n8 > 0 {
			mulAddAVX2(&y[0], &w[0], &x[0], n8)
		}
	}
	for i := n8; i < n; i++ {
		p := w[i] * x[i]
		y[i] += p
	}
}

// expShift sets dst[i] = e^(src[i]−shift), each element by the same
// arithmetic wherever it sits.
func expShift(dst, src []float32, shift float32) {
	n := len(src)
	dst = dst[:n]
	if !useAVX2 {
		for i, x := range src {
			dst[i] = float32(math.Exp(float64(x - shift)))
		}
		return
	}
	if useAVX512 {
		if n > 0 {
			expShift512(&dst[0], &src[0], n, shift)
		}
		return
	}
	n8 := n &^ 7
	if n8 > 0 {
		expShiftAVX2(&dst[0], &src[0], n8, shift)
	}
	if n8 < n {
		var buf [8]float32
		copy(buf[:], src[n8:])
		expShiftAVX2(&buf[0], &buf[0], 8, shift)
		copy(dst[n8:], buf[:n-n8])
	}
}

// softmaxShift sets each x[i] to e^(x[i]−mx) as expShift does and returns
// mx and the sum of the new x, in an order fixed by len(x) alone. mx is m
// unless some x[i] exceeds m+slack, then the largest x[i]: with slack ≥ 0
// a weight is at most e^slack. x must not be empty.
func softmaxShift(x []float32, m, slack float32) (mx, sum float32) {
	if useAVX512 {
		return softmax512(&x[0], len(x), m, slack)
	}
	mx = m
	if v := maxVec(x); v > m+slack {
		mx = v
	}
	expShift(x, x, mx)
	return mx, sumVec(x)
}

// maxVec returns the largest of x, or −Inf when x is empty.
func maxVec(x []float32) float32 {
	m := float32(math.Inf(-1))
	n8 := 0
	if useAVX2 {
		if n8 = len(x) &^ 7; n8 > 0 {
			m = maxAVX2(&x[0], n8)
		}
	}
	for _, v := range x[n8:] {
		if v > m {
			m = v
		}
	}
	return m
}

// sumVec returns the sum of x in an order fixed by the length alone: with
// the assembly kernels eight lane sums over the first len−len mod 8
// values, then the rest in order.
func sumVec(x []float32) float32 {
	var s float32
	n8 := 0
	if useAVX2 {
		if n8 = len(x) &^ 7; n8 > 0 {
			s = sumAVX2(&x[0], n8)
		}
	}
	for _, v := range x[n8:] {
		s += v
	}
	return s
}

// scaleVec sets dst[i] = a·src[i] (dst may be src).
func scaleVec(dst, src []float32, a float32) {
	n := len(src)
	dst = dst[:n]
	n8 := 0
	if useAVX2 {
		if n8 = n &^ 7; n8 > 0 {
			scaleAVX2(&dst[0], &src[0], n8, a)
		}
	}
	for i := n8; i < n; i++ {
		dst[i] = a * src[i]
	}
}

// mulVec sets dst[i] = x[i]·y[i] (dst may be x or y).
func mulVec(dst, x, y []float32) {
	n := len(x)
	dst, y = dst[:n], y[:n]
	n8 := 0
	if useAVX2 {
		if n8 = n &^ 7; n8 > 0 {
			mulAVX2(&dst[0], &x[0], &y[0], n8)
		}
	}
	for i := n8; i < n; i++ {
		dst[i] = x[i] * y[i]
	}
}

// sumSq returns the sum of the squares of x, in an order fixed by len(x)
// alone.
func sumSq(x []float32) float32 {
	var s float32
	n8 := 0
	if useAVX2 {
		if n8 = len(x) &^ 7; n8 > 0 {
			s = sumSqAVX2(&x[0], n8)
		}
	}
	for _, v := range x[n8:] {
		s += v * v
	}
	return s
}
