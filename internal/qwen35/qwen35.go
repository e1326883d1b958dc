// Package qwen35 describes a Qwen3.5 text model as plain data: its
// hyperparameters (Config) and its parameters on the host (Weights), by
// canonical name. Loaders fill it; the engine reads it. It imports neither.
//
// Canonical tensor names drop the checkpoint's "model.language_model." or
// "model." prefix: "embed_tokens.weight", "norm.weight",
// "layers.3.self_attn.q_proj.weight", "layers.0.linear_attn.A_log", ...
package qwen35

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/internal/half"
)

// LayerType says which token mixer a decoder layer uses.
type LayerType uint8

const (
	// LinearAttention is a Gated DeltaNet layer ("linear_attention").
	LinearAttention LayerType = iota
	// FullAttention is a gated softmax attention layer ("full_attention").
	FullAttention
)

// String returns the name config.json uses for t.
func (t LayerType) String() string {
	switch t {
	case LinearAttention:
		return "linear_attention"
	case FullAttention:
		return "full_attention"
	}
	return fmt.Sprintf("LayerType(%d)", uint8(t))
}

// Arch is the model family a Config describes. The zero value is Qwen3.5.
type Arch uint8

const (
	// Qwen35 is the hybrid Qwen3.5 text model: Gated DeltaNet and gated
	// attention layers, (1+w) RMSNorm gains (model_type qwen3_5).
	Qwen35 Arch = iota
	// Qwen3 is the attention-only Qwen3 model: q/k RMSNorm per head, plain w
	// RMSNorm gains, full rotary, no output gate (model_type qwen3).
	Qwen3
	// Qwen2 is the attention-only Qwen2/Qwen2.5 model: q/k/v biases, no q/k
	// norm, plain w RMSNorm gains, full rotary (model_type qwen2).
	Qwen2
)

// String returns the config.json model_type of a.
func (a Arch) String() string {
	switch a {
	case Qwen35:
		return "qwen3_5"
	case Qwen3:
		return "qwen3"
	case Qwen2:
		return "qwen2"
	}
	return fmt.Sprintf("Arch(%d)", uint8(a))
}

// Config holds the text model's hyperparameters (config.json's text_config).
type Config struct {
	// Arch is the model family; it decides the norm gains, the q/k norm and
	// the attention biases (see Arch's constants).
	Arch Arch
	// QKVBias: q_proj, k_proj and v_proj have biases (Qwen2; Qwen3 with
	// attention_bias). OBias: o_proj has one (Qwen3 with attention_bias).
	QKVBias, OBias bool

	HiddenSize        int         // d
	NumLayers         int         // num_hidden_layers
	IntermediateSize  int         // MLP width
	LayerTypes        []LayerType // one per layer; derived from FullAttentionInterval when absent
	VocabSize         int
	RMSNormEps        float64
	TieWordEmbeddings bool

	// Gated attention.
	NumHeads            int     // num_attention_heads
	NumKVHeads          int     // num_key_value_heads
	HeadDim             int     // head_dim (explicit; not HiddenSize/NumHeads)
	RopeTheta           float64 // rope_theta
	PartialRotaryFactor float64 // rotary dims = int(HeadDim * PartialRotaryFactor)
	AttnOutputGate      bool

	// Gated DeltaNet.
	LinearNumKeyHeads   int // H_k
	LinearNumValueHeads int // H_v
	LinearKeyHeadDim    int // d_k
	LinearValueHeadDim  int // d_v
	LinearConvKernel    int // depthwise conv width (4)
}

// Hybrid reports whether the model has Gated DeltaNet layers. Kev runs a
// hybrid model in the row form (each question a causal row continuing the
// state) and an attention-only one in the packed block-causal form; the two
// compute the same function.
func (c *Config) Hybrid() bool {
	for _, t := range c.LayerTypes {
		if t == LinearAttention {
			return true
		}
	}
	return false
}

// PlusOneNorm reports whether the RMSNorm gains are applied as (1 + w)
// (Qwen3.5) rather than w (Qwen3, Qwen2).
func (c *Config) PlusOneNorm() bool { return c.Arch == Qwen35 }

// QKNorm reports whether attention queries and keys are RMS-normalised per
// head (q_norm, k_norm): Qwen3.5 and Qwen3, not Qwen2.
func (c *Config) QKNorm() bool { return c.Arch != Qwen2 }

// RotaryDim is the number of leading head dimensions that RoPE rotates.
func (c *Config) RotaryDim() int { return int(float64(c.HeadDim) * c.PartialRotaryFactor) }

// LinearKeyDim is H_k·d_k, the width of the DeltaNet q and k blocks.
func (c *Config) LinearKeyDim() int { return c.LinearNumKeyHeads * c.LinearKeyHeadDim }

