//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/tensor"
)

// Embedding gathers table rows; the result keeps a BF16 table's type and is F32 otherwise.
func (b *Backend) Embedding(table tensor.Tensor, ids []int32) (tensor.Tensor, error) {
	const op = "Embedding"
	tt, err := b.matrix(op, "table", table, -1, -1)
	if err != nil {
		return nil, err
	}
	v, d := tt.shape[0], tt.shape[1]
	for t, id := range ids {
		if id < 0 || int(id) >= v {
			return nil, fmt.Errorf("cuda: %s: ids[%d] = %d is outside the table's %d rows", op, t, id, v)
		}
	}
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(tt.dtype), len(ids), d); err != nil || len(ids) == 0 || d == 0 {
			return err
		}
		idb, err := s.ints(ids)
		if err != nil {
			return err
		}
		if tt.dtype == tensor.BF16 && d%8 == 0 {
			return s.q.Embedding(y.buf, tt.buf, idb, len(ids), v, d)
		}
		return s.q.EmbedAny(y.Operand(), tt.Operand(), idb, len(ids), v, d)
	})
	return result(y, err)
}

// result returns t as a tensor.Tensor, or nil with err.
func result(t *Tensor, err error) (tensor.Tensor, error) {
	if err != nil || t == nil {
		return nil, err
	}
	return t, nil
}

// orNil converts a possibly nil *Tensor to a tensor.Tensor that is nil when it is.
func orNil(t *Tensor) tensor.Tensor {
	if t == nil {
		return nil
	}
	return t
}

// MatMul returns x·wᵀ: on the tensor cores for BF16 x and w with N and K multiples of 8, on the CUDA cores
// otherwise (fp32 accumulation either way).
func (b *Backend) MatMul(x, w tensor.Tensor) (tensor.Tensor, error) {
	xt, wt, err := b.matmulOperands("MatMul", x, w)
	if err != nil {
		return nil, err
	}
	if wt.dtype == tensor.F8E4M3 {
		return b.matmulFP8(xt, wt, false)
	}
	m, k, n := xt.shape[0], xt.shape[1], wt.shape[0]
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), m, n); err != nil || m == 0 || n == 0 {
			return err
		}
		if k == 0 {
			return s.q.Memset16(y.buf, 0, int64(m*n)*elemSize(y.dtype)/2)
		}
		if xt.dtype == tensor.BF16 && wt.dtype == tensor.BF16 && k%8 == 0 && n%8 == 0 {
			return s.q.GEMM(GEMM{Y: y.buf, X: xt.buf, W: wt.buf, M: m, N: n, K: k, WLoaded: wt.loaded})
		}
		return s.q.MatMulAny(y.Operand(), xt.Operand(), wt.Operand(), m, n, k)
	})
	return result(y, err)
}

