// Package tensor is the engine's contract: a Tensor whose storage a Backend
// owns, and the Backend interface listing every operation the Qwen3.5 model
// needs, each coarse enough to be one fused kernel on a GPU.
//
// Backends register themselves by name (Register) and are opened by name
// (Open), like database/sql drivers: the CPU reference backend lives in
// tensor/cpu and registers as "cpu"; importing it for its side effect makes
// it available:
//
//	import _ "github.com/kevgo/kev/tensor/cpu"
//	b, err := tensor.Open("cpu")
//
// Layout conventions shared by all operations:
//   - Activations are row-major matrices [rows, width]; a row is a token.
//     Multi-head activations are flattened head-major: head h of a
//     [T, H·D] matrix occupies columns h·D … h·D+D−1.
//   - Linear weights use the checkpoint's [out_features, in_features] layout,
//     so MatMul computes y = x·wᵀ.
//   - Several operations take lens, the lengths of independent segments
//     stacked along the rows (their sum is the row count). Each segment is
//     its own causal sequence continuing the same cached prefix; nil means
//     one segment covering all rows.
//   - Inputs are never modified; every result is a new tensor.
//
// Numerics: the CPU backend computes in float32 (F16 weights are widened
// exactly), except MatMul with a BF16 weight, which computes in bf16: x
// rounded to bf16, the products summed in float32. Other backends may store
// activations in BF16; the conformance suite in tensor/backendtest states the
// tolerance for each.
package tensor

import (
	"fmt"

	"github.com/kevgo/kev/internal/qwen35"
)

// DType is the element type of a tensor's storage.
type DType uint8

const (
	// F32 is IEEE binary32.
	F32 DType = iota
	// BF16 is bfloat16.
	BF16
	// F16 is IEEE binary16.
	F16
	// F8E4M3 is a weight matrix [N, K] quantized to OCP FP8 E4M3
	// (internal/fp8) with one float32 scale per row: row j stands for its
	// codes' values times scale j. Only backends that implement FP8 make such
	// tensors, and their operations take them only as the weight w of the
	// matrix products (MatMul, MatMulSplit, MatMulSwiGLU,
	// MatMulAddRMSNorm); ToHost returns the dequantized values.
	F8E4M3
)

// String returns "F32", "BF16", "F16" or "F8E4M3".
func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	case F8E4M3:
		return "F8E4M3"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Tensor is a dense row-major tensor whose storage belongs to the Backend
// that made it. Only that backend may read it; pass it back to the backend's
// operations, or copy it out with ToHost.
type Tensor interface {
	// Shape returns the tensor's dimensions. Callers must not modify it.
	Shape() []int
	// DType returns the storage element type.
	DType() DType
}

// Numel returns the number of elements of a shape, the product of its
// dimensions (1 for a scalar).
func Numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

// QKNorm says how QKNormRope normalises each query and key head before
// rotating it.
type QKNorm uint8

const (
	// QKNormPlusOne is RMSNorm with gain 1 + g (Qwen3.5).
	QKNormPlusOne QKNorm = iota
	// QKNormPlain is RMSNorm with gain g (Qwen3).
	QKNormPlain
	// QKNormNone leaves the heads as they are (Qwen2); the gains are
	// ignored and may be nil.
	QKNormNone
)

// RopeConfig describes the per-head query/key preparation of an attention
// layer (QKNormRope).
type RopeConfig struct {
	Heads     int     // query heads H
	KVHeads   int     // key/value heads (H must be a multiple)
	HeadDim   int     // D, per head
	RotaryDim int     // R ≤ D, even: leading dims rotated (NeoX rotate-half)
	Theta     float64 // base θ: inv_freq[i] = θ^(−2i/R)
	Eps       float32 // RMSNorm epsilon (inside the sqrt)
	Gated     bool    // q input holds per-head [query | gate] halves
	Norm      QKNorm  // the per-head norm: (1 + g), g, or none
}

