package cpu

import (
	"fmt"

	"github.com/kevgo/kev/tensor"
)

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
	xt, wt, err := productOperands("MatMul", x, w)
	if err != nil {
		return nil, err
	}
	m, k, n := xt.shape[0], xt.shape[1], wt.shape[0]
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

// productOperands checks the operands of a product x·wᵀ for op: x an F32
// matrix [M, K], w a matrix [N, K] of any storage type.
func productOperands(op string, x, w tensor.Tensor) (xt, wt *Tensor, err error) {
	if xt, err = matrix(op, "x", x, -1, -1); err != nil {
		return nil, nil, err
	}
	if xt.dtype != tensor.F32 {
		return nil, nil, &tensor.ShapeError{Op: op, Arg: "x", Shape: xt.shape, Want: "an F32 matrix"}
	}
	if wt, err = matrix(op, "w", w, -1, xt.shape[1]); err != nil {
		return nil, nil, err
	}
	return xt, wt, nil
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

// MatMulSplit returns SplitCols(MatMul(x, w), widths...), bit for bit. With
// an F32 or F16 weight each block is its own product over the weight's
// panels that hold its columns, written straight into the block (a block
// that starts inside a panel goes through a buffer of its panels); a BF16
// weight's kernels put each panel's columns in the blocks that hold them. So
// the whole [M, N] product is never written and read back. The widening
// bf16 kernel takes MatMul then SplitCols.
func (b *Backend) MatMulSplit(x, w tensor.Tensor, widths ...int) ([]tensor.Tensor, error) {
	xt, wt, err := productOperands("MatMulSplit", x, w)
	if err != nil {
		return nil, err
	}
	m, k, n, sum := xt.shape[0], xt.shape[1], wt.shape[0], 0
	for i, v := range widths {
		if v < 0 {
			return nil, fmt.Errorf("cpu: MatMulSplit: widths[%d] = %d is negative", i, v)
		}
		sum += v
	}
	if sum != n {
		return nil, &tensor.ShapeError{Op: "MatMulSplit", Arg: "w", Shape: wt.shape, Want: tensor.Dims(sum, k)}
	}
	if wt.dtype == tensor.BF16 && m > 0 && k > 0 && b.panelledBF16() {
		out := colOut{offs: make([]int, len(widths)+1), dst: make([][]float32, len(widths))}
		outs := make([]tensor.Tensor, len(widths))
		for i, wd := range widths {
			t := newF32Full(m, wd)
			outs[i], out.dst[i], out.offs[i+1] = t, t.f32, out.offs[i]+wd
		}
		b.matmulPanelsBF16(xt.float32s(), wt, m, out)
		return outs, nil
	}
	if wt.dtype == tensor.BF16 || m == 0 || k == 0 {
		y, err := b.MatMul(x, w)
		if err != nil {
			return nil, err
		}
		defer b.Free(y)
		return b.SplitCols(y, widths...)
	}
	whole := gemmArgs{m: m, n: n, k: k, a: xt.float32s(), lda: k, b: b.weightSource(wt, n, k), kern: b.kernel()}
	if b.Threads > 1 { // A packed once for every block's product
		if whole.apk = b.packShared(&whole); whole.apk != nil {
			defer aPool.Put(&whole.apk)
		}
	}
	outs := make([]tensor.Tensor, len(widths))
	off := 0
	for i, wd := range widths {
		out := newF32Full(m, wd)
		outs[i] = out
		if wd > 0 {
			g := whole
			b.productCols(&g, off, wd, out.f32)
		}
		off += wd
	}
	return outs, nil
}

// productCols sets ys [m, w] to columns [off, off+w) of the product g (its
// c, ldc, n, q0 and cq set here).
func (b *Backend) productCols(g *gemmArgs, off, w int, ys []float32) {
	m := g.m
	q0, q1 := off/nr, (off+w+nr-1)/nr
	g.n, g.c, g.ldc, g.cq, g.q0 = off+w, ys, w, q0, q0
	if off%nr == 0 {
		b.runGEMM(g)
		return
	}
	width := (q1 - q0) * nr
	buf, _ := allocF32Dirty(m * width)
	defer recycle(buf)
	g.c, g.ldc = buf, width
	b.runGEMM(g)
	s := off % nr
	b.parallel(m, 64, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			copy(ys[r*w:(r+1)*w], buf[r*width+s:])
		}
	})
}