// SplitCols returns column blocks of x as views of x's memory (see Tensor); x may be freed before them.
func (b *Backend) SplitCols(x tensor.Tensor, widths ...int) ([]tensor.Tensor, error) {
	const op = "SplitCols"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	sum := 0
	for i, w := range widths {
		if w < 0 {
			return nil, fmt.Errorf("cuda: %s: widths[%d] = %d is negative", op, i, w)
		}
		sum += w
	}
	m, n := xt.shape[0], xt.shape[1]
	if sum != n {
		return nil, &tensor.ShapeError{Op: op, Arg: "x", Shape: xt.shape, Want: tensor.Dims(-1, sum)}
	}
	outs := make([]tensor.Tensor, len(widths))
	if m > 0 && n > 0 {
		// views: no copy; the consumers read the columns in place (see Tensor)
		b.mu.Lock()
		defer b.mu.Unlock()
		if xt.freed {
			return nil, fmt.Errorf("cuda: %s: x: %w", op, ErrFreed)
		}
		// (xt is dense: matrix copied a view passed as x)
		es, off := elemSize(xt.dtype), 0
		for i, w := range widths {
			at := int64(off) * es
			outs[i] = &Tensor{shape: []int{m, w}, dtype: xt.dtype, b: b, base: xt, off: off, ld: n,
				buf: Buffer{Ptr: xt.buf.Ptr + cu.DevicePtr(at), Bytes: xt.buf.Bytes - at}}
			xt.refs++
			off += w
		}
		return outs, nil
	}
	err = b.run(func(s *scope) error {
		if done, err := s.splitCols16(xt, widths, outs); done || err != nil {
			return err
		}
		off := 0
		for i, w := range widths {
			o, err := s.out(xt.dtype, m, w)
			if err != nil {
				return err
			}
			outs[i] = o
			if m > 0 && w > 0 {
				if err := s.q.CopyCols(o.Operand(), xt.Operand(), m, n, off, w); err != nil {
					return err
				}
			}
			off += w
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return outs, nil
}

// splitCols16 runs SplitCols through Queue.splitCols16 when every row, offset and width is whole 16-byte pieces;
// it reports whether it did.
func (s *scope) splitCols16(xt *Tensor, widths []int, outs []tensor.Tensor) (bool, error) {
	m, n := xt.shape[0], xt.shape[1]
	es := int(elemSize(xt.dtype))
	if m == 0 || (es*n)%16 != 0 || xt.buf.Ptr%16 != 0 {
		return false, nil
	}
	for _, w := range widths {
		if (es*w)%16 != 0 {
			return false, nil
		}
	}
	parts := make([]splitPart, len(widths))
	off := 0
	for i, w := range widths {
		o, err := s.out(xt.dtype, m, w)
		if err != nil {
			return true, err
		}
		outs[i] = o
		parts[i] = splitPart{o.buf.Ptr, es * off / 16, es * w / 16}
		off += w
	}
	return true, s.q.splitCols16(xt.buf.Ptr, m, es*n/16, parts)
}

// RMSNorm normalises the rows of x. On a backend with FP8 weights a BF16 result also gets its FP8 codes, which FP8
// products read as their x (fp8_fuse.go).
func (b *Backend) RMSNorm(x, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, error) {
	const op = "RMSNorm"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	m, n := xt.shape[0], xt.shape[1]
	gt, err := b.vector(op, "gain", gain, n)
	if err != nil {
		return nil, err
	}
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), m, n); err != nil || m == 0 || n == 0 {
			return err
		}
		if xt.dtype == tensor.BF16 && gt.dtype == tensor.F32 && n%8 == 0 {
			return s.rmsnormFP8(y, Buffer{}, xt.buf, Buffer{}, gt.buf, m, n, eps, plusOne)
		}
		return s.q.RMSNormAny(y.Operand(), Operand{}, xt.Operand(), Operand{}, gt.Operand(), m, n, eps, plusOne)
	})
	return result(y, err)
}

// AddRMSNorm returns x + residual (BF16 when both are, rounded before it is normalised) and its RMSNorm. On a
// backend with FP8 weights a BF16 RMSNorm also gets its FP8 codes, which FP8 products read as their x
// (fp8_fuse.go).
func (b *Backend) AddRMSNorm(x, residual, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, tensor.Tensor, error) {
	const op = "AddRMSNorm"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	m, n := xt.shape[0], xt.shape[1]
	rt, err := b.matrix(op, "residual", residual, m, n)
	if err != nil {
		return nil, nil, err
	}
	gt, err := b.vector(op, "gain", gain, n)
	if err != nil {
		return nil, nil, err
	}
	dt := tensor.F32
	if xt.dtype == tensor.BF16 && rt.dtype == tensor.BF16 {
		dt = tensor.BF16
	}
	var sum, y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if sum, err = s.out(dt, m, n); err != nil {
			return err
		}
		if y, err = s.out(dt, m, n); err != nil || m == 0 || n == 0 {
			return err
		}
		if dt == tensor.BF16 && gt.dtype == tensor.F32 && n%8 == 0 {
			return s.rmsnormFP8(y, sum.buf, xt.buf, rt.buf, gt.buf, m, n, eps, plusOne)
		}
		return s.q.RMSNormAny(y.Operand(), sum.Operand(), xt.Operand(), rt.Operand(), gt.Operand(), m, n, eps, plusOne)
	})
	if err != nil {
		return nil, nil, err
	}
	return sum, y, nil
}