// AttentionConfig describes a causal grouped-query attention.
type AttentionConfig struct {
	Heads   int     // query heads H
	KVHeads int     // key/value heads; query head h reads KV head h/(H/KVHeads)
	HeadDim int     // D for queries, keys and values
	Scale   float32 // score scale, usually 1/√D
}

// DeltaConfig describes a Gated DeltaNet recurrence (GatedDeltaRule).
type DeltaConfig struct {
	KeyHeads   int // H_k
	ValueHeads int // H_v, a multiple of H_k: value head h reads key head h/(H_v/H_k)
	KeyDim     int // d_k
	ValueDim   int // d_v
	// Chunk is the chunk length of the chunked (parallel) form; 0 selects the
	// token-by-token recurrent form. Both compute the same function.
	Chunk int
}

// PointerHead holds Kev's pointer head: two fp32 linear maps d → dp.
type PointerHead struct {
	Wq, Bq Tensor  // [dp, d], [dp]: query map, applied to the <decide> state
	Wk, Bk Tensor  // [dp, d], [dp]: key map, applied to each </opt> state
	Scale  float32 // 1/√dp
	// Temperature divides the logits when it is not 1 (0 is taken as 1).
	Temperature float32
}

// Backend is one implementation of the engine's operations. A Backend is
// safe for use by one goroutine at a time unless its documentation says
// otherwise. Errors name the operation and the offending argument; a shape
// mismatch is a *ShapeError.
type Backend interface {
	// Name returns the name the backend is registered under.
	Name() string

	// FromHost uploads a host tensor, keeping its element type (BF16 stays
	// BF16) unless the backend documents a conversion.
	FromHost(t *qwen35.Tensor) (Tensor, error)
	// FromFloat32 uploads float32 data of the given shape.
	FromFloat32(shape []int, data []float32) (Tensor, error)
	// FromBits uploads 16-bit data (dtype BF16 or F16) of the given shape.
	FromBits(dtype DType, shape []int, data []uint16) (Tensor, error)
	// ToHost copies a tensor back as float32 (16-bit types widened exactly).
	ToHost(t Tensor) ([]float32, error)
	// Free releases a tensor's storage early. Using a freed tensor is an
	// error; freeing nil is a no-op.
	Free(ts ...Tensor)

	// Embedding gathers rows of table [V, d]: out[t] = table[ids[t]], [T, d].
	Embedding(table Tensor, ids []int32) (Tensor, error)
	// MatMul returns x·wᵀ: x [M, K], w [N, K] (any DType) → [M, N].
	MatMul(x, w Tensor) (Tensor, error)
	// SplitCols cuts x [M, Σwidths] into column blocks [M, widths[i]].
	SplitCols(x Tensor, widths ...int) ([]Tensor, error)

	// RMSNorm normalises each row of x [M, n]:
	// y = x / sqrt(mean(x²) + eps) · g, with g = 1 + gain if plusOne else
	// gain; gain [n].
	RMSNorm(x, gain Tensor, eps float32, plusOne bool) (Tensor, error)
	// AddRMSNorm returns sum = x + residual and RMSNorm(sum, gain, eps,
	// plusOne); x, residual [M, n].
	AddRMSNorm(x, residual, gain Tensor, eps float32, plusOne bool) (sum, normed Tensor, err error)
	// MatMulAddRMSNorm returns sum = MatMul(x, w) + residual and
	// RMSNorm(sum, gain, eps, plusOne): the values of MatMul then
	// AddRMSNorm, in fewer launches where the backend can fuse them;
	// x [M, K], w [N, K], residual [M, N], gain [N].
	MatMulAddRMSNorm(x, w, residual, gain Tensor, eps float32, plusOne bool) (sum, normed Tensor, err error)
	// SwiGLU returns silu(g) ⊙ u for x [M, 2I] = [g | u] → [M, I], where
	// silu(z) = z·sigmoid(z).
	SwiGLU(x Tensor) (Tensor, error)
	// MatMulSwiGLU returns SwiGLU(MatMul(x, w)) for w [2I, K] = [w_g; w_u]:
	// the same values, in one kernel where the backend can fuse them.
	MatMulSwiGLU(x, w Tensor) (Tensor, error)
	// MatMulSplit returns SplitCols(MatMul(x, w), widths...) for w [Σwidths,
	// K]: the same bits, without the whole product where the backend can
	// write each block's columns in place.
	MatMulSplit(x, w Tensor, widths ...int) ([]Tensor, error)
	// SigmoidGate returns x ⊙ sigmoid(gate); x, gate [M, n].
	SigmoidGate(x, gate Tensor) (Tensor, error)
	// AddBias returns x + bias with bias [n] added to every row of x [M, n]
	// (in fp32, stored as x's activations are).
	AddBias(x, bias Tensor) (Tensor, error)

	// QKNormRope prepares attention queries and keys for tokens at the given
	// positions (one per row). q is [T, H·D], or [T, H·2D] when c.Gated with
	// head h's query in columns [2hD, 2hD+D) and its gate in [2hD+D, 2hD+2D).
	// k is [T, KV·D]. Each query and key head vector is RMS-normalised with
	// gain (1 + qGain) resp. (1 + kGain) (both [D]), or qGain resp. kGain
	// when c.Norm is QKNormPlain, or left as it is when c.Norm is
	// QKNormNone (the gains may then be nil); then its first R dims are
	// rotated: for j < R/2, with φ = fp32(fp32(pos) · inv_freq[j]),
	// inv_freq[j] = fp32(θ^(−2j/R)):
	// x'[j] = x[j]cos φ − x[j+R/2] sin φ, x'[j+R/2] = x[j+R/2] cos φ + x[j] sin φ.
	// Returns qOut [T, H·D], kOut [T, KV·D] and, when gated, gate [T, H·D]
	// (nil otherwise).
	QKNormRope(q, k, qGain, kGain Tensor, positions []int32, c RopeConfig) (qOut, kOut, gate Tensor, err error)
	// Attention is causal grouped-query softmax attention (fp32 softmax).
	// q [N, H·D]; k, v [N, KV·D] hold the new rows; kPrefix, vPrefix
	// [P, KV·D] (nil when P = 0) hold a cached prefix every segment sees
	// whole. Query t of a segment sees the prefix and its own segment's keys
	// up to and including t. Returns [N, H·D].
	Attention(q, k, v, kPrefix, vPrefix Tensor, lens []int, c AttentionConfig) (Tensor, error)

	// CausalConv1dSiLU applies a depthwise causal convolution and SiLU:
	// y[t, c] = silu(Σ_j w[c, j] · x[t−K+1+j, c]) for x [N, C], w [C, K].
	// Inputs before a segment's first row come from state [K−1, C] (the
	// previous K−1 inputs, oldest first), or are zero when state is nil.
	// Returns y [N, C] and, for a single segment, the new state [K−1, C]
	// (its last K−1 inputs); newState is nil for several segments.
	CausalConv1dSiLU(x, w, state Tensor, lens []int) (y, newState Tensor, err error)
	// DeltaGates computes the per-token, per-value-head gates of a Gated
	// DeltaNet: beta = sigmoid(b) and g = −exp(aLog) · softplus(a + dtBias)
	// with softplus(x) = x for x > 20. b, a [N, H_v]; aLog, dtBias [H_v].
	DeltaGates(b, a, aLog, dtBias Tensor) (beta, g Tensor, err error)
	// GatedDeltaRule runs the gated delta rule. qkv [N, 2·H_k·d_k + H_v·d_v]
	// is [Q | K | V] flat; g, beta [N, H_v]; state [H_v, d_k, d_v] fp32 or nil
	// (zero). Per segment and value head h (key head h/(H_v/H_k)), with
	// q̂ = q/sqrt(Σq² + 1e-6)/√d_k and k̂ = k/sqrt(Σk² + 1e-6):
	// S ← exp(g_t)·S; S ← S + k̂ (β_t (v_t − Sᵀk̂))ᵀ; o_t = Sᵀ q̂.
	// Returns o [N, H_v·d_v] and, for a single segment, the final state
	// (nil for several segments).
	GatedDeltaRule(qkv, g, beta, state Tensor, lens []int, c DeltaConfig) (o, newState Tensor, err error)
	// GatedRMSNorm normalises each d_v-wide head vector of o [N, H·d_v] and
	// gates it: y = o/sqrt(mean(o²) + eps) · w · silu(z); z [N, H·d_v],
	// w [d_v] (plain gain, not 1 + w).
	GatedRMSNorm(o, z, w Tensor, eps float32) (Tensor, error)

	// Pointer returns Kev's option probabilities for one question: with
	// hidden states h [N, d], query x_q = Wq·h[decide] + Bq and keys
	// x_j = Wk·h[opts[j]] + Bk, logit_j = (x_j·x_q)·Scale/Temperature,
	// softmax over j, all in fp32.
	Pointer(h Tensor, p *PointerHead, decide int, opts []int) ([]float32, error)
}

