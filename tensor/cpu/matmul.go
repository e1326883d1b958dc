package cpu

import "github.com/kevgo/kev/tensor"

// MatMul returns x·wᵀ for x [M, K] and w [N, K] of any storage type. With a
// BF16 weight it computes in bf16 (matmulBF16, bf16.go): x rounded to bf16,
// products summed in float32. F32 and F16 weights as follows.
//
// The product runs in the packed GEMM (gemm.go) with the processor's
// micro-kernel (AVX-512 or AVX2 assembly on amd64, plain Go elsewhere or
// with the backend's generic flag set), on the backend's threads. Every
// output is one chain of fused multiply-adds over K in order, so a row gets
// the same bits alone or in any batch. An uploaded F32 weight is packed on
// first use and kept packed; 16-bit weights are widened exactly, block by
// block, on each call.
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
	if m == 0 || n == 0 || k == 0 {
		return newF32(m, n), nil
	}
	out := newF32Full(m, n)
	xs := xt.float32s()
	switch wt.dtype {
	case tensor.F32:
		b.matmulF32(xs, wt, m, n, k, out.f32)
	case tensor.BF16:
		b.matmulBF16(xs, wt, m, n, k, out.f32)
	default:
		b.matmul16(xs, wt, m, n, k, out.f32)
	}
	return out, nil
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
