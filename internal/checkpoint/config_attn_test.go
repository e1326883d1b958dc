package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
)

// qwen3Released is config.json of a released Qwen3 base (Qwen3-4B-Base's
// fields, transformers 4.51 form).
const qwen3Released = `{"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
 "bos_token_id": 151643, "eos_token_id": 151643, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2560,
 "initializer_range": 0.02, "intermediate_size": 9728, "max_position_embeddings": 32768, "max_window_layers": 36,
 "model_type": "qwen3", "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
 "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
 "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
 "use_sliding_window": false, "vocab_size": 151936}`

// qwen2Released is config.json of a released Qwen2.5 base (Qwen2.5-0.5B's
// fields).
const qwen2Released = `{"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
 "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
 "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
 "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
 "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
 "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}`

func allFull(n int) []qwen35.LayerType {
	lt := make([]qwen35.LayerType, n)
	for i := range lt {
		lt[i] = qwen35.FullAttention
	}
	return lt
}

func TestParseAttnConfig(t *testing.T) {
	fixture := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", name, "base", "config.json"))
		if err != nil {
			t.Skipf("fixture %s: %v", name, err)
		}
		return string(b)
	}
	tests := []struct {
		name string
		json string
		want qwen35.Config
	}{
		{"Qwen3-4B-Base", qwen3Released, qwen35.Config{Arch: qwen35.Qwen3, HiddenSize: 2560, NumLayers: 36,
			IntermediateSize: 9728, VocabSize: 151936, RMSNormEps: 1e-6, TieWordEmbeddings: true, NumHeads: 32,
			NumKVHeads: 8, HeadDim: 128, RopeTheta: 1e6, PartialRotaryFactor: 1, LayerTypes: allFull(36)}},
		{"Qwen2.5-0.5B", qwen2Released, qwen35.Config{Arch: qwen35.Qwen2, QKVBias: true, HiddenSize: 896, NumLayers: 24,
			IntermediateSize: 4864, VocabSize: 151936, RMSNormEps: 1e-6, TieWordEmbeddings: true, NumHeads: 14,
			NumKVHeads: 2, HeadDim: 64, RopeTheta: 1e6, PartialRotaryFactor: 1, LayerTypes: allFull(24)}},
		{"tiny-qwen3 (released form)", fixture("tiny-qwen3"), qwen35.Config{Arch: qwen35.Qwen3, HiddenSize: 32,
			NumLayers: 3, IntermediateSize: 64, VocabSize: 704, RMSNormEps: 1e-6, NumHeads: 4, NumKVHeads: 2,
			HeadDim: 16, RopeTheta: 1e6, PartialRotaryFactor: 1, LayerTypes: allFull(3)}},
		{"tiny-qwen2 (transformers 5 form)", fixture("tiny-qwen2"), qwen35.Config{Arch: qwen35.Qwen2, QKVBias: true,
			HiddenSize: 32, NumLayers: 2, IntermediateSize: 80, VocabSize: 704, RMSNormEps: 1e-6,
			TieWordEmbeddings: true, NumHeads: 2, NumKVHeads: 1, HeadDim: 16, RopeTheta: 1e4,
			PartialRotaryFactor: 1, LayerTypes: allFull(2)}},
		{"qwen3 attention_bias", `{"model_type": "qwen3", "attention_bias": true, "hidden_size": 64,
			"num_attention_heads": 4, "head_dim": 32, "num_hidden_layers": 1, "rope_parameters": {"rope_type": "default",
			"rope_theta": 5e6}}`, qwen35.Config{Arch: qwen35.Qwen3, QKVBias: true, OBias: true, HiddenSize: 64,
			NumLayers: 1, IntermediateSize: 22016, VocabSize: 151936, RMSNormEps: 1e-6, NumHeads: 4, NumKVHeads: 4,
			HeadDim: 32, RopeTheta: 5e6, PartialRotaryFactor: 1, LayerTypes: allFull(1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConfig("config.json", []byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if got.Hybrid() || got.PlusOneNorm() || got.QKNorm() != (tc.want.Arch == qwen35.Qwen3) || got.RotaryDim() != got.HeadDim {
				t.Errorf("derived: hybrid %v, (1+w) %v, q/k norm %v, rotary %d", got.Hybrid(), got.PlusOneNorm(), got.QKNorm(), got.RotaryDim())
			}
		})
	}
}

func TestParseAttnConfigErrors(t *testing.T) {
	base := `"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "num_hidden_layers": 2`
	tests := []struct {
		name, json, field, reason string
	}{
		{"no theta", `{` + base + `}`, "rope_theta", "missing"},
		{"sliding window", `{` + base + `, "rope_theta": 1e6, "use_sliding_window": true}`, "use_sliding_window", "not supported"},
		{"sliding layer", `{` + base + `, "rope_theta": 1e6, "layer_types": ["full_attention", "sliding_attention"]}`, "layer_types[1]", "sliding_attention"},
		{"layer count", `{` + base + `, "rope_theta": 1e6, "layer_types": ["full_attention"]}`, "layer_types", "1 entries"},
		{"yarn", `{` + base + `, "rope_theta": 1e6, "rope_scaling": {"type": "yarn", "factor": 4}}`, "rope_scaling.type", "yarn"},
		{"yarn v5", `{` + base + `, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6}}`, "rope_parameters.rope_type", "yarn"},
		{"partial rotary", `{` + base + `, "rope_theta": 1e6, "partial_rotary_factor": 0.5}`, "partial_rotary_factor", "want 1"},
		{"gelu", `{` + base + `, "rope_theta": 1e6, "hidden_act": "gelu"}`, "hidden_act", "gelu"},
		{"kv heads", `{` + base + `, "rope_theta": 1e6, "num_key_value_heads": 3}`, "num_key_value_heads", "does not divide"},
		{"odd head_dim", `{"model_type": "qwen3", "head_dim": 15, "rope_theta": 1e6}`, "head_dim", "odd"},
		{"qwen2 heads", `{"model_type": "qwen2", "hidden_size": 100, "num_attention_heads": 3, "rope_theta": 1e6}`, "num_attention_heads", "does not divide"},
		{"bad theta", `{` + base + `, "rope_theta": 0.5}`, "rope_theta", "not a valid base"},
		{"string size", `{` + base + `, "rope_theta": 1e6, "intermediate_size": "big"}`, "intermediate_size", "not a number"},
		{"eps", `{` + base + `, "rope_theta": 1e6, "rms_norm_eps": 2}`, "rms_norm_eps", "not in (0, 1)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("config.json", []byte(tc.json))
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.HasSuffix(ce.Field, tc.field) || !strings.Contains(ce.Reason, tc.reason) {
				t.Fatalf("got %v, want a ConfigError on %s saying %q", err, tc.field, tc.reason)
			}
		})
	}
}