// FP8 is implemented by backends that compute matrix products with F8E4M3
// weights: w [N, K] quantized per row when it is uploaded
// (internal/fp8.QuantizeRows), x quantized per row by the product itself
// (internal/fp8.QuantizeActivations), products summed in float32 and scaled
// by both rows' scales (internal/fp8.MatMulFP8), results stored as for BF16
// weights. Callers detect it with a type assertion, or call FromFloat32FP8.
type FP8 interface {
	// CheckFP8 returns nil where the backend computes with F8E4M3
	// weights, and otherwise a *DTypeError saying why (a GPU without FP8
	// tensor cores, or without the kernels for them).
	CheckFP8() error
	// FromFloat32FP8 quantizes a float32 weight matrix [N, K] to F8E4M3,
	// one scale per row, and uploads it. A backend that cannot compute
	// with it where it runs (a GPU without FP8 tensor cores) returns a
	// *DTypeError; a shape its products do not take (the cuda backend's
	// need N a multiple of 8 and K of 16) a *ShapeError; a NaN or infinite
	// weight an error naming it.
	FromFloat32FP8(shape []int, data []float32) (Tensor, error)
}

// FromFloat32FP8 uploads a float32 weight matrix quantized to F8E4M3 on a
// backend that implements FP8, and returns a *DTypeError from any other.
func FromFloat32FP8(b Backend, shape []int, data []float32) (Tensor, error) {
	if f, ok := b.(FP8); ok {
		return f.FromFloat32FP8(shape, data)
	}
	return nil, noFP8(b)
}