// MatMulAddRMSNorm returns sum = MatMul(x, w) + residual and RMSNorm(sum, gain, eps, plusOne). When the GEMM's plan
// is split-K finished by a reduce (short passes on Hopper), one kernel adds the split partial sums, the residual and
// normalises (Queue.GEMMAddRMSNorm): the bits of MatMul then AddRMSNorm, one launch and one [M, N] store fewer.
// Otherwise the two operations (with an F8E4M3 w always: AddRMSNorm then attaches the FP8 codes of the RMSNorm).
func (b *Backend) MatMulAddRMSNorm(x, w, residual, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, tensor.Tensor, error) {
	const op = "MatMulAddRMSNorm"
	xt, wt, err := b.matmulOperands(op, x, w)
	if err != nil {
		return nil, nil, err
	}
	m, k, n := xt.shape[0], xt.shape[1], wt.shape[0]
	rt, err := b.matrix(op, "residual", residual, m, n)
	if err != nil {
		return nil, nil, err
	}
	gt, err := b.vector(op, "gain", gain, n)
	if err != nil {
		return nil, nil, err
	}
	var sum, y *Tensor
	fused := false
	err = b.run(func(s *scope) error {
		if m == 0 || k == 0 || xt.dtype != tensor.BF16 || wt.dtype != tensor.BF16 || rt.dtype != tensor.BF16 ||
			gt.dtype != tensor.F32 || !s.q.d.AddRMSNormFused(m, n, k) {
			return nil
		}
		fused = true
		var err error
		if sum, err = s.out(tensor.BF16, m, n); err != nil {
			return err
		}
		if y, err = s.out(tensor.BF16, m, n); err != nil {
			return err
		}
		return s.q.GEMMAddRMSNorm(GEMM{X: xt.buf, W: wt.buf, M: m, N: n, K: k, WLoaded: wt.loaded}, y.buf, sum.buf, rt.buf, gt.buf, eps, plusOne)
	})
	if err != nil {
		return nil, nil, err
	}
	if !fused {
		f, err := b.MatMul(x, w)
		if err != nil {
			return nil, nil, err
		}
		defer b.Free(f)
		return b.AddRMSNorm(f, residual, gain, eps, plusOne)
	}
	return sum, y, nil
}

// matmulOperands checks x [M, K] and w [N, K] for the operation op.
func (b *Backend) matmulOperands(op string, x, w tensor.Tensor) (xt, wt *Tensor, err error) {
	if xt, err = b.matrix(op, "x", x, -1, -1); err != nil {
		return nil, nil, err
	}
	if wt, err = b.matrix(op, "w", w, -1, xt.shape[1]); err != nil {
		return nil, nil, err
	}
	if xt.dtype == tensor.F8E4M3 {
		return nil, nil, &tensor.DTypeError{Backend: Name, DType: xt.dtype, Reason: op + ": an F8E4M3 tensor is a weight, not an x"}
	}
	return xt, wt, nil
}

// MatMulSplit returns SplitCols(MatMul(x, w), widths...): the two operations.
func (b *Backend) MatMulSplit(x, w tensor.Tensor, widths ...int) ([]tensor.Tensor, error) {
	y, err := b.MatMul(x, w)
	if err != nil {
		return nil, err
	}
	defer b.Free(y)
	return b.SplitCols(y, widths...)
}

