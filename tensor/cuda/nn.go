//go:build cuda

package cuda

import (
	"encoding/binary"
	"fmt"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// Operand is a device buffer together with the storage type of its elements, as the general kernels (nn.cu,
// attn.cu, delta.cu) take them: each operand may be F32, BF16 or F16 independently, arithmetic is fp32.
type Operand struct {
	Buffer
	DType tensor.DType
}

// elemSize returns the bytes per element of dt.
func elemSize(dt tensor.DType) int64 {
	switch dt {
	case tensor.F32:
		return 4
	case tensor.F8E4M3:
		return 1 // the codes; an F8E4M3 tensor's row scales follow them (fp8ScaleOff)
	}
	return 2
}

// operand names one argument for needAll: n elements required; an optional operand may be a zero Buffer.
type operand struct {
	name     string
	o        Operand
	n        int64
	optional bool
}

// needAll checks every operand's type, alignment and size.
func needAll(kernel string, ops ...operand) error {
	for _, c := range ops {
		if c.optional && c.o.Ptr == 0 {
			continue
		}
		if c.o.DType > tensor.F16 {
			return &ArgError{kernel, c.name, fmt.Sprintf("storage type %v", c.o.DType)}
		}
		if err := need(kernel, c.name, c.o.Buffer, c.n*elemSize(c.o.DType)); err != nil {
			return err
		}
	}
	return nil
}

// needStrided checks operands read with a row stride (column views, which may start inside a 16-byte piece): type,
// alignment to the element size, and size. Fast paths check their own 16-byte alignment.
func needStrided(kernel string, ops ...operand) error {
	for _, c := range ops {
		if c.o.DType > tensor.F16 {
			return &ArgError{kernel, c.name, fmt.Sprintf("storage type %v", c.o.DType)}
		}
		es := elemSize(c.o.DType)
		if c.o.Ptr == 0 || int64(c.o.Ptr)%es != 0 || c.o.Bytes < c.n*es {
			return &ArgError{kernel, c.name, fmt.Sprintf("address %#x holding %d bytes: need %d-byte alignment and %d bytes",
				uintptr(c.o.Ptr), c.o.Bytes, es, c.n*es)}
		}
	}
	return nil
}

func positive(kernel, what string, vs ...int) error {
	for _, v := range vs {
		if v <= 0 {
			return &ArgError{kernel, what, fmt.Sprintf("%v must all be positive", vs)}
		}
	}
	return nil
}

// put appends an operand's pointer and type code.
func (q *Queue) put(o Operand) *Queue {
	q.args.Ptr(o.Ptr).I32(int32(o.DType))
	return q
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

var block256 = cudrv.Dim3{X: 256, Y: 1, Z: 1}

var block512 = cudrv.Dim3{X: 512, Y: 1, Z: 1}

// EmbedAny enqueues y[t] = table[ids[t]] for t < T, table [V, d], y [T, d], ids int32 [T] on the device. The ids
// must lie in [0, V) (checked by the caller).
func (q *Queue) EmbedAny(y, table Operand, ids Buffer, T, V, d int) error {
	const op = "EmbedAny"
	if err := positive(op, "T, V, d", T, V, d); err != nil {
		return err
	}
	n := int64(T) * int64(d)
	if err := needAll(op, operand{"y", y, n, false}, operand{"table", table, int64(V) * int64(d), false},
		operand{"ids", Operand{ids, tensor.F32}, int64(T), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(y).put(table)
	q.args.Ptr(ids.Ptr).I32(int32(T)).I32(int32(d))
	return q.launch("nn", "embed_any", gridFor(n, 256, q.d.info.SMs), block256, 0)
}

// qkMaxHalf bounds R/2 in QKNormRope (QK_MAX_HALF in kernels/nn.cu: the block's inv_freq table).
const qkMaxHalf = 256

// CopyCols enqueues y[r, c] = x[r, off+c] for r < M, c < w, with x rows ldx elements wide; x and y have the same
// storage type.
func (q *Queue) CopyCols(y, x Operand, M, ldx, off, w int) error {
	const op = "CopyCols"
	if err := positive(op, "M, ldx, w", M, ldx, w); err != nil {
		return err
	}
	if off < 0 || off+w > ldx {
		return &ArgError{op, "off", fmt.Sprintf("columns [%d, %d) outside rows of %d", off, off+w, ldx)}
	}
	if x.DType != y.DType {
		return &ArgError{op, "y", fmt.Sprintf("type %v differs from x's %v", y.DType, x.DType)}
	}
	if err := needAll(op, operand{"y", y, int64(M) * int64(w), false}, operand{"x", x, int64(M) * int64(ldx), false}); err != nil {
		return err
	}
	if es := int(elemSize(x.DType)); (es*ldx)%16 == 0 && (es*off)%16 == 0 && (es*w)%16 == 0 && x.Ptr%16 == 0 && y.Ptr%16 == 0 {
		return q.splitCols16(x.Ptr, M, es*ldx/16, []splitPart{{y.Ptr, es * off / 16, es * w / 16}})
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(x.Ptr).I32(int32(elemSize(x.DType))).I32(int32(M)).I32(int32(ldx)).I32(int32(off)).I32(int32(w))
	return q.launch("nn", "copy_cols", gridFor(int64(M)*int64(w), 256, q.d.info.SMs), block256, 0)
}

// splitPart is one output of splitCols16: y [M, w16 pieces] = columns [off16, off16+w16) of x, in 16-byte pieces.
type splitPart struct {
	y          cu.DevicePtr
	off16, w16 int
}

// splitCols16 copies column blocks of the M rows of x (ldx16 16-byte pieces each, 16-byte aligned) to the
// parts, four per launch of split_cols16. The caller has checked the sizes.
func (q *Queue) splitCols16(x cu.DevicePtr, M, ldx16 int, parts []splitPart) error {
	for len(parts) > 0 {
		n := min(len(parts), 4)
		var buf [64]byte // SplitParts: four {y *uint4; off, w int32}
		maxW := 0
		for i, p := range parts[:n] {
			binary.LittleEndian.PutUint64(buf[16*i:], uint64(p.y))
			binary.LittleEndian.PutUint32(buf[16*i+8:], uint32(p.off16))
			binary.LittleEndian.PutUint32(buf[16*i+12:], uint32(p.w16))
			maxW = max(maxW, p.w16)
		}
		if maxW > 0 && M > 0 {
			q.args.Reset()
			q.args.Ptr(x).I32(int32(M)).I32(int32(ldx16)).Bytes(buf[:], 8)
			grid := cudrv.Dim3{X: (maxW + 255) / 256, Y: min(M, 65535), Z: n}
			if err := q.launch("nn", "split_cols16", grid, block256, 0); err != nil {
				return err
			}
		}
		parts = parts[n:]
	}
	return nil
}

// RMSNormAny enqueues, for each of the M rows of width n: s = x (+ res, rounded to sum's type and stored to sum),
// y = s / sqrt(mean(s²) + eps) · g with g = 1 + gain if plusOne, else gain [n]. res and sum are both set or
// both zero.
func (q *Queue) RMSNormAny(y, sum, x, res, gain Operand, M, n int, eps float32, plusOne bool) error {
	const op = "RMSNormAny"
	if err := positive(op, "M, n", M, n); err != nil {
		return err
	}
	if (res.Ptr == 0) != (sum.Ptr == 0) {
		return &ArgError{op, "res, sum", "set both or neither"}
	}
	sz := int64(M) * int64(n)
	if err := needAll(op, operand{"y", y, sz, false}, operand{"x", x, sz, false}, operand{"gain", gain, int64(n), false},
		operand{"res", res, sz, true}, operand{"sum", sum, sz, true}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(y).put(sum).put(x).put(res).put(gain)
	q.args.I32(int32(M)).I32(int32(n)).F32(eps).I32(b2i(plusOne))
	return q.launch("nn", "rmsnorm_any", cudrv.Dim3{X: M, Y: 1, Z: 1}, block256, 0)
}

// SwiGLUAny enqueues y = silu(g) ⊙ u for x [M, 2F] = [g | u], y [M, F].
func (q *Queue) SwiGLUAny(y, x Operand, M, F int) error {
	const op = "SwiGLUAny"
	if err := positive(op, "M, F", M, F); err != nil {
		return err
	}
	n := int64(M) * int64(F)
	if err := needAll(op, operand{"y", y, n, false}, operand{"x", x, 2 * n, false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(y).put(x)
	q.args.I32(int32(M)).I32(int32(F))
	return q.launch("nn", "swiglu_any", gridFor(n, 256, q.d.info.SMs), block256, 0)
}

// SigmoidGateAny enqueues y = x ⊙ sigmoid(gate) over n elements.
func (q *Queue) SigmoidGateAny(y, x, gate Operand, n int64) error {
	const op = "SigmoidGateAny"
	if n <= 0 {
		return &ArgError{op, "n", fmt.Sprintf("%d must be positive", n)}
	}
	if err := needAll(op, operand{"y", y, n, false}, operand{"x", x, n, false}, operand{"gate", gate, n, false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(y).put(x).put(gate)
	q.args.U64(uint64(n))
	return q.launch("nn", "sigmoid_gate_any", gridFor(n, 256, q.d.info.SMs), block256, 0)
}

// AddBiasAny enqueues y[r, c] = x[r, c] + bias[c] for x, y [rows, C] (n = rows·C elements), bias [C].
func (q *Queue) AddBiasAny(y, x, bias Operand, n int64, C int) error {
	const op = "AddBiasAny"
	if n <= 0 || C <= 0 || n%int64(C) != 0 {
		return &ArgError{op, "n, C", fmt.Sprintf("%d, %d: want positive, C dividing n", n, C)}
	}
	if err := needAll(op, operand{"y", y, n, false}, operand{"x", x, n, false}, operand{"bias", bias, int64(C), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(y).put(x).put(bias)
	q.args.U64(uint64(n)).I32(int32(C))
	return q.launch("nn", "add_bias_any", gridFor(n, 256, q.d.info.SMs), block256, 0)
}

// DeltaGates enqueues beta = sigmoid(b) and g = −exp(aLog)·softplus(a + dtBias) (softplus(x) = x above 20) for
// b, a [N, H] (rows ldb resp. lda ≥ H elements apart), aLog, dtBias [H]; beta and g are fp32 [N, H].
func (q *Queue) DeltaGates(beta, g Buffer, b, a, aLog, dtBias Operand, N, H, ldb, lda int) error {
	const op = "DeltaGates"
	if err := positive(op, "N, H", N, H); err != nil {
		return err
	}
	if ldb < H || lda < H {
		return &ArgError{op, "ldb, lda", fmt.Sprintf("%d, %d: below H = %d", ldb, lda, H)}
	}
	n := int64(N) * int64(H)
	if err := needAll(op, operand{"beta", Operand{beta, tensor.F32}, n, false}, operand{"g", Operand{g, tensor.F32}, n, false},
		operand{"aLog", aLog, int64(H), false}, operand{"dtBias", dtBias, int64(H), false}); err != nil {
		return err
	}
	if err := needStrided(op, operand{"b", b, int64(N-1)*int64(ldb) + int64(H), false},
		operand{"a", a, int64(N-1)*int64(lda) + int64(H), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(beta.Ptr).Ptr(g.Ptr)
	q.put(b).put(a).put(aLog).put(dtBias)
	q.args.I32(int32(N)).I32(int32(H)).I32(int32(ldb)).I32(int32(lda))
	return q.launch("nn", "delta_gates", gridFor(n, 256, q.d.info.SMs), block256, 0)
}

// GatedRMSNorm enqueues y = o / sqrt(mean(o²) + eps) · w · silu(z) over each of rows dv-wide vectors; w [dv]. The
// vectors of y and o are dense; those of z lie hpr to a row, rows ldz ≥ hpr·dv elements apart (vector v is head
// v mod hpr of row v / hpr).
func (q *Queue) GatedRMSNorm(y, o, z, w Operand, rows, dv int, eps float32, hpr, ldz int) error {
	if err := gatedRMSNormArgs("GatedRMSNorm", y, o, z, w, rows, dv, hpr, ldz); err != nil {
		return err
	}
	q.args.Reset()
	if l, ok := gatedLanes(y, o, z, w, dv, ldz); ok {
		// l lanes per vector, 16-byte loads; 8 warps of 32/l vectors per block
		q.args.Ptr(y.Ptr).Ptr(o.Ptr).Ptr(z.Ptr).Ptr(w.Ptr).I32(int32(rows)).I32(int32(dv)).
			I32(int32(l)).F32(eps).I32(int32(hpr)).I32(int32(ldz))
		per := 8 * (32 / l)
		return q.launch("nn", "gated_rmsnorm_bf16", cudrv.Dim3{X: (rows + per - 1) / per, Y: 1, Z: 1}, block256, 0)
	}
	q.put(y).put(o).put(z).put(w)
	q.args.I32(int32(rows)).I32(int32(dv)).F32(eps).I32(int32(hpr)).I32(int32(ldz))
	return q.launch("nn", "gated_rmsnorm", cudrv.Dim3{X: (rows + 7) / 8, Y: 1, Z: 1}, block256, 0)
}

// GatedRMSNormE4M3 is GatedRMSNorm that also writes the E4M3 codes qb [rows/hpr, hpr·dv] (rows hpr·dv bytes apart)
// and row scales s [rows/hpr] of y seen as that matrix: the bits QuantRowsE4M3 makes from it
// (gated_rmsnorm_bf16_e4m3, kernels/nn.cu, one block per row), without reading y again. Only for the shapes
// gatedE4M3Fits takes; compute capability 9.0.
func (q *Queue) GatedRMSNormE4M3(y, o, z, w Operand, qb, s Buffer, rows, dv int, eps float32, hpr, ldz int) error {
	const op = "GatedRMSNormE4M3"
	if err := gatedRMSNormArgs(op, y, o, z, w, rows, dv, hpr, ldz); err != nil {
		return err
	}
	if !gatedE4M3Fits(y, o, z, w, dv, hpr, ldz) {
		return &ArgError{op, "y, o, z, w", fmt.Sprintf("types %v, %v, %v, %v, d_v = %d, hpr = %d, ldz = %d: want bf16 y, o and z, "+
			"fp32 w, 16-byte aligned, d_v/8 a power of two ≤ 32, hpr·d_v a multiple of 16 and at most 8192, ldz of 8",
			y.DType, o.DType, z.DType, w.DType, dv, hpr, ldz)}
	}
	m := rows / hpr
	if err := q.needCodes(op, qb, s, m, hpr*dv); err != nil {
		return err
	}
	l := dv / 8
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(o.Ptr).Ptr(z.Ptr).Ptr(w.Ptr).I32(int32(m)).I32(int32(dv)).I32(int32(l)).F32(eps).
		I32(int32(hpr)).I32(int32(ldz)).Ptr(qb.Ptr).Ptr(s.Ptr)
	return q.launch("nn", "gated_rmsnorm_bf16_e4m3", cudrv.Dim3{X: m, Y: 1, Z: 1}, cudrv.Dim3{X: (hpr*l + 31) &^ 31, Y: 1, Z: 1}, 0)
}

// gatedE4M3Fits reports whether GatedRMSNormE4M3 takes these operands: GatedRMSNorm's bf16 path
// (gated_rmsnorm_bf16) with rows hpr·dv wide a multiple of 16 and at most 8,192 (a block's 1,024 threads of 8).
func gatedE4M3Fits(y, o, z, w Operand, dv, hpr, ldz int) bool {
	l, ok := gatedLanes(y, o, z, w, dv, ldz)
	return ok && hpr > 0 && (hpr*dv)%16 == 0 && hpr*l <= 1024
}

// gatedLanes returns the lanes per vector of gated_rmsnorm_bf16 (dv/8), and whether it takes these operands: bf16
// y, o and z and fp32 w, 16-byte aligned, dv/8 a power of two ≤ 32, ldz a multiple of 8.
func gatedLanes(y, o, z, w Operand, dv, ldz int) (int, bool) {
	l := dv / 8
	return l, y.DType == tensor.BF16 && o.DType == tensor.BF16 && z.DType == tensor.BF16 && dv%8 == 0 && l >= 1 &&
		l <= 32 && l&(l-1) == 0 && y.Ptr%16 == 0 && o.Ptr%16 == 0 && z.Ptr%16 == 0 && ldz%8 == 0 &&
		w.DType == tensor.F32 && w.Ptr%16 == 0
}

// gatedRMSNormArgs checks GatedRMSNorm's shapes and buffers.
func gatedRMSNormArgs(op string, y, o, z, w Operand, rows, dv, hpr, ldz int) error {
	if err := positive(op, "rows, dv, hpr", rows, dv, hpr); err != nil {
		return err
	}
	if rows%hpr != 0 || ldz < hpr*dv {
		return &ArgError{op, "hpr, ldz", fmt.Sprintf("%d, %d: rows = %d, dv = %d", hpr, ldz, rows, dv)}
	}
	n := int64(rows) * int64(dv)
	if err := needAll(op, operand{"y", y, n, false}, operand{"o", o, n, false}, operand{"w", w, int64(dv), false}); err != nil {
		return err
	}
	return needStrided(op, operand{"z", z, int64(rows/hpr-1)*int64(ldz) + int64(hpr*dv), false})
}

// QKNormRope is the argument list of Queue.QKNormRope.
type QKNormRope struct {
	QOut, KOut, Gate Operand // [T, H·D], [T, KV·D], [T, H·D] (Gate only when Gated)
	Q, K             Operand // [T, H·D] or [T, H·2D] when Gated; [T, KV·D]
	QGain, KGain     Operand // [D] each; the norm multiplies by 1 + gain, or gain (zero when Norm is QKNormNone)
	Positions        Buffer  // int32 [T]
	T, H, KV, D, R   int
	LdQ, LdK         int // row strides of Q and K in elements (0: their widths)
	Theta            float64
	Eps              float32
	Gated            bool
	Norm             tensor.QKNorm
}

// ropeOneAngle selects qk_norm_rope_bf16_a1 where every lane holds one rotation angle; false keeps the general
// kernel (tests compare the two: the same bits).
var ropeOneAngle = true

// Blocks of qk_norm_rope_bf16_a1 and qk_norm_rope_bf16 resident a multiprocessor (256 threads; the first's
// registers capped by its launch bounds, QK_BLOCKS_SM in kernels/nn.cu, the second's 80 a thread).
const (
	qkRopeA1BlocksSM = 4
	qkRopeBlocksSM   = 3
)

// QKNormRope enqueues the per-head RMSNorm and partial NeoX rotation of queries and keys (see tensor.Backend).
func (q *Queue) QKNormRope(a QKNormRope) error {
	const op = "QKNormRope"
	if err := positive(op, "T, H, KV, D", a.T, a.H, a.KV, a.D); err != nil {
		return err
	}
	if a.R < 0 || a.R > a.D || a.R%2 != 0 || a.R > 2*qkMaxHalf {
		return &ArgError{op, "R", fmt.Sprintf("%d must be even and in [0, min(D = %d, %d)]", a.R, a.D, 2*qkMaxHalf)}
	}
	qn, kn := int64(a.T)*int64(a.H)*int64(a.D), int64(a.T)*int64(a.KV)*int64(a.D)
	qw := a.H * a.D
	if a.Gated {
		qw *= 2
	}
	if a.LdQ == 0 {
		a.LdQ = qw
	}
	if a.LdK == 0 {
		a.LdK = a.KV * a.D
	}
	if a.LdQ < qw || a.LdK < a.KV*a.D {
		return &ArgError{op, "LdQ, LdK", fmt.Sprintf("%d, %d: below the row widths %d, %d", a.LdQ, a.LdK, qw, a.KV*a.D)}
	}
	qin, kin := int64(a.T-1)*int64(a.LdQ)+int64(qw), int64(a.T-1)*int64(a.LdK)+int64(a.KV*a.D)
	if err := needAll(op, operand{"QOut", a.QOut, qn, false}, operand{"KOut", a.KOut, kn, false},
		operand{"Gate", a.Gate, qn, !a.Gated},
		operand{"QGain", a.QGain, int64(a.D), a.Norm == tensor.QKNormNone},
		operand{"KGain", a.KGain, int64(a.D), a.Norm == tensor.QKNormNone},
		operand{"Positions", Operand{a.Positions, tensor.F32}, int64(a.T), false}); err != nil {
		return err
	}
	if err := needStrided(op, operand{"Q", a.Q, qin, false}, operand{"K", a.K, kin, false}); err != nil {
		return err
	}
	if a.Norm > tensor.QKNormNone {
		return &ArgError{op, "Norm", fmt.Sprintf("%d is not a tensor.QKNorm", a.Norm)}
	}
	if a.Gated && a.Gate.DType != a.QOut.DType {
		return &ArgError{op, "Gate", "must have QOut's storage type"}
	}
	q.args.Reset()
	bf := func(os ...Operand) bool {
		for _, o := range os {
			if o.DType != tensor.BF16 || o.Ptr%16 != 0 {
				return false
			}
		}
		return true
	}
	gainsOK := a.Norm == tensor.QKNormNone ||
		(a.QGain.DType == tensor.F32 && a.KGain.DType == tensor.F32 && a.QGain.Ptr%16 == 0 && a.KGain.Ptr%16 == 0)
	if l := a.D / 8; a.D%8 == 0 && l <= 32 && l&(l-1) == 0 && a.R%16 == 0 && a.LdQ%8 == 0 && a.LdK%8 == 0 && gainsOK &&
		bf(a.QOut, a.KOut, a.Q, a.K) && (!a.Gated || bf(a.Gate)) {
		// l lanes per head vector, 16-byte loads and stores; 8 warps of 32/l vectors per block
		q.args.Ptr(a.QOut.Ptr).Ptr(a.KOut.Ptr).Ptr(a.Gate.Ptr).Ptr(a.Q.Ptr).Ptr(a.K.Ptr).Ptr(a.QGain.Ptr).Ptr(a.KGain.Ptr).
			Ptr(a.Positions.Ptr).I32(int32(a.T)).I32(int32(a.H)).I32(int32(a.KV)).I32(int32(a.D)).I32(int32(a.R)).
			F64(a.Theta).F32(a.Eps).I32(b2i(a.Gated)).I32(int32(a.Norm)).I32(int32(a.LdQ)).I32(int32(a.LdK)).I32(int32(l))
		per := 8 * (32 / l)
		vecs := a.T * (a.H + a.KV)
		fn, resident := "qk_norm_rope_bf16", qkRopeBlocksSM
		if ropeOneAngle && a.R/2 <= l { // one rotation angle a lane (D = 256, R = 64): the loops over angles unrolled
			fn, resident = "qk_norm_rope_bf16_a1", qkRopeA1BlocksSM
		}
		// a block takes per vectors at a time and strides over the rest: as many blocks as are resident at once
		// (T, H and KV are positive, so at least one)
		blocks := min((vecs+per-1)/per, resident*q.d.sms())
		return q.launch("nn", fn, cudrv.Dim3{X: blocks, Y: 1, Z: 1}, block256, 0)
	}
	q.args.Ptr(a.QOut.Ptr).Ptr(a.KOut.Ptr).Ptr(a.Gate.Ptr).I32(int32(a.QOut.DType)).I32(int32(a.KOut.DType))
	q.put(a.Q).put(a.K).put(a.QGain).put(a.KGain)
	q.args.Ptr(a.Positions.Ptr).I32(int32(a.T)).I32(int32(a.H)).I32(int32(a.KV)).I32(int32(a.D)).I32(int32(a.R)).
		F64(a.Theta).F32(a.Eps).I32(b2i(a.Gated)).I32(int32(a.Norm)).I32(int32(a.LdQ)).I32(int32(a.LdK))
	vecs := a.T * (a.H + a.KV)
	return q.launch("nn", "qk_norm_rope", cudrv.Dim3{X: (vecs + 7) / 8, Y: 1, Z: 1}, block256, 0)
}

// Conv1dSiLU enqueues y[t, c] = silu(Σ_j w[c, j]·x[t−K+1+j, c]) for x, y [N, C], w [C, K], taking rows before
// segStart[t] (int32 [N], the first row of t's segment) from state [K−1, C] (zero when state is a zero Buffer).
func (q *Queue) Conv1dSiLU(y, x, w, state Operand, segStart Buffer, N, C, K int) error {
	const op = "Conv1dSiLU"
	if err := positive(op, "N, C, K", N, C, K); err != nil {
		return err
	}
	n := int64(N) * int64(C)
	if err := needAll(op, operand{"y", y, n, false}, operand{"x", x, n, false}, operand{"w", w, int64(C) * int64(K), false},
		operand{"state", state, int64(K-1) * int64(C), true}, operand{"segStart", Operand{segStart, tensor.F32}, int64(N), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(y).put(x).put(w).put(state)
	q.args.Ptr(segStart.Ptr).I32(int32(N)).I32(int32(C)).I32(int32(K))
	return q.launch("nn", "conv1d_silu", gridFor(n, 256, q.d.info.SMs), block256, 0)
}

// ConvState enqueues ns = the last K−1 rows of [state; x] for x [N, C] (N ≥ 0), state and ns [K−1, C] (state
// zero when it is a zero Buffer). K must be at least 2.
func (q *Queue) ConvState(ns, x, state Operand, N, C, K int) error {
	const op = "ConvState"
	if err := positive(op, "C, K−1", C, K-1); err != nil {
		return err
	}
	if N < 0 {
		return &ArgError{op, "N", fmt.Sprintf("%d is negative", N)}
	}
	sn := int64(K-1) * int64(C)
	if err := needAll(op, operand{"ns", ns, sn, false}, operand{"x", x, int64(N) * int64(C), N == 0},
		operand{"state", state, sn, true}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(ns).put(x).put(state)
	q.args.I32(int32(N)).I32(int32(C)).I32(int32(K))
	return q.launch("nn", "conv_state", gridFor(sn, 256, q.d.info.SMs), block256, 0)
}

// PointerProj enqueues the pointer head's projections: out fp32 [nr, dp], out[0] = Wq·h[rows[0]] + Bq and
// out[r] = Wk·h[rows[r]] + Bk for r > 0; h [*, d] with every row index valid (checked by the caller), rows int32
// [nr], Wq, Wk [dp, d], Bq, Bk [dp].
func (q *Queue) PointerProj(out Buffer, h Operand, rows Buffer, nr, hRows int, wq, bq, wk, bk Operand, d, dp int) error {
	const op = "PointerProj"
	if err := positive(op, "nr, hRows, d, dp", nr, hRows, d, dp); err != nil {
		return err
	}
	if err := needAll(op, operand{"out", Operand{out, tensor.F32}, int64(nr) * int64(dp), false},
		operand{"h", h, int64(hRows) * int64(d), false}, operand{"rows", Operand{rows, tensor.F32}, int64(nr), false},
		operand{"Wq", wq, int64(dp) * int64(d), false}, operand{"Bq", bq, int64(dp), false},
		operand{"Wk", wk, int64(dp) * int64(d), false}, operand{"Bk", bk, int64(dp), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(out.Ptr)
	q.put(h)
	q.args.Ptr(rows.Ptr).I32(int32(nr))
	q.put(wq).put(bq).put(wk).put(bk)
	q.args.I32(int32(d)).I32(int32(dp))
	return q.launch("nn", "pointer_proj", cudrv.Dim3{X: (nr*dp + 7) / 8, Y: 1, Z: 1}, block256, 0)
}

// MatMulAny enqueues y[M, N] = x[M, K]·w[N, K]ᵀ for any storage types (fp32 accumulation on the CUDA cores);
// the tensor-core GEMM is the fast path for bf16 operands with aligned sizes.
func (q *Queue) MatMulAny(y, x, w Operand, M, N, K int) error {
	const op = "MatMulAny"
	if err := positive(op, "M, N, K", M, N, K); err != nil {
		return err
	}
	if err := needAll(op, operand{"y", y, int64(M) * int64(N), false}, operand{"x", x, int64(M) * int64(K), false},
		operand{"w", w, int64(N) * int64(K), false}); err != nil {
		return err
	}
	q.args.Reset()
	q.put(y).put(x).put(w)
	q.args.I32(int32(M)).I32(int32(N)).I32(int32(K))
	return q.launch("nn", "matmul_any", cudrv.Dim3{X: (N + 31) / 32, Y: (M + 31) / 32, Z: 1}, block256, 0)
}