// LinearValueDim is H_v·d_v, the width of the DeltaNet v block and of z.
func (c *Config) LinearValueDim() int { return c.LinearNumValueHeads * c.LinearValueHeadDim }

// ConvDim is the number of DeltaNet conv channels: 2·key dim + value dim.
func (c *Config) ConvDim() int { return 2*c.LinearKeyDim() + c.LinearValueDim() }

// DType is the element type of a host tensor.
type DType uint8

const (
	// F32 is IEEE binary32.
	F32 DType = iota
	// BF16 is bfloat16, stored as raw uint16 bits.
	BF16
	// F16 is IEEE binary16, stored as raw uint16 bits.
	F16
)

// String returns "F32", "BF16" or "F16".
func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Tensor is a dense row-major host tensor. Exactly one of F32, BF16 and F16
// holds the data, as DType says; len = product of Shape.
type Tensor struct {
	Shape []int
	DType DType
	F32   []float32
	BF16  []uint16
	F16   []uint16 // IEEE binary16 bits (DType F16)
	// Mapped says the data is read-only memory that outlives the engine (a weights file mapped into memory): a
	// backend may keep a reference to it instead of copying. Writing to it faults.
	Mapped bool
}

// Len is the number of elements, the product of Shape.
func (t *Tensor) Len() int {
	n := 1
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// Weights is a text model's parameters by canonical name, with its config.
// Linear weights use PyTorch's [out_features, in_features] layout.
type Weights struct {
	Config  Config
	Tensors map[string]*Tensor
	// Source, when not nil, supplies the tensors Tensors lacks (a streaming load): Lookup fetches them from it,
	// and the engine calls Release once it has copied each.
	Source Source
}

// TensorError says a named tensor is missing or does not have the shape or
// data the model expects.
type TensorError struct {
	Name   string
	Shape  []int // the tensor's shape (nil when missing)
	Want   []int // the expected shape
	Reason string
}

// Error names the tensor and says what is wrong with it.
func (e *TensorError) Error() string {
	return fmt.Sprintf("tensor %q: %s", e.Name, e.Reason)
}

// Lookup returns the tensor called name, checking that it has exactly the
// given shape and that its data matches its dtype and shape.
func (w *Weights) Lookup(name string, shape ...int) (*Tensor, error) {
	t, ok := w.Tensors[name]
	if (!ok || t == nil) && w.Source != nil {
		var err error
		if t, ok, err = w.Source.Fetch(name); err != nil {
			return nil, err
		}
	}
	if !ok || t == nil {
		return nil, &TensorError{Name: name, Want: shape, Reason: "missing"}
	}
	same := len(t.Shape) == len(shape)
	for i := 0; same && i < len(shape); i++ {
		same = t.Shape[i] == shape[i]
	}
	if !same {
		return nil, &TensorError{Name: name, Shape: t.Shape, Want: shape, Reason: fmt.Sprintf("has shape %v, want %v", t.Shape, shape)}
	}
	if (t.DType == F32 && len(t.F32) != t.Len()) || (t.DType == BF16 && len(t.BF16) != t.Len()) ||
		(t.DType == F16 && len(t.F16) != t.Len()) || (t.DType != F32 && t.DType != BF16 && t.DType != F16) {
		return nil, &TensorError{Name: name, Shape: t.Shape, Want: shape, Reason: fmt.Sprintf("%v data does not match shape %v", t.DType, t.Shape)}
	}
	return t, nil
}

// Float32s returns t's values as float32: F32 data itself, BF16 and F16 widened exactly
// into a new slice.
func (t *Tensor) Float32s() []float32 {
	if t.DType == F32 {
		return t.F32
	}
	if t.DType == F16 {
		out := make([]float32, len(t.F16))
		for i, h := range t.F16 {
			out[i] = half.F16ToF32(h)
		}
		return out
	}
	out := make([]float32, len(t.BF16))
	for i, h := range t.BF16 {
		out[i] = math.Float32frombits(uint32(h) << 16)
	}
	return out
}

// ConcatRows stacks 2-D tensors with equal column counts, in order: BF16 (or
// F16) when all of them are, F32 otherwise.
func ConcatRows(ts ...*Tensor) *Tensor {
	rows, cols, same := 0, ts[0].Shape[1], ts[0].DType != F32
	for _, t := range ts {
		rows += t.Shape[0]
		same = same && t.DType == ts[0].DType
	}
	out := &Tensor{Shape: []int{rows, cols}}
	if same && ts[0].DType == BF16 {
		out.DType = BF16
		for _, t := range ts {
			out.BF16 = append(out.BF16, t.BF16...)
		}
		return out
	}
	if same && ts[0].DType == F16 {
		out.DType = F16
		for _, t := range ts {
			out.F16 = append(out.F16, t.F16...)
		}
		return out
	}
	out.DType = F32
	for _, t := range ts {
		out.F32 = append(out.F32, t.Float32s()...)
	}
	return out
}