// MatMulSwiGLU returns SwiGLU(MatMul(x, w)): on Hopper, for bf16 operands whose GEMM plan is a one-split tile
// plan, and for a bf16 x with an F8E4M3 w whose rows are a multiple of 16, one kernel whose epilogue applies SwiGLU
// to the gate and up sums of the same columns (the bits of the two operations apart, without writing [g | u]);
// otherwise the two operations.
func (b *Backend) MatMulSwiGLU(x, w tensor.Tensor) (tensor.Tensor, error) {
	const op = "MatMulSwiGLU"
	xt, wt, err := b.matmulOperands(op, x, w)
	if err != nil {
		return nil, err
	}
	m, k, n2 := xt.shape[0], xt.shape[1], wt.shape[0]
	if n2%2 != 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "w", Shape: wt.shape, Want: "[2I, K]"}
	}
	if wt.dtype == tensor.F8E4M3 && xt.dtype == tensor.BF16 && n2%16 == 0 && m > 0 && k > 0 {
		return b.matmulFP8(xt, wt, true)
	}
	var y *Tensor
	fused := false
	err = b.run(func(s *scope) error {
		if m == 0 || k == 0 || xt.dtype != tensor.BF16 || wt.dtype != tensor.BF16 || !s.q.d.SwiGLUFused(m, n2, k) {
			return nil
		}
		fused = true
		var err error
		if y, err = s.out(tensor.BF16, m, n2/2); err != nil {
			return err
		}
		return s.q.GEMM(GEMM{Y: y.buf, X: xt.buf, W: wt.buf, M: m, N: n2, K: k, SwiGLU: true, WLoaded: wt.loaded})
	})
	if !fused || err != nil {
		if err != nil {
			return nil, err
		}
		gu, err := b.MatMul(x, w)
		if err != nil {
			return nil, err
		}
		defer b.Free(gu)
		return b.SwiGLU(gu)
	}
	return result(y, err)
}

// SwiGLU returns silu(g)·u for x = [g | u].
func (b *Backend) SwiGLU(x tensor.Tensor) (tensor.Tensor, error) {
	const op = "SwiGLU"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	m, n2 := xt.shape[0], xt.shape[1]
	if n2%2 != 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "x", Shape: xt.shape, Want: "[M, 2I]"}
	}
	n := n2 / 2
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), m, n); err != nil || m == 0 || n == 0 {
			return err
		}
		if xt.dtype == tensor.BF16 && n%8 == 0 {
			return s.q.SwiGLU(y.buf, xt.buf, m, n)
		}
		return s.q.SwiGLUAny(y.Operand(), xt.Operand(), m, n)
	})
	return result(y, err)
}

// SigmoidGate returns x·sigmoid(gate). On a backend with FP8 weights a BF16 result up to 4,096 wide can also get
// its FP8 codes, which FP8 products read as their x (fp8_fuse.go).
func (b *Backend) SigmoidGate(x, gate tensor.Tensor) (tensor.Tensor, error) {
	const op = "SigmoidGate"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	gt, err := b.matrix(op, "gate", gate, xt.shape[0], xt.shape[1])
	if err != nil {
		return nil, err
	}
	n := int64(tensor.Numel(xt.shape))
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), xt.shape[0], xt.shape[1]); err != nil || n == 0 {
			return err
		}
		if xt.dtype == tensor.BF16 && gt.dtype == tensor.BF16 && n%8 == 0 {
			return s.sigmoidGateFP8(y, xt.buf, gt.buf, xt.shape[0], xt.shape[1])
		}
		return s.q.SigmoidGateAny(y.Operand(), xt.Operand(), gt.Operand(), n)
	})
	return result(y, err)
}

