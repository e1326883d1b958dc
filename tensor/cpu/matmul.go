package cpu

import "github.com/kevgo/kev/tensor"

// fastMatMul, when not nil, is the vectorised kernel chosen at start-up for
// this processor (see matmul_amd64.go); it has the contract of matmulGo.
var fastMatMul func(b *Backend, xs []float32, w *Tensor, m, n, k int, ys []float32)

// MatMul returns x·wᵀ for x [M, K] and w [N, K] of any storage type. With a
// BF16 weight it computes in bf16 (matmulBF16, bf16.go); F32 and F16 weights
// as follows.
//
// On amd64 processors with AVX2 and FMA the product runs in an assembly
// kernel (fused multiply-adds, eight lanes per row, K in blocks); elsewhere,
// or with the backend's generic flag set, in the plain Go kernel. Both split
// the work over the weight rows (each goroutine owns a band of output
// columns) and widen 16-bit weights to float32 exactly.
func (b *Backend) MatMul(x, w tensor.Tensor) (tensor.Tensor, error) {
	xt, err := matrix("MatMul", "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	if xt.dtype != tensor.F32 {
		return nil, &tensor.ShapeError{Op: "MatMul", Arg: "x", Shape: xt.shape, Want: "an F32 matrix"}
	}
	m, k := xt.shape[0], xt.shape[1]
	wt, err := matrix("MatMul", "w", w, -1, k)
	if err != nil {
		return nil, err
	}
	n := wt.shape[0]
	out := newF32(m, n)
	if m == 0 || n == 0 || k == 0 {
		return out, nil
	}
	if wt.dtype == tensor.BF16 { // bf16 compute (bf16.go)
		b.matmulBF16(xt.f32, wt, m, n, k, out.f32)
	} else if fastMatMul != nil && !b.generic {
		fastMatMul(b, xt.f32, wt, m, n, k, out.f32)
	} else {
		b.matmulGo(xt.f32, wt, m, n, k, out.f32)
	}
	return out, nil
}

// matmulGo sets ys [m, n] to xs [m, k] · wᵀ in plain Go.
//
// Inside a band, four weight rows at a time are widened to float32 and
// multiplied against four rows of x at a time with sixteen scalar
// accumulators; the sums run in index order over K.
func (b *Backend) matmulGo(xs []float32, wt *Tensor, m, n, k int, ys []float32) {
	work := func(lo, hi int) {
		var buf []float32
		if wt.dtype != tensor.F32 {
			buf = make([]float32, 4*k)
		}
		for j := lo; j < hi; j += 4 {
			nb := min(4, hi-j)
			var ws []float32
			if wt.dtype == tensor.F32 {
				ws = wt.f32[j*k : (j+nb)*k]
			} else {
				ws = buf[:nb*k]
				widen(ws, wt.bits[j*k:(j+nb)*k], wt.dtype)
			}
			if nb == 4 {
				w0, w1, w2, w3 := ws[0:k], ws[k:2*k], ws[2*k:3*k], ws[3*k:4*k]
				i := 0
				for ; i+4 <= m; i += 4 {
					kernel4x4(xs[i*k:(i+4)*k], k, w0, w1, w2, w3, ys[i*n+j:], n)
				}
				for ; i < m; i++ {
					kernel1x4(xs[i*k:(i+1)*k], w0, w1, w2, w3, ys[i*n+j:i*n+j+4])
				}
				continue
			}
			for jj := 0; jj < nb; jj++ {
				wr := ws[jj*k : (jj+1)*k]
				for i := 0; i < m; i++ {
					ys[i*n+j+jj] = dot(xs[i*k:(i+1)*k], wr)
				}
			}
		}
	}
	if m*n*k < 1<<16 {
		work(0, n)
	} else {
		b.parallel(n, 4, work)
	}
}

// kernel4x4 computes y[r*ldy+c] = x_r · w_c for four rows of x (stride k)
// and four weight rows.
func kernel4x4(x []float32, k int, w0, w1, w2, w3 []float32, y []float32, ldy int) {
	x0, x1, x2, x3 := x[0:k], x[k:2*k], x[2*k:3*k], x[3*k:4*k]
	w0, w1, w2, w3 = w0[:len(x0)], w1[:len(x0)], w2[:len(x0)], w3[:len(x0)]
	x1, x2, x3 = x1[:len(x0)], x2[:len(x0)], x3[:len(x0)]
	var c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33 float32
	for p, a0 := range x0 {
		a1, a2, a3 := x1[p], x2[p], x3[p]
		b0, b1, b2, b3 := w0[p], w1[p], w2[p], w3[p]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	y[0], y[1], y[2], y[3] = c00, c01, c02, c03
	y = y[ldy:]
	y[0], y[1], y[2], y[3] = c10, c11, c12, c13
	y = y[ldy:]
	y[0], y[1], y[2], y[3] = c20, c21, c22, c23
	y = y[ldy:]
	y[0], y[1], y[2], y[3] = c30, c31, c32, c33
}

// kernel1x4 computes y[c] = x · w_c for one row and four weight rows.
func kernel1x4(x, w0, w1, w2, w3, y []float32) {
	w0, w1, w2, w3 = w0[:len(x)], w1[:len(x)], w2[:len(x)], w3[:len(x)]
	var c0, c1, c2, c3 float32
	for p, a := range x {
		c0 += a * w0[p]
		c1 += a * w1[p]
		c2 += a * w2[p]
		c3 += a * w3[p]
	}
	y[0], y[1], y[2], y[3] = c0, c1, c2, c3
}

// dot returns a·b in index order.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}
