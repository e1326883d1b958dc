// Package checkpoint loads a Kev checkpoint from disk: the base model's
// config.json and safetensors weights, the PEFT LoRA adapter, and head.pt
// (the pointer head and its metadata). It merges the adapter into the base
// weights in fp32 (W' = fp32(W) + s·(B@A), rounded once when the caller asks
// for bf16) and checks every tensor's name and shape against the config.
//
// It reads files only: it knows nothing of the engine that runs the model.
package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/kevgo/kev/internal/quote"
	"github.com/kevgo/kev/internal/qwen35"
)

// ConfigError reports a missing, malformed or unsupported field of a JSON
// config or of head.pt. Field is the dotted path ("text_config.head_dim").
type ConfigError struct {
	File   string
	Field  string
	Reason string
}

// Error describes the failure and where it happened.
func (e *ConfigError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("checkpoint: %s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("checkpoint: %s: %s: %s", e.File, e.Field, e.Reason)
}

// Qwen3_5TextConfig defaults (transformers), used for fields a config.json
// omits because they equal the class default.
var textDefaults = map[string]any{
	"vocab_size": 248320, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 32,
	"num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6,
	"tie_word_embeddings": false, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
	"linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
	"full_attention_interval": 4, "partial_rotary_factor": 0.25, "attn_output_gate": true,
}

// maxDims bounds every size in a config.json before anything proportional to
// it is allocated. They are generous for 27B-class models (64 layers, hidden
// 5120, vocabulary 248,320, 24 heads of 256) and far below what would make
// the per-layer bookkeeping itself a danger. A field over its bound is
// refused with a *ConfigError naming it.
var maxDims = map[string]int{
	"num_hidden_layers": 1024, "hidden_size": 65536, "intermediate_size": 1 << 20, "vocab_size": 4 << 20,
	"num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 4096,
	"linear_num_key_heads": 1024, "linear_num_value_heads": 1024, "linear_key_head_dim": 4096,
	"linear_value_head_dim": 4096, "linear_conv_kernel_dim": 64, "full_attention_interval": 1024,
}

// maxConfigBytes bounds the size of a config.json (real ones are a few KB).
const maxConfigBytes = 16 << 20

// jsonObj is a decoded JSON object with the path it came from, for errors.
type jsonObj struct {
	file, path string
	m          map[string]json.RawMessage
}

func (o jsonObj) field(name string) string {
	if o.path == "" {
		return name
	}
	return o.path + "." + name
}

func (o jsonObj) err(name, format string, args ...any) error {
	return &ConfigError{File: o.file, Field: o.field(name), Reason: fmt.Sprintf(format, args...)}
}

func (o jsonObj) has(name string) bool {
	v, ok := o.m[name]
	return ok && string(v) != "null"
}

func (o jsonObj) sub(name string) (jsonObj, bool, error) {
	if !o.has(name) {
		return jsonObj{}, false, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(o.m[name], &m); err != nil {
		return jsonObj{}, false, o.err(name, "not an object")
	}
	return jsonObj{file: o.file, path: o.field(name), m: m}, true, nil
}

func (o jsonObj) str(name string) (string, bool, error) {
	if !o.has(name) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(o.m[name], &s); err != nil {
		return "", false, o.err(name, "not a string")
	}
	return s, true, nil
}

func (o jsonObj) num(name string) (float64, bool, error) {
	if !o.has(name) {
		return 0, false, nil
	}
	var f float64
	if err := json.Unmarshal(o.m[name], &f); err != nil {
		return 0, false, o.err(name, "not a number")
	}
	return f, true, nil
}

func (o jsonObj) boolean(name string) (bool, bool, error) {
	if !o.has(name) {
		return false, false, nil
	}
	var b bool
	if err := json.Unmarshal(o.m[name], &b); err != nil {
		return false, false, o.err(name, "not a boolean")
	}
	return b, true, nil
}

// posInt reads a positive integer, falling back to the default.
func (o jsonObj) posInt(name string) (int, error) {
	f, ok, err := o.num(name)
	if err != nil {
		return 0, err
	}
	if !ok {
		d, has := textDefaults[name]
		if !has {
			return 0, o.err(name, "missing")
		}
		return d.(int), nil
	}
	if f != math.Trunc(f) || f < 1 {
		return 0, o.err(name, "%v is not a positive integer", f)
	}
	lim, ok := maxDims[name]
	if !ok {
		lim = 1 << 31
	}
	if f > float64(lim) {
		return 0, o.err(name, "%v is over the limit of %d", f, lim)
	}
	return int(f), nil
}

// LoadConfig reads and validates a Qwen3.5 config.json.
func LoadConfig(path string) (qwen35.Config, error) {
	b, err := readSmall(path, maxConfigBytes)
	if err != nil {
		return qwen35.Config{}, err
	}
	return ParseConfig(path, b)
}

// readSmall reads a file that may hold at most max bytes; a larger one is
// refused with a *ConfigError before it is read.
func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &ConfigError{File: path, Reason: fmt.Sprintf("larger than the %d-byte limit for this file", max)}
	}
	return b, nil
}

