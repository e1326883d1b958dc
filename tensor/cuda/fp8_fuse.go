//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/kevgo/kev/tensor"
)

// The activations' FP8 codes from their producers. An FP8 product quantizes its x per row (quant_rows_e4m3: one
// launch before each FP8 GEMM). Most of a model's products read the output of a normalisation whose block holds
// the whole row: RMSNorm, AddRMSNorm (so MatMulAddRMSNorm's normed output with FP8 weights, which runs MatMul then
// AddRMSNorm) and GatedRMSNorm; the attention layers' output projection reads SigmoidGate's output, which a kernel
// of a block per row computes too. On a backend with FP8 weights (Backend.fp8) those write, beside their bf16
// output, its E4M3 codes and row scales (rmsnorm_bf16_e4m3, gated_rmsnorm_bf16_e4m3, sigmoid_gate_bf16_e4m3:
// quant_rows_e4m3's bits from the values they have just rounded), attached to the output tensor (Tensor.q8);
// matmulFP8 reads them instead of quantizing. The codes are exactly those of the tensor's values: only the kernel
// that writes a tensor attaches them, a view has none, and no operation writes into an existing tensor.
// KEV_CUDA_FP8_FUSE=off (Device.fp8Fuse) turns both sides off. The MLP's down projection reads the SwiGLU epilogue
// of the gate/up product, whose blocks hold parts of a row, and keeps its quantization.

// fp8Codes are the E4M3 codes of a BF16 matrix [m, k] (rows k bytes apart) and its fp32 row scales, as
// QuantRowsE4M3 makes them, in one pool buffer laid out as an F8E4M3 tensor's: the codes, then the scales from
// fp8ScaleOff(m, k). The zero value is none.
type fp8Codes struct {
	buf  Buffer
	m, k int
}

// parts returns the codes and the scales.
func (c fp8Codes) parts() (codes, scales Buffer) {
	off := fp8ScaleOff(c.m, c.k)
	return Buffer{Ptr: c.buf.Ptr, Bytes: off}, Buffer{Ptr: c.buf.Ptr + cu.DevicePtr(off), Bytes: c.buf.Bytes - off}
}

// fuseFP8 reports whether an operation producing a BF16 matrix n wide writes its FP8 codes too: the backend has
// FP8 weights (Backend.fp8), the device runs the FP8 kernels, KEV_CUDA_FP8_FUSE is not off, and n is a multiple of
// 16 (the FP8 GEMM's K).
func (s *scope) fuseFP8(n int) bool {
	d := s.q.d
	return s.b.fp8 && d.fp8Fuse && d.hopper() && n > 0 && n%16 == 0
}

// attachFP8 allocates the FP8 codes of t (a BF16 matrix [M, K] this scope made, M, K > 0), attaches them and
// returns their codes and scales for the kernel that writes t to fill. Should the operation fail, the scope hands
// them back with t.
func (s *scope) attachFP8(t *Tensor) (codes, scales Buffer, err error) {
	m, k := t.shape[0], t.shape[1]
	buf, err := s.alloc(fp8ScaleOff(m, k) + 4*int64(m))
	if err != nil {
		return Buffer{}, Buffer{}, err
	}
	t.q8 = fp8Codes{buf: buf, m: m, k: k}
	codes, scales = t.q8.parts()
	return codes, scales, nil
}

// codesOf returns the FP8 codes attached to x when an FP8 product may read them as its x: fusion on, x a dense
// BF16 matrix (not a view), not freed, with codes of its shape.
func (s *scope) codesOf(x *Tensor) (fp8Codes, bool) {
	if !s.q.d.fp8Fuse || x.dtype != tensor.BF16 || len(x.shape) != 2 {
		return fp8Codes{}, false
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	c := x.q8
	ok := c.buf.Ptr != 0 && !x.freed && x.ld == 0 && x.base == nil && c.m == x.shape[0] && c.k == x.shape[1]
	return c, ok
}

// fp8X returns the E4M3 codes [M, K] and row scales [M] of an FP8 product's x (BF16 or F32 [M, K], M, K > 0, K a
// multiple of 16): those its producer attached (codesOf), or else quantized now into temporaries of the scope
// (QuantRowsE4M3).
func (s *scope) fp8X(x *Tensor) (codes, scales Buffer, err error) {
	if c, ok := s.codesOf(x); ok {
		codes, scales = c.parts()
		return codes, scales, nil
	}
	m, k := x.shape[0], x.shape[1]
	if codes, err = s.temp((int64(m)*int64(k) + 15) &^ 15); err != nil {
		return Buffer{}, Buffer{}, err
	}
	if scales, err = s.temp(4 * int64(m)); err != nil {
		return Buffer{}, Buffer{}, err
	}
	return codes, scales, s.q.QuantRowsE4M3(codes, scales, x.Operand(), m, k, k)
}

// rmsnormFP8 enqueues Queue.RMSNorm (res, sum zero: RMSNorm; set: AddRMSNorm) into y, with y's FP8 codes attached
// when the scope fuses them (fuseFP8).
func (s *scope) rmsnormFP8(y *Tensor, sum, x, res, gain Buffer, m, n int, eps float32, plusOne bool) error {
	if !s.fuseFP8(n) {
		return s.q.RMSNorm(y.buf, sum, x, res, gain, m, n, eps, plusOne)
	}
	codes, scales, err := s.attachFP8(y)
	if err != nil {
		return err
	}
	return s.q.RMSNormE4M3(y.buf, sum, x, res, gain, codes, scales, m, n, eps, plusOne)
}

// gatedRMSNormFP8 enqueues Queue.GatedRMSNorm into y ([rows·dv/width, width], width = hpr·dv), with y's FP8 codes
// attached when the scope fuses them (fuseFP8) and GatedRMSNormE4M3 takes the operands.
func (s *scope) gatedRMSNormFP8(y *Tensor, o, z, w Operand, rows, dv int, eps float32, hpr, ldz int) error {
	yo := y.Operand()
	if !s.fuseFP8(hpr*dv) || !gatedE4M3Fits(yo, o, z, w, dv, hpr, ldz) {
		return s.q.GatedRMSNorm(yo, o, z, w, rows, dv, eps, hpr, ldz)
	}
	codes, scales, err := s.attachFP8(y)
	if err != nil {
		return err
	}
	return s.q.GatedRMSNormE4M3(yo, o, z, w, codes, scales, rows, dv, eps, hpr, ldz)
}

// sigmoidGateFP8 enqueues Queue.SigmoidGate into y (BF16 [M, n], x and gate dense BF16 of its shape), with y's FP8
// codes attached when the scope fuses them (fuseFP8) and the row fits sigmoid_gate_bf16_e4m3.
func (s *scope) sigmoidGateFP8(y *Tensor, x, gate Buffer, m, n int) error {
	if !s.fuseFP8(n) || n > sigmoidGateE4M3Max {
		return s.q.SigmoidGate(y.buf, x, gate, int64(m)*int64(n))
	}
	codes, scales, err := s.attachFP8(y)
	if err != nil {
		return err
	}
	return s.q.SigmoidGateE4M3(y.buf, x, gate, codes, scales, m, n)
}