// AddBias adds bias [n] to every row of x [M, n].
func (b *Backend) AddBias(x, bias tensor.Tensor) (tensor.Tensor, error) {
	const op = "AddBias"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	bt, err := b.vector(op, "bias", bias, xt.shape[1])
	if err != nil {
		return nil, err
	}
	n := int64(tensor.Numel(xt.shape))
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), xt.shape[0], xt.shape[1]); err != nil || n == 0 {
			return err
		}
		return s.q.AddBiasAny(y.Operand(), xt.Operand(), bt.Operand(), n, xt.shape[1])
	})
	return result(y, err)
}

// QKNormRope normalises and rotates query and key heads.
func (b *Backend) QKNormRope(q, k, qGain, kGain tensor.Tensor, positions []int32, c tensor.RopeConfig) (tensor.Tensor, tensor.Tensor, tensor.Tensor, error) {
	const op = "QKNormRope"
	if c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.RotaryDim < 0 || c.RotaryDim > c.HeadDim || c.RotaryDim%2 != 0 {
		return nil, nil, nil, fmt.Errorf("cuda: %s: bad config %+v", op, c)
	}
	n, d := len(positions), c.HeadDim
	qw := c.Heads * d
	if c.Gated {
		qw *= 2
	}
	qt, ldq, err := b.strided(op, "q", q, n, qw)
	if err != nil {
		return nil, nil, nil, err
	}
	kt, ldk, err := b.strided(op, "k", k, n, c.KVHeads*d)
	if err != nil {
		return nil, nil, nil, err
	}
	if c.Norm > tensor.QKNormNone {
		return nil, nil, nil, fmt.Errorf("cuda: %s: bad norm %d", op, c.Norm)
	}
	var qGainOp, kGainOp Operand
	if c.Norm != tensor.QKNormNone {
		qg, err := b.vector(op, "qGain", qGain, d)
		if err != nil {
			return nil, nil, nil, err
		}
		kg, err := b.vector(op, "kGain", kGain, d)
		if err != nil {
			return nil, nil, nil, err
		}
		qGainOp, kGainOp = qg.Operand(), kg.Operand()
	}
	var qo, ko, gate *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if qo, err = s.out(act(qt.dtype), n, c.Heads*d); err != nil {
			return err
		}
		if ko, err = s.out(act(kt.dtype), n, c.KVHeads*d); err != nil {
			return err
		}
		if c.Gated {
			if gate, err = s.out(act(qt.dtype), n, c.Heads*d); err != nil {
				return err
			}
		}
		if n == 0 {
			return nil
		}
		pos, err := s.ints(positions)
		if err != nil {
			return err
		}
		a := QKNormRope{QOut: qo.Operand(), KOut: ko.Operand(), Q: qt.Operand(), K: kt.Operand(), QGain: qGainOp,
			KGain: kGainOp, Positions: pos, T: n, H: c.Heads, KV: c.KVHeads, D: d, R: c.RotaryDim, Theta: c.Theta,
			Eps: c.Eps, Gated: c.Gated, Norm: c.Norm, LdQ: ldq, LdK: ldk}
		if gate != nil {
			a.Gate = gate.Operand()
		}
		return s.q.QKNormRope(a)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return qo, ko, orNil(gate), nil
}