// ParseConfig validates a Qwen3.5 config.json (model_type "qwen3_5", fields
// under text_config, or "qwen3_5_text", flat), or that of an attention-only
// base ("qwen3", "qwen2"; see parseAttnConfig), and returns the text model's
// hyperparameters. file names the file in errors. Fields the file omits take
// the transformers class defaults; rope_theta is required, at top level or
// inside rope_parameters / rope_scaling.
func ParseConfig(file string, data []byte) (qwen35.Config, error) {
	var c qwen35.Config
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return c, &ConfigError{File: file, Reason: "bad JSON: " + quote.Error(err)}
	}
	top := jsonObj{file: file, m: m}
	mt, _, err := top.str("model_type")
	if err != nil {
		return c, err
	}
	mt = familyModelType(mt)
	text := top
	switch mt {
	case "qwen3_5":
		sub, ok, err := top.sub("text_config")
		if err != nil {
			return c, err
		}
		if !ok {
			return c, top.err("text_config", "missing (model_type qwen3_5 keeps the text model's fields there)")
		}
		text = sub
		if tmt, ok, err := text.str("model_type"); err != nil {
			return c, err
		} else if ok && familyModelType(tmt) != "qwen3_5_text" {
			return c, text.err("model_type", "%s, want \"qwen3_5_text\"", quote.String(tmt))
		}
	case "qwen3_5_text":
	case "qwen3":
		return parseAttnConfig(top, qwen35.Qwen3)
	case "qwen2":
		return parseAttnConfig(top, qwen35.Qwen2)
	case "":
		return c, top.err("model_type", "missing")
	default:
		return c, top.err("model_type", "%s is not a supported base (want \"qwen3_5\", \"qwen3_5_text\", \"qwen3\" or \"qwen2\")", quote.String(mt))
	}

	ints := []struct {
		dst  *int
		name string
	}{
		{&c.HiddenSize, "hidden_size"}, {&c.NumLayers, "num_hidden_layers"}, {&c.IntermediateSize, "intermediate_size"},
		{&c.VocabSize, "vocab_size"}, {&c.NumHeads, "num_attention_heads"}, {&c.NumKVHeads, "num_key_value_heads"},
		{&c.HeadDim, "head_dim"}, {&c.LinearNumKeyHeads, "linear_num_key_heads"},
		{&c.LinearNumValueHeads, "linear_num_value_heads"}, {&c.LinearKeyHeadDim, "linear_key_head_dim"},
		{&c.LinearValueHeadDim, "linear_value_head_dim"}, {&c.LinearConvKernel, "linear_conv_kernel_dim"},
	}
	for _, f := range ints {
		if *f.dst, err = text.posInt(f.name); err != nil {
			return c, err
		}
	}
	eps, ok, err := text.num("rms_norm_eps")
	if err != nil {
		return c, err
	}
	if !ok {
		eps = textDefaults["rms_norm_eps"].(float64)
	}
	if !(eps > 0 && eps < 1) {
		return c, text.err("rms_norm_eps", "%v is not in (0, 1)", eps)
	}
	c.RMSNormEps = eps

	// tie_word_embeddings: the text config's, else the wrapper's, else false.
	c.TieWordEmbeddings = false
	for _, o := range []jsonObj{text, top} {
		if v, ok, err := o.boolean("tie_word_embeddings"); err != nil {
			return c, err
		} else if ok {
			c.TieWordEmbeddings = v
			break
		}
	}
	c.AttnOutputGate = true
	if v, ok, err := text.boolean("attn_output_gate"); err != nil {
		return c, err
	} else if ok {
		c.AttnOutputGate = v
	}

	if err := parseRope(text, &c); err != nil {
		return c, err
	}

	// Layer schedule.
	if text.has("layer_types") {
		var lts []string
		if err := json.Unmarshal(text.m["layer_types"], &lts); err != nil {
			return c, text.err("layer_types", "not a list of strings")
		}
		if len(lts) != c.NumLayers {
			return c, text.err("layer_types", "has %d entries, num_hidden_layers is %d", len(lts), c.NumLayers)
		}
		c.LayerTypes = make([]qwen35.LayerType, len(lts))
		for i, s := range lts {
			switch s {
			case "linear_attention":
				c.LayerTypes[i] = qwen35.LinearAttention
			case "full_attention":
				c.LayerTypes[i] = qwen35.FullAttention
			default:
				return c, text.err(fmt.Sprintf("layer_types[%d]", i), "unknown layer type %s", quote.String(s))
			}
		}
	} else {
		interval, err := text.posInt("full_attention_interval")
		if err != nil {
			return c, err
		}
		c.LayerTypes = make([]qwen35.LayerType, c.NumLayers)
		for i := range c.LayerTypes {
			if (i+1)%interval == 0 {
				c.LayerTypes[i] = qwen35.FullAttention
			}
		}
	}

	// Divisibility.
	if c.NumHeads%c.NumKVHeads != 0 {
		return c, text.err("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKVHeads, c.NumHeads)
	}
	if c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 {
		return c, text.err("linear_num_key_heads", "%d does not divide linear_num_value_heads %d", c.LinearNumKeyHeads, c.LinearNumValueHeads)
	}
	return c, nil
}