// CheckFP8 returns nil where b computes with F8E4M3 weights (FP8.CheckFP8),
// and otherwise a *DTypeError saying why.
func CheckFP8(b Backend) error {
	if f, ok := b.(FP8); ok {
		return f.CheckFP8()
	}
	return noFP8(b)
}

func noFP8(b Backend) error {
	return &DTypeError{Backend: b.Name(), DType: F8E4M3, Reason: "this backend has no FP8 matrix products; " +
		"they need the cuda backend on an NVIDIA GPU of compute capability 9.0 (Hopper)"}
}

// DTypeError reports a storage type that a backend does not compute with,
// and why.
type DTypeError struct {
	Backend string // the backend's name
	DType   DType
	Reason  string
}

// Error names the backend, the type and the reason.
func (e *DTypeError) Error() string {
	return fmt.Sprintf("tensor: %s backend: %v: %s", e.Backend, e.DType, e.Reason)
}

// ShapeError reports an operand whose shape or type does not fit an
// operation.
type ShapeError struct {
	Op    string // operation, e.g. "MatMul"
	Arg   string // argument name, e.g. "w"
	Shape []int  // the shape received (nil if the tensor was nil)
	Want  string // what was expected, e.g. "[N, 64]"
}

// Error implements error.
func (e *ShapeError) Error() string {
	return fmt.Sprintf("tensor: %s: %s has shape %v, want %s", e.Op, e.Arg, e.Shape, e.Want)
}

