// Package qwen35 describes a Qwen3.5 text model as plain data: its
// hyperparameters (Config) and its parameters on the host (Weights), by
// canonical name. Loaders fill it; the engine reads it. It imports neither.
//
// Canonical tensor names drop the checkpoint's "model.language_model." or
// "model." prefix: "embed_tokens.weight", "norm.weight",
// "layers.3.self_attn.q_proj.weight", "layers.0.linear_attn.A_log", ...
package qwen35

import "fmt"

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

// Config holds the text model's hyperparameters (config.json's text_config).
type Config struct {
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
)

// String returns "F32" or "BF16".
func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case BF16:
		return "BF16"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Tensor is a dense row-major host tensor. Exactly one of F32 and BF16 holds
// the data, as DType says; len = product of Shape.
type Tensor struct {
	Shape []int
	DType DType
	F32   []float32
	BF16  []uint16
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
}