func TestAttnShapes(t *testing.T) {
	c, err := ParseConfig("config.json", []byte(qwen2Released))
	if err != nil {
		t.Fatal(err)
	}
	m := ExpectedShapes(&c)
	if len(m) != 2+24*12 {
		t.Errorf("%d tensors, want %d", len(m), 2+24*12)
	}
	for name, want := range map[string][]int{
		"layers.0.self_attn.q_proj.bias":   {896},
		"layers.23.self_attn.k_proj.bias":  {128},
		"layers.5.self_attn.o_proj.weight": {896, 896},
		"embed_tokens.weight":              {151936, 896},
	} {
		if !reflect.DeepEqual(m[name], want) {
			t.Errorf("%s: %v, want %v", name, m[name], want)
		}
	}
	if _, ok := m["layers.0.self_attn.q_norm.weight"]; ok {
		t.Error("Qwen2 has no q_norm")
	}
	if !KeepsF32("layers.0.self_attn.q_proj.bias") || KeepsF32("layers.0.self_attn.q_proj.weight") {
		t.Error("KeepsF32: biases stay fp32, matrices do not")
	}
}

func FuzzParseAttnConfig(f *testing.F) {
	f.Add([]byte(qwen3Released))
	f.Add([]byte(qwen2Released))
	f.Add([]byte(`{"model_type": "qwen3", "rope_parameters": {"rope_theta": 1e6}, "layer_types": []}`))
	f.Add([]byte(`{"model_type": "qwen2", "hidden_size": 7, "num_attention_heads": 7, "rope_theta": 2}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("config.json", data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if c.HiddenSize <= 0 || c.NumHeads%c.NumKVHeads != 0 || len(c.LayerTypes) != c.NumLayers || c.RotaryDim() <= 0 {
			t.Fatalf("accepted a bad config: %+v", c)
		}
		_ = ExpectedShapes(&c)
	})
}

func TestOptionIsolationRefused(t *testing.T) {
	f := newFixture(t, 9)
	f.head.Set("option_isolation", true)
	kev, base := f.write()
	_, err := Open(kev, base, Options{})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "option_isolation" || !strings.HasSuffix(ce.File, HeadFile) {
		t.Fatalf("got %v, want a ConfigError on head.pt option_isolation", err)
	}
}