// Attention is causal grouped-query attention over a prefix and segments (head dimension at most 256).
func (b *Backend) Attention(q, k, v, kPrefix, vPrefix tensor.Tensor, lens []int, c tensor.AttentionConfig) (tensor.Tensor, error) {
	const op = "Attention"
	if c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Heads%c.KVHeads != 0 || c.HeadDim > MaxAttentionHeadDim {
		return nil, fmt.Errorf("cuda: %s: bad config %+v (head dimension at most %d)", op, c, MaxAttentionHeadDim)
	}
	d, kvw := c.HeadDim, c.KVHeads*c.HeadDim
	qt, err := b.matrix(op, "q", q, -1, c.Heads*d)
	if err != nil {
		return nil, err
	}
	n := qt.shape[0]
	kt, err := b.matrix(op, "k", k, n, kvw)
	if err != nil {
		return nil, err
	}
	vt, err := b.matrix(op, "v", v, n, kvw)
	if err != nil {
		return nil, err
	}
	var kp, vp *Tensor
	p := 0
	if kPrefix != nil || vPrefix != nil {
		if kp, err = b.matrix(op, "kPrefix", kPrefix, -1, kvw); err != nil {
			return nil, err
		}
		p = kp.shape[0]
		if vp, err = b.matrix(op, "vPrefix", vPrefix, p, kvw); err != nil {
			return nil, err
		}
	}
	starts, ls, err := segments(op, lens, n)
	if err != nil {
		return nil, err
	}
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(qt.dtype), n, c.Heads*d); err != nil || n == 0 {
			return err
		}
		seg, err := s.ints(rowStarts(starts, ls, n))
		if err != nil {
			return err
		}
		a := Attention{O: y.Operand(), Q: qt.Operand(), K: kt.Operand(), V: vt.Operand(), SegStart: seg, N: n, P: p,
			H: c.Heads, KV: c.KVHeads, D: d, Scale: c.Scale}
		if p > 0 {
			a.KP, a.VP = kp.Operand(), vp.Operand()
		}
		return s.q.Attention(a)
	})
	return result(y, err)
}

// CausalConv1dSiLU is the depthwise causal convolution with SiLU; the new state keeps x's type.
func (b *Backend) CausalConv1dSiLU(x, w, state tensor.Tensor, lens []int) (tensor.Tensor, tensor.Tensor, error) {
	const op = "CausalConv1dSiLU"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	n, ch := xt.shape[0], xt.shape[1]
	wt, err := b.matrix(op, "w", w, ch, -1)
	if err != nil {
		return nil, nil, err
	}
	kw := wt.shape[1]
	if kw < 1 {
		return nil, nil, &tensor.ShapeError{Op: op, Arg: "w", Shape: wt.shape, Want: tensor.Dims(ch, -1) + " with K ≥ 1"}
	}
	var st *Tensor
	if state != nil {
		if st, err = b.matrix(op, "state", state, kw-1, ch); err != nil {
			return nil, nil, err
		}
	}
	starts, ls, err := segments(op, lens, n)
	if err != nil {
		return nil, nil, err
	}
	var y, ns *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), n, ch); err != nil {
			return err
		}
		var so Operand
		if st != nil && kw > 1 && ch > 0 {
			so = st.Operand()
		}
		if n > 0 && ch > 0 {
			seg, err := s.ints(rowStarts(starts, ls, n))
			if err != nil {
				return err
			}
			if err := s.q.Conv1dSiLU(y.Operand(), xt.Operand(), wt.Operand(), so, seg, n, ch, kw); err != nil {
				return err
			}
		}
		if len(starts) != 1 {
			return nil
		}
		if ns, err = s.out(xt.dtype, kw-1, ch); err != nil || kw == 1 || ch == 0 {
			return err
		}
		xo := xt.Operand()
		if n == 0 {
			xo = Operand{}
		}
		return s.q.ConvState(ns.Operand(), xo, so, n, ch, kw)
	})
	if err != nil {
		return nil, nil, err
	}
	return y, orNil(ns), nil
}

// DeltaGates computes beta and the log decay g, both F32.
func (b *Backend) DeltaGates(bl, a, aLog, dtBias tensor.Tensor) (tensor.Tensor, tensor.Tensor, error) {
	const op = "DeltaGates"
	bt, ldb, err := b.strided(op, "b", bl, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	n, h := bt.shape[0], bt.shape[1]
	at, lda, err := b.strided(op, "a", a, n, h)
	if err != nil {
		return nil, nil, err
	}
	lt, err := b.vector(op, "aLog", aLog, h)
	if err != nil {
		return nil, nil, err
	}
	dt, err := b.vector(op, "dtBias", dtBias, h)
	if err != nil {
		return nil, nil, err
	}
	var beta, g *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if beta, err = s.out(tensor.F32, n, h); err != nil {
			return err
		}
		if g, err = s.out(tensor.F32, n, h); err != nil || n == 0 || h == 0 {
			return err
		}
		return s.q.DeltaGates(beta.buf, g.buf, bt.Operand(), at.Operand(), lt.Operand(), dt.Operand(), n, h, ldb, lda)
	})
	if err != nil {
		return nil, nil, err
	}
	return beta, g, nil
}

