package checkpoint

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
)

// familyConfig returns a config.json in the released form of the Qwen3.5 family (multimodal wrapper, text model
// under text_config, RoPE under rope_parameters with interleaved M-RoPE sections, the MTP and SSM-dtype keys) with
// the given text dimensions.
func familyConfig(wrapper, text string, d, layers, inter, heads, kvHeads, hk, hv int, tied bool) []byte {
	lt := make([]string, layers)
	for i := range lt {
		lt[i] = "linear_attention"
		if (i+1)%4 == 0 {
			lt[i] = "full_attention"
		}
	}
	cfg := map[string]any{
		"architectures": []string{"X"}, "model_type": wrapper, "tie_word_embeddings": tied,
		"image_token_id": 248056, "video_token_id": 248057,
		"vision_config": map[string]any{"model_type": wrapper + "_vision", "depth": 27, "hidden_size": 1152},
		"text_config": map[string]any{
			"model_type": text, "hidden_size": d, "num_hidden_layers": layers, "intermediate_size": inter,
			"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": 256,
			"linear_num_key_heads": hk, "linear_num_value_heads": hv, "linear_key_head_dim": 128,
			"linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "layer_types": lt,
			"full_attention_interval": 4, "attn_output_gate": true, "attention_bias": false, "hidden_act": "silu",
			"mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": false,
			"mlp_only_layers": []int{}, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
			"vocab_size": 248320, "eos_token_id": 248044, "dtype": "bfloat16", "tie_word_embeddings": tied,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
				"mrope_section": []int{11, 11, 10}, "mrope_interleaved": true},
		},
	}
	b, _ := json.Marshal(cfg)
	return b
}

// TestFamilyConfigs parses the config form of every base Kev publishes on: Qwen3.5-0.8B, -4B and -9B (Base) and
// Qwen3.8-27B (Kev-27B v2), and checks the dimensions and the number of text tensors.
func TestFamilyConfigs(t *testing.T) {
	for _, tc := range []struct {
		name                                         string
		wrapper, text                                string
		d, layers, inter, heads, kv, hk, hv, tensors int
		tied                                         bool
	}{
		{"Qwen3.5-0.8B-Base", "qwen3_5", "qwen3_5_text", 1024, 24, 3584, 8, 2, 16, 16, 2 + 6*(3*9+6+4*5), true},
		{"Qwen3.5-4B-Base", "qwen3_5", "qwen3_5_text", 2560, 32, 9216, 16, 4, 16, 32, 2 + 8*(3*9+6+4*5), true},
		{"Qwen3.5-9B-Base", "qwen3_5", "qwen3_5_text", 4096, 32, 12288, 16, 4, 16, 32, 2 + 8*(3*9+6+4*5), false},
		{"Qwen3.8-27B", "qwen3_8", "qwen3_8_text", 5120, 64, 17408, 24, 4, 16, 48, 2 + 16*(3*9+6+4*5), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := familyConfig(tc.wrapper, tc.text, tc.d, tc.layers, tc.inter, tc.heads, tc.kv, tc.hk, tc.hv, tc.tied)
			c, err := ParseConfig("config.json", b)
			if err != nil {
				t.Fatal(err)
			}
			got := []int{c.HiddenSize, c.NumLayers, c.IntermediateSize, c.NumHeads, c.NumKVHeads, c.LinearNumKeyHeads, c.LinearNumValueHeads}
			if want := []int{tc.d, tc.layers, tc.inter, tc.heads, tc.kv, tc.hk, tc.hv}; !reflect.DeepEqual(got, want) {
				t.Errorf("dimensions %v, want %v", got, want)
			}
			if c.RotaryDim() != 64 || c.RopeTheta != 1e7 || c.TieWordEmbeddings != tc.tied || c.HeadDim != 256 {
				t.Errorf("rotary dims %d, theta %v, tied %v, head_dim %d", c.RotaryDim(), c.RopeTheta, c.TieWordEmbeddings, c.HeadDim)
			}
			full := 0
			for _, lt := range c.LayerTypes {
				if lt == qwen35.FullAttention {
					full++
				}
			}
			if full != tc.layers/4 {
				t.Errorf("%d full-attention layers, want %d", full, tc.layers/4)
			}
			if n := len(ExpectedShapes(&c)); n != tc.tensors {
				t.Errorf("%d text tensors, want %d", n, tc.tensors)
			}
		})
	}
	// A later name with a text model of another family is refused.
	bad := strings.Replace(string(familyConfig("qwen3_8", "qwen3_8_text", 64, 4, 96, 4, 2, 2, 4, true)), `"qwen3_8_text"`, `"llama"`, 1)
	if _, err := ParseConfig("config.json", []byte(bad)); err == nil {
		t.Error("qwen3_8 wrapper with a llama text model: no error")
	}
}

