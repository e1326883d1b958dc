package checkpoint

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/kevgo/kev/internal/qwen35"
)

// Kev's previous generation runs on attention-only bases: Qwen3 (kev-0.6b,
// kev-4b@qwen3, kev-8b) and Qwen2.5 (kev-0.5b). Their config.json is a flat
// Qwen3Config / Qwen2Config, in the form transformers 4 wrote it (top-level
// rope_theta, rope_scaling null) or the form transformers 5 writes
// (rope_parameters, layer_types).

// attnDefaults are the transformers class defaults of Qwen3Config and
// Qwen2Config for the fields a config.json may omit. head_dim has no Qwen2
// default: it is hidden_size / num_attention_heads there.
var attnDefaults = map[qwen35.Arch]map[string]int{
	qwen35.Qwen3: {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
		"num_attention_heads": 32, "head_dim": 128},
	qwen35.Qwen2: {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
		"num_attention_heads": 32},
}

// parseAttnConfig validates the config.json of an attention-only base
// (model_type "qwen3" or "qwen2"). Every layer is full attention with full
// rotary and no output gate; Qwen3 normalises queries and keys per head,
// Qwen2 adds q/k/v biases. Sliding-window attention and rope scaling are
// refused: Kev's bases use neither.
func parseAttnConfig(top jsonObj, arch qwen35.Arch) (qwen35.Config, error) {
	c := qwen35.Config{Arch: arch, PartialRotaryFactor: 1}
	defaults := attnDefaults[arch]
	posInt := func(name string, def int, hasDef bool) (int, error) {
		f, ok, err := top.num(name)
		if err != nil {
			return 0, err
		}
		if !ok {
			if !hasDef {
				return 0, top.err(name, "missing")
			}
			return def, nil
		}
		if f != math.Trunc(f) || f < 1 {
			return 0, top.err(name, "%v is not a positive integer", f)
		}
		lim, ok := maxDims[name]
		if !ok {
			lim = 1 << 31
		}
		if f > float64(lim) {
			return 0, top.err(name, "%v is over the limit of %d", f, lim)
		}
		return int(f), nil
	}
	var err error
	for _, f := range []struct {
		dst  *int
		name string
	}{
		{&c.HiddenSize, "hidden_size"}, {&c.NumLayers, "num_hidden_layers"}, {&c.IntermediateSize, "intermediate_size"},
		{&c.VocabSize, "vocab_size"}, {&c.NumHeads, "num_attention_heads"},
	} {
		def, has := defaults[f.name]
		if *f.dst, err = posInt(f.name, def, has); err != nil {
			return c, err
		}
	}
	if c.NumKVHeads, err = posInt("num_key_value_heads", c.NumHeads, true); err != nil {
		return c, err
	}
	hd, hasHD := defaults["head_dim"]
	if !hasHD {
		if c.HiddenSize%c.NumHeads != 0 {
			return c, top.err("num_attention_heads", "%d does not divide hidden_size %d (head_dim = hidden_size / heads)", c.NumHeads, c.HiddenSize)
		}
		hd, hasHD = c.HiddenSize/c.NumHeads, true
	}
	if c.HeadDim, err = posInt("head_dim", hd, hasHD); err != nil {
		return c, err
	}
	if c.HeadDim%2 != 0 {
		return c, top.err("head_dim", "%d is odd; rotary needs an even head_dim", c.HeadDim)
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return c, top.err("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKVHeads, c.NumHeads)
	}

	eps, ok, err := top.num("rms_norm_eps")
	if err != nil {
		return c, err
	}
	if !ok {
		eps = 1e-6
	}
	if !(eps > 0 && eps < 1) {
		return c, top.err("rms_norm_eps", "%v is not in (0, 1)", eps)
	}
	c.RMSNormEps = eps
	if c.TieWordEmbeddings, _, err = top.boolean("tie_word_embeddings"); err != nil {
		return c, err
	}
	if act, ok, err := top.str("hidden_act"); err != nil {
		return c, err
	} else if ok && act != "silu" {
		return c, top.err("hidden_act", "%q is not supported (want \"silu\")", act)
	}

	switch arch {
	case qwen35.Qwen2:
		c.QKVBias = true // Qwen2Attention: q/k/v always have biases, o_proj none
	case qwen35.Qwen3:
		bias, _, err := top.boolean("attention_bias")
		if err != nil {
			return c, err
		}
		c.QKVBias, c.OBias = bias, bias
	}

	if sw, _, err := top.boolean("use_sliding_window"); err != nil {
		return c, err
	} else if sw {
		return c, top.err("use_sliding_window", "true: sliding-window attention is not supported")
	}
	c.LayerTypes = make([]qwen35.LayerType, c.NumLayers)
	for i := range c.LayerTypes {
		c.LayerTypes[i] = qwen35.FullAttention
	}
	if top.has("layer_types") {
		var lts []string
		if err := json.Unmarshal(top.m["layer_types"], &lts); err != nil {
			return c, top.err("layer_types", "not a list of strings")
		}
		if len(lts) != c.NumLayers {
			return c, top.err("layer_types", "has %d entries, num_hidden_layers is %d", len(lts), c.NumLayers)
		}
		for i, s := range lts {
			if s != "full_attention" {
				return c, top.err(fmt.Sprintf("layer_types[%d]", i), "%q is not supported (want \"full_attention\")", s)
			}
		}
	}

	if err := parseAttnRope(top, &c); err != nil {
		return c, err
	}
	return c, nil
}

// parseAttnRope reads rope_theta at top level or in rope_parameters /
// rope_scaling; rope_type must be "default" and partial_rotary_factor, when
// given, 1.
func parseAttnRope(top jsonObj, c *qwen35.Config) error {
	places := []jsonObj{top}
	for _, name := range []string{"rope_parameters", "rope_scaling"} {
		sub, ok, err := top.sub(name)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		places = append(places, sub)
		for _, key := range []string{"rope_type", "type"} {
			if rt, ok, err := sub.str(key); err != nil {
				return err
			} else if ok && rt != "default" {
				return sub.err(key, "%q is not supported (want \"default\")", rt)
			}
		}
	}
	found := false
	for _, o := range places {
		theta, ok, err := o.num("rope_theta")
		if err != nil {
			return err
		}
		if ok && !found {
			if !(theta > 1) || math.IsInf(theta, 0) {
				return o.err("rope_theta", "%v is not a valid base", theta)
			}
			c.RopeTheta, found = theta, true
		}
		prf, ok, err := o.num("partial_rotary_factor")
		if err != nil {
			return err
		}
		if ok && prf != 1 {
			return o.err("partial_rotary_factor", "%v: this base rotates the whole head (want 1)", prf)
		}
	}
	if !found {
		return top.err("rope_theta", "missing (looked at top level, rope_parameters and rope_scaling)")
	}
	return nil
}

// attnShapes lists every tensor of an attention-only text model with config
// c, by canonical name, with its shape.
func attnShapes(c *qwen35.Config) map[string][]int {
	d, inter, hd := c.HiddenSize, c.IntermediateSize, c.HeadDim
	m := map[string][]int{
		"embed_tokens.weight": {c.VocabSize, d},
		"norm.weight":         {d},
	}
	for i := range c.NumLayers {
		p := layerName(i)
		a := p + "self_attn."
		m[p+"input_layernorm.weight"] = []int{d}
		m[p+"post_attention_layernorm.weight"] = []int{d}
		m[p+"mlp.gate_proj.weight"] = []int{inter, d}
		m[p+"mlp.up_proj.weight"] = []int{inter, d}
		m[p+"mlp.down_proj.weight"] = []int{d, inter}
		m[a+"q_proj.weight"] = []int{c.NumHeads * hd, d}
		m[a+"k_proj.weight"] = []int{c.NumKVHeads * hd, d}
		m[a+"v_proj.weight"] = []int{c.NumKVHeads * hd, d}
		m[a+"o_proj.weight"] = []int{d, c.NumHeads * hd}
		if c.QKNorm() {
			m[a+"q_norm.weight"] = []int{hd}
			m[a+"k_norm.weight"] = []int{hd}
		}
		if c.QKVBias {
			m[a+"q_proj.bias"] = []int{c.NumHeads * hd}
			m[a+"k_proj.bias"] = []int{c.NumKVHeads * hd}
			m[a+"v_proj.bias"] = []int{c.NumKVHeads * hd}
		}
		if c.OBias {
			m[a+"o_proj.bias"] = []int{d}
		}
	}
	return m
}