// GatedDeltaRule runs the gated delta rule with an fp32 state. Every Chunk setting computes the same function;
// this backend runs the recurrent form, or at d_k = 128 with bf16 rows the chunked form on tensor cores (gdn.go).
func (b *Backend) GatedDeltaRule(qkv, g, beta, state tensor.Tensor, lens []int, c tensor.DeltaConfig) (tensor.Tensor, tensor.Tensor, error) {
	const op = "GatedDeltaRule"
	if c.KeyHeads <= 0 || c.ValueHeads <= 0 || c.KeyDim <= 0 || c.ValueDim <= 0 || c.ValueHeads%c.KeyHeads != 0 || c.Chunk < 0 {
		return nil, nil, fmt.Errorf("cuda: %s: bad config %+v", op, c)
	}
	hk, hv, dk, dv := c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim
	width := 2*hk*dk + hv*dv
	xt, err := b.matrix(op, "qkv", qkv, -1, width)
	if err != nil {
		return nil, nil, err
	}
	n := xt.shape[0]
	gt, err := b.matrix(op, "g", g, n, hv)
	if err != nil {
		return nil, nil, err
	}
	bt, err := b.matrix(op, "beta", beta, n, hv)
	if err != nil {
		return nil, nil, err
	}
	var st *Tensor
	if state != nil {
		if st, err = b.get(op, "state", state); err != nil {
			return nil, nil, err
		}
		if len(st.shape) != 3 || st.shape[0] != hv || st.shape[1] != dk || st.shape[2] != dv {
			return nil, nil, &tensor.ShapeError{Op: op, Arg: "state", Shape: st.shape, Want: tensor.Dims(hv, dk, dv)}
		}
	}
	starts, ls, err := segments(op, lens, n)
	if err != nil {
		return nil, nil, err
	}
	var o, final *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if o, err = s.out(act(xt.dtype), n, hv*dv); err != nil {
			return err
		}
		a := DeltaRule{O: o.Operand(), QKV: xt.Operand(), G: gt.Operand(), Beta: bt.Operand(), Segs: len(starts), N: n,
			HK: hk, HV: hv, DK: dk, DV: dv}
		if len(starts) == 1 {
			if final, err = s.out(tensor.F32, hv, dk, dv); err != nil {
				return err
			}
			a.Final = final.buf
		}
		if len(starts) == 0 {
			return nil
		}
		if st != nil {
			a.S0 = st.Operand()
		}
		if starts, ls, err = s.deltaLong(a, starts, ls, width); err != nil || len(starts) == 0 {
			return err
		}
		a.Segs = len(starts)
		if a.SegStart, err = s.ints(starts); err != nil {
			return err
		}
		if a.SegLen, err = s.ints(ls); err != nil {
			return err
		}
		return s.q.DeltaRule(a)
	})
	if err != nil {
		return nil, nil, err
	}
	return o, orNil(final), nil
}