// parseRope finds rope_theta and partial_rotary_factor at top level or in
// rope_parameters / rope_scaling (transformers 5 nests them).
func parseRope(text jsonObj, c *qwen35.Config) error {
	places := []jsonObj{text}
	for _, name := range []string{"rope_parameters", "rope_scaling"} {
		sub, ok, err := text.sub(name)
		if err != nil {
			return err
		}
		if ok {
			places = append(places, sub)
			if rt, ok, err := sub.str("rope_type"); err != nil {
				return err
			} else if ok && rt != "default" {
				return sub.err("rope_type", "%s is not supported (want \"default\")", quote.String(rt))
			}
		}
	}
	find := func(name string) (float64, jsonObj, bool, error) {
		for _, o := range places {
			v, ok, err := o.num(name)
			if err != nil {
				return 0, o, false, err
			}
			if ok {
				return v, o, true, nil
			}
		}
		return 0, text, false, nil
	}
	theta, o, ok, err := find("rope_theta")
	if err != nil {
		return err
	}
	if !ok {
		return text.err("rope_theta", "missing (looked at top level, rope_parameters and rope_scaling)")
	}
	if !(theta > 1) || math.IsInf(theta, 0) {
		return o.err("rope_theta", "%v is not a valid base", theta)
	}
	c.RopeTheta = theta
	prf, o, ok, err := find("partial_rotary_factor")
	if err != nil {
		return err
	}
	if !ok {
		prf = textDefaults["partial_rotary_factor"].(float64)
	}
	if !(prf > 0 && prf <= 1) {
		return o.err("partial_rotary_factor", "%v is not in (0, 1]", prf)
	}
	c.PartialRotaryFactor = prf
	if rd := c.RotaryDim(); rd < 2 || rd%2 != 0 {
		return o.err("partial_rotary_factor", "gives %d rotary dims of head_dim %d; want a positive even number", rd, c.HeadDim)
	}
	return nil
}

// layerName returns "layers.<i>." for canonical names.
func layerName(i int) string { return fmt.Sprintf("layers.%d.", i) }