// TestGoldenQwen38Form loads each golden fixture with its config.json rewritten to the Qwen3.8 names (model_type
// qwen3_8 / qwen3_8_text, or qwen3_8_text for a text-only config) and checks that config and weights come out
// exactly as from the original: the model computes from those alone, so the golden forward checks carry over.
func TestGoldenQwen38Form(t *testing.T) {
	for _, fx := range goldenFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := goldenDir(t, fx)
			kev, base := filepath.Join(dir, "kev"), filepath.Join(dir, "base")
			want, err := Open(kev, base, Options{DType: qwen35.F32})
			if err != nil {
				t.Fatal(err)
			}
			tmp := t.TempDir()
			ents, err := os.ReadDir(base)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				src := filepath.Join(base, e.Name())
				if e.Name() != ConfigFile {
					if err := os.Symlink(mustAbs(t, src), filepath.Join(tmp, e.Name())); err != nil {
						t.Fatal(err)
					}
					continue
				}
				b, err := os.ReadFile(src)
				if err != nil {
					t.Fatal(err)
				}
				s := strings.ReplaceAll(string(b), `"qwen3_5_text"`, `"qwen3_8_text"`)
				s = strings.ReplaceAll(s, `"model_type": "qwen3_5"`, `"model_type": "qwen3_8"`)
				if s == string(b) {
					t.Skip("not a Qwen3.5 base")
				}
				if err := os.WriteFile(filepath.Join(tmp, ConfigFile), []byte(s), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Open(kev, tmp, Options{DType: qwen35.F32})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Weights.Config, want.Weights.Config) {
				t.Errorf("config %+v, want %+v", got.Weights.Config, want.Weights.Config)
			}
			if !reflect.DeepEqual(got.Weights.Tensors, want.Weights.Tensors) {
				t.Error("weights differ from the qwen3_5 form's")
			}
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// FuzzParseConfigForms feeds ParseConfig the family's config forms and mutations of them: never a panic, and a
// config it accepts is consistent.
func FuzzParseConfigForms(f *testing.F) {
	f.Add(familyConfig("qwen3_5", "qwen3_5_text", 64, 4, 96, 4, 2, 2, 4, true))
	f.Add(familyConfig("qwen3_8", "qwen3_8_text", 80, 8, 96, 6, 1, 2, 6, false))
	f.Add([]byte(`{"model_type":"qwen3_8_text","rope_theta":1e6,"num_hidden_layers":4,"full_attention_interval":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig("config.json", b)
		if err != nil {
			return
		}
		if len(c.LayerTypes) != c.NumLayers || c.RotaryDim() < 2 || c.RotaryDim()%2 != 0 ||
			c.NumKVHeads < 1 || c.NumHeads%c.NumKVHeads != 0 ||
			c.Hybrid() && (c.LinearNumKeyHeads < 1 || c.LinearNumValueHeads%c.LinearNumKeyHeads != 0) {
			t.Errorf("accepted an inconsistent config %+v", c)
		}
	})
}