// CheckMatrix returns a *ShapeError unless shape is 2-D with the given rows
// and cols (−1: any). Backends use it to validate their arguments alike.
func CheckMatrix(op, arg string, shape []int, rows, cols int) error {
	if len(shape) != 2 || (rows >= 0 && shape[0] != rows) || (cols >= 0 && shape[1] != cols) {
		return &ShapeError{Op: op, Arg: arg, Shape: shape, Want: Dims(rows, cols)}
	}
	return nil
}

// CheckElements returns a *ShapeError unless shape holds n elements (any
// rank).
func CheckElements(op, arg string, shape []int, n int) error {
	if Numel(shape) != n {
		return &ShapeError{Op: op, Arg: arg, Shape: shape, Want: fmt.Sprintf("%d elements", n)}
	}
	return nil
}

// Dims formats expected dimensions for a ShapeError: "[3, *]" where a
// dimension is −1 (any).
func Dims(ds ...int) string {
	s := "["
	for i, d := range ds {
		if i > 0 {
			s += ", "
		}
		if d < 0 {
			s += "*"
		} else {
			s += fmt.Sprint(d)
		}
	}
	return s + "]"
}

// SegmentFrom says where a segment of a batched operation starts from.
type SegmentFrom uint8

const (
	// FromZero starts the segment from nothing: no prefix keys and values,
	// zero convolution history, zero recurrent state.
	FromZero SegmentFrom = iota
	// FromPrefix continues prefix Index of the call's prefix list (cached
	// keys and values, or a cached convolution or recurrent state).
	FromPrefix
	// FromSegment continues segment Index of the same call, which must start
	// FromZero: attention sees that segment's keys and values whole before
	// its own; the convolution and the delta rule start from the state that
	// segment ends with.
	FromSegment
)

// String returns "FromZero", "FromPrefix" or "FromSegment".
func (f SegmentFrom) String() string {
	switch f {
	case FromZero:
		return "FromZero"
	case FromPrefix:
		return "FromPrefix"
	case FromSegment:
		return "FromSegment"
	}
	return fmt.Sprintf("SegmentFrom(%d)", uint8(f))
}

// Segment is one causal run of consecutive rows in a batched operation. The
// segments of a call cover its rows in order; each starts at position 0 of
// its own causal sequence after whatever it continues.
type Segment struct {
	Len   int         // rows, ≥ 0
	From  SegmentFrom // what the segment continues
	Index int         // the prefix (FromPrefix) or the segment (FromSegment) continued
	// Keep asks the convolution and the delta rule to return the state after
	// the segment's last row (attention ignores it).
	Keep bool
}

// PointerQuery is one question of a batched pointer head call: the rows of
// its <decide> token and of its </opt> tokens, in option order.
type PointerQuery struct {
	Decide int
	Opts   []int
}