// ExpectedShapes lists every tensor a Qwen3.5 text model with config c
// has, by canonical name, with its shape.
func ExpectedShapes(c *qwen35.Config) map[string][]int {
	if c.Arch != qwen35.Qwen35 {
		return attnShapes(c)
	}
	d, inter := c.HiddenSize, c.IntermediateSize
	m := map[string][]int{
		"embed_tokens.weight": {c.VocabSize, d},
		"norm.weight":         {d},
	}
	qOut := c.NumHeads * c.HeadDim
	if c.AttnOutputGate {
		qOut *= 2
	}
	for i, lt := range c.LayerTypes {
		p := layerName(i)
		m[p+"input_layernorm.weight"] = []int{d}
		m[p+"post_attention_layernorm.weight"] = []int{d}
		m[p+"mlp.gate_proj.weight"] = []int{inter, d}
		m[p+"mlp.up_proj.weight"] = []int{inter, d}
		m[p+"mlp.down_proj.weight"] = []int{d, inter}
		if lt == qwen35.FullAttention {
			a := p + "self_attn."
			m[a+"q_proj.weight"] = []int{qOut, d}
			m[a+"k_proj.weight"] = []int{c.NumKVHeads * c.HeadDim, d}
			m[a+"v_proj.weight"] = []int{c.NumKVHeads * c.HeadDim, d}
			m[a+"o_proj.weight"] = []int{d, c.NumHeads * c.HeadDim}
			m[a+"q_norm.weight"] = []int{c.HeadDim}
			m[a+"k_norm.weight"] = []int{c.HeadDim}
			continue
		}
		l := p + "linear_attn."
		m[l+"in_proj_qkv.weight"] = []int{c.ConvDim(), d}
		m[l+"in_proj_z.weight"] = []int{c.LinearValueDim(), d}
		m[l+"in_proj_b.weight"] = []int{c.LinearNumValueHeads, d}
		m[l+"in_proj_a.weight"] = []int{c.LinearNumValueHeads, d}
		m[l+"conv1d.weight"] = []int{c.ConvDim(), 1, c.LinearConvKernel}
		m[l+"A_log"] = []int{c.LinearNumValueHeads}
		m[l+"dt_bias"] = []int{c.LinearNumValueHeads}
		m[l+"norm.weight"] = []int{c.LinearValueHeadDim}
		m[l+"out_proj.weight"] = []int{d, c.LinearValueDim()}
	}
	return m
}

// KeepsF32 reports whether the tensor with canonical name stays float32 in
// a bf16 model: A_log, dt_bias, every norm gain and the attention biases.
// Everything else (the projection and MLP matrices, the embedding, the conv
// weights) is bf16.
func KeepsF32(name string) bool {
	return strings.HasSuffix(name, ".A_log") || strings.HasSuffix(name, ".dt_bias") ||
		strings.HasSuffix(name, "norm.weight") || strings.HasSuffix(name, "_proj.bias")
}

// productWeights are the layer tensors (the part of a canonical name after "layers.<i>.") that are the weight w
// of a matrix product: what ProductWeight reports.
var productWeights = map[string]bool{
	"self_attn.q_proj.weight": true, "self_attn.k_proj.weight": true, "self_attn.v_proj.weight": true,
	"self_attn.o_proj.weight":        true,
	"linear_attn.in_proj_qkv.weight": true, "linear_attn.in_proj_z.weight": true,
	"linear_attn.in_proj_b.weight": true, "linear_attn.in_proj_a.weight": true, "linear_attn.out_proj.weight": true,
	"mlp.gate_proj.weight": true, "mlp.up_proj.weight": true, "mlp.down_proj.weight": true,
}

// ProductWeight reports whether the tensor with canonical name is the weight of one of a decoder layer's matrix
// products: the attention q_proj (its output gate included), k_proj, v_proj and o_proj, the Gated DeltaNet
// in_proj_qkv, in_proj_z, in_proj_b, in_proj_a and out_proj, the MLP gate_proj, up_proj and down_proj. The
// embedding, the norms, the conv weights, A_log, dt_bias and the biases are not.
func ProductWeight(name string) bool {
	p, ok := layerPrefix(name)
	return ok && productWeights[name[len(p):]]
}