// GatedRMSNorm normalises and gates each head vector. On a backend with FP8 weights a BF16 result also gets its FP8
// codes, which FP8 products read as their x (fp8_fuse.go).
func (b *Backend) GatedRMSNorm(o, z, w tensor.Tensor, eps float32) (tensor.Tensor, error) {
	const op = "GatedRMSNorm"
	ot, err := b.matrix(op, "o", o, -1, -1)
	if err != nil {
		return nil, err
	}
	n, width := ot.shape[0], ot.shape[1]
	zt, ldz, err := b.strided(op, "z", z, n, width)
	if err != nil {
		return nil, err
	}
	wt, err := b.get(op, "w", w)
	if err != nil {
		return nil, err
	}
	dv := tensor.Numel(wt.shape)
	if dv == 0 || width%dv != 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "w", Shape: wt.shape, Want: fmt.Sprintf("[d_v] dividing %d", width)}
	}
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(ot.dtype), n, width); err != nil || n == 0 || width == 0 {
			return err
		}
		return s.gatedRMSNormFP8(y, ot.Operand(), zt.Operand(), wt.Operand(), n*width/dv, dv, eps, width/dv, ldz)
	})
	return result(y, err)
}

// Pointer computes Kev's option probabilities for one question: the projections on the GPU, the logits and the
// softmax on the host, all in fp32.
func (b *Backend) Pointer(h tensor.Tensor, p *tensor.PointerHead, decide int, opts []int) ([]float32, error) {
	const op = "Pointer"
	if p == nil {
		return nil, fmt.Errorf("cuda: %s: nil head", op)
	}
	ht, err := b.matrix(op, "h", h, -1, -1)
	if err != nil {
		return nil, err
	}
	n, d := ht.shape[0], ht.shape[1]
	wq, err := b.matrix(op, "Wq", p.Wq, -1, d)
	if err != nil {
		return nil, err
	}
	dp := wq.shape[0]
	wk, err := b.matrix(op, "Wk", p.Wk, dp, d)
	if err != nil {
		return nil, err
	}
	bq, err := b.vector(op, "Bq", p.Bq, dp)
	if err != nil {
		return nil, err
	}
	bk, err := b.vector(op, "Bk", p.Bk, dp)
	if err != nil {
		return nil, err
	}
	if decide < 0 || decide >= n {
		return nil, fmt.Errorf("cuda: %s: decide = %d outside the %d rows of h", op, decide, n)
	}
	if len(opts) == 0 {
		return nil, fmt.Errorf("cuda: %s: no options", op)
	}
	rows := []int32{int32(decide)}
	for j, o := range opts {
		if o < 0 || o >= n {
			return nil, fmt.Errorf("cuda: %s: opts[%d] = %d outside the %d rows of h", op, j, o, n)
		}
		rows = append(rows, int32(o))
	}
	if dp == 0 || d == 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "Wq", Shape: wq.shape, Want: "a non-empty [dp, d]"}
	}
	proj := make([]float32, len(rows)*dp)
	err = b.run(func(s *scope) error {
		rb, err := s.ints(rows)
		if err != nil {
			return err
		}
		out, err := s.temp(4 * int64(len(proj)))
		if err != nil {
			return err
		}
		if err := s.q.PointerProj(out, ht.Operand(), rb, len(rows), n, wq.Operand(), bq.Operand(), wk.Operand(), bk.Operand(), d, dp); err != nil {
			return err
		}
		return s.q.Download(unsafe.Slice((*byte)(unsafe.Pointer(&proj[0])), 4*len(proj)), out)
	})
	if err != nil {
		return nil, err
	}
	xq := proj[:dp]
	temp := p.Temperature
	if temp == 0 {
		temp = 1
	}
	logits := make([]float32, len(opts))
	maxv := float32(math.Inf(-1))
	for j := range opts {
		xk := proj[(j+1)*dp : (j+2)*dp]
		var z float32
		for i := range xk {
			z += xk[i] * xq[i]
		}
		z *= p.Scale
		if temp != 1 {
			z /= temp
		}
		logits[j] = z
		maxv = max(maxv, z)
	}
	var sum float32
	for j, z := range logits {
		logits[j] = float32(math.Exp(float64(z - maxv)))
		sum += logits[j]
	}
	for j := range logits {
		logits[j] /= sum
	}
	return logits, nil
}