// Batched is implemented by backends that run, in one call, segments that
// continue different prefixes: the rows of several requests (new states
// computed from nothing, and question rows continuing either a cached state
// or a state computed by an earlier segment of the same call) go through
// each operation together, so a pass reads every weight once. Callers detect
// it with a type assertion and fall back to the Backend's single-prefix
// operations when it is missing.
//
// Every method validates segs: lengths sum to the row count, Index is in
// range, and a FromSegment segment names a segment that starts FromZero.
// Results equal the single-prefix operations run segment by segment.
type Batched interface {
	// AttentionSegments is Attention with per-segment prefixes: a FromPrefix
	// segment sees kPrefixes[Index], vPrefixes[Index] ([P_i, KV·D]) before
	// its own rows, a FromSegment segment sees the rows of segment Index, a
	// FromZero segment only its own rows. q [N, H·D]; k, v [N, KV·D].
	// Returns [N, H·D].
	AttentionSegments(q, k, v Tensor, kPrefixes, vPrefixes []Tensor, segs []Segment, c AttentionConfig) (Tensor, error)
	// CausalConv1dSiLUSegments is CausalConv1dSiLU with per-segment
	// histories: states[Index] ([K−1, C]) for FromPrefix, the last K−1
	// inputs of segment Index (zero-padded) for FromSegment, zeros for
	// FromZero. kept has one entry per segment: the segment's final
	// [K−1, C] history when Keep, else nil.
	CausalConv1dSiLUSegments(x, w Tensor, states []Tensor, segs []Segment) (y Tensor, kept []Tensor, err error)
	// GatedDeltaRuleSegments is GatedDeltaRule with per-segment initial
	// states: states[Index] ([H_v, d_k, d_v] fp32) for FromPrefix, the final
	// state of segment Index for FromSegment, zero for FromZero. kept has one
	// entry per segment: the final state when Keep, else nil.
	GatedDeltaRuleSegments(qkv, g, beta Tensor, states []Tensor, segs []Segment, c DeltaConfig) (o Tensor, kept []Tensor, err error)
	// SliceRows returns a copy of rows [lo, hi) of a matrix x.
	SliceRows(x Tensor, lo, hi int) (Tensor, error)
	// Pointers runs Pointer for each query over the same hidden states h
	// [N, d] and returns their probabilities in order.
	Pointers(h Tensor, p *PointerHead, qs []PointerQuery) ([][]float32, error)
}

// Describer is implemented by backends that can name the hardware they run
// on, so that a benchmark's report says where it ran: the GPU's model name
// and capability, or the processor's kernels.
type Describer interface {
	Describe() string
}

// Chunked is implemented by backends whose batched operations give every row
// the same bits whichever rows share its call (the CPU backend's), so that a
// pass may run each layer in pieces of its rows, a long segment split across
// pieces, with the bits of the whole pass. A later part of a split segment
// continues the convolution history and delta rule state that its earlier
// part kept (Segment.Keep, then FromPrefix), which gives the same bits where
// the split falls on a multiple of the delta rule's chunk from the segment's
// first row; attention runs a piece's queries against every key of the
// layer (AttentionRows).
type Chunked interface {
	Batched
	// AttentionRows is AttentionSegments for some of its query rows:
	// segment i's rows lo[i]…hi[i]−1 (none when lo[i] = hi[i]), which q
	// holds in order, Σ(hi[i] − lo[i]) rows; k and v hold every row of every
	// segment, as for AttentionSegments. Each query row has the bits
	// AttentionSegments gives it. The backend may keep what it prepares from
	// k and v until k is freed, for the next call on them.
	AttentionRows(q, k, v Tensor, kPrefixes, vPrefixes []Tensor, segs []Segment, lo, hi []int, c AttentionConfig) (Tensor, error)
	// ConcatRows returns matrices of equal widths stacked by rows, in order.
	ConcatRows(xs ...Tensor) (Tensor, error)
}

// Trimmer is implemented by backends that keep freed memory pooled for
// reuse: Trim returns what the pool holds beyond the live tensors to the
// device. Callers call it when they go idle.
type Trimmer interface {
	Trim() error
}

// Runner is implemented by backends whose operations are cheaper when many
// of them run inside one call: a GPU backend whose device belongs to one OS
// thread runs f there, so the operations f makes skip the hand-over to that
// thread each would otherwise pay. Run returns f's error, or the backend's
// if f could not run. f must not wait for other goroutines that use the
// backend (they wait for f), and must not call runtime.Goexit (testing's
// Fatal). Operations from other goroutines wait until f returns.
type Runner interface {
	Run(f func() error) error
}

// Run runs f through b's Runner when b implements it, and calls f directly
// otherwise. Wrap a whole model pass in it.
func Run(b Backend, f func() error) error {
	if r, ok := b.(Runner); ok {
		return r.Run(f)
	}
	return f()
}
