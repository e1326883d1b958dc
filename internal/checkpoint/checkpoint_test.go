package checkpoint

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/internal/torchpt"
	"github.com/kevgo/kev/safetensors"
)

func TestOpenLoRAF32(t *testing.T) {
	f := newFixture(t, 1)
	kev, base := f.write()
	ck, err := Open(kev, base, Options{DType: qwen35.F32})
	if err != nil {
		t.Fatal(err)
	}
	if ck.Scale != 2 || ck.Adapter.R != 4 || ck.Head.Temperature != 2.41 || ck.Head.HeadDim != 6 || ck.Head.Weights != "lora" {
		t.Fatalf("scale %v r %d T %v dp %d", ck.Scale, ck.Adapter.R, ck.Head.Temperature, ck.Head.HeadDim)
	}
	cfg := ck.Weights.Config
	if cfg.HiddenSize != 16 || cfg.LayerTypes[1] != qwen35.FullAttention || cfg.LayerTypes[2] != qwen35.LinearAttention || cfg.RopeTheta != 1e7 || !cfg.TieWordEmbeddings {
		t.Fatalf("config %+v", cfg)
	}
	want := ExpectedShapes(&cfg)
	if len(ck.Weights.Tensors) != len(want) {
		t.Fatalf("%d tensors, want %d", len(ck.Weights.Tensors), len(want))
	}
	merged := 0
	for name, shape := range want {
		got := ck.Weights.Tensors[name]
		if got.DType != qwen35.F32 || !reflect.DeepEqual(got.Shape, shape) || len(got.F32) != got.Len() {
			t.Fatalf("%s: %s %v", name, got.DType, got.Shape)
		}
		ref := f.reference(name, 2)
		for i, r := range ref {
			g := float64(got.F32[i])
			if math.Abs(g-r) > 1e-6*math.Max(1, math.Abs(r)) {
				t.Fatalf("%s[%d] = %v, want %v", name, i, g, r)
			}
		}
		if _, ok := f.adapter["base_model.model."+strings.TrimSuffix(name, ".weight")+".lora_A.weight"]; ok {
			merged++
		}
	}
	// GDN layers: in_proj_qkv, z, a, b, out_proj + 3 MLP = 8; attention: q, k, v, o + 3 MLP = 7.
	if merged != 2*8+2*7 {
		t.Fatalf("%d merged weights", merged)
	}
	// Head tensors are the fp32 values saved.
	qb, _ := f.head.Get("head")
	qt, _ := qb.(*torchpt.Dict).Get("q.weight")
	qv, _ := qt.(*torchpt.Tensor).Float32()
	if !reflect.DeepEqual(ck.Head.QWeight.F32, qv) || !reflect.DeepEqual(ck.Head.QWeight.Shape, []int{6, 16}) {
		t.Error("head q.weight differs")
	}
	if ck.Head.Meta.Len() != 12 {
		t.Errorf("head meta has %d keys", ck.Head.Meta.Len())
	}
}

func TestOpenLoRABF16(t *testing.T) {
	f := newFixture(t, 2)
	kev, base := f.write()
	ref32, err := Open(kev, base, Options{DType: qwen35.F32, Workers: 3})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := Open(kev, base, Options{DType: qwen35.BF16})
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range ck.Weights.Tensors {
		r := ref32.Weights.Tensors[name]
		if KeepsF32(name) {
			if got.DType != qwen35.F32 || !reflect.DeepEqual(got.F32, r.F32) {
				t.Fatalf("%s: %s, want unchanged F32", name, got.DType)
			}
			continue
		}
		if got.DType != qwen35.BF16 || len(got.BF16) != got.Len() {
			t.Fatalf("%s: %s", name, got.DType)
		}
		exact := f.reference(name, 2)
		for i, v := range r.F32 {
			// One rounding of the fp32 merge...
			if got.BF16[i] != half.BF16FromF32(v) {
				t.Fatalf("%s[%d]: %#x, want bf16(%v) = %#x", name, i, got.BF16[i], v, half.BF16FromF32(v))
			}
			// ...which is at most one bf16 ulp from rounding the exact value.
			e := half.BF16FromF32(float32(exact[i]))
			if d := int(got.BF16[i]) - int(e); d < -1 || d > 1 {
				t.Fatalf("%s[%d]: %#x vs exact %#x", name, i, got.BF16[i], e)
			}
		}
	}
}

func TestLoRAScaleAndRSLoRA(t *testing.T) {
	f := newFixture(t, 3)
	f.adapterJS["use_rslora"] = true
	kev, base := f.write()
	user := 0.5
	ck, err := Open(kev, base, Options{LoRAScale: &user})
	if err != nil {
		t.Fatal(err)
	}
	s := 8 / math.Sqrt(4) * 0.5
	if ck.Scale != s {
		t.Fatalf("scale %v, want %v", ck.Scale, s)
	}
	name := "layers.1.self_attn.q_proj.weight"
	ref := f.reference(name, s)
	for i, v := range ck.Weights.Tensors[name].F32 {
		if math.Abs(float64(v)-ref[i]) > 1e-6*math.Max(1, math.Abs(ref[i])) {
			t.Fatalf("[%d] %v want %v", i, v, ref[i])
		}
	}
}

// TestMergeExact pins the arithmetic on values where every step is exact.
func TestMergeExact(t *testing.T) {
	w, _ := safetensors.FromFloat32("w", safetensors.BF16, []int{2, 3}, []float32{1, -2, 0.5, 4, 0.25, -1})
	a, _ := safetensors.FromFloat32("a", safetensors.F32, []int{2, 3}, []float32{1, 2, 3, -1, 0.5, 2})
	b, _ := safetensors.FromFloat32("b", safetensors.F32, []int{2, 2}, []float32{0.5, 1, -2, 0.25})
	out := &qwen35.Tensor{Shape: []int{2, 3}, DType: qwen35.F32, F32: make([]float32, 6)}
	m, err := newMerge(&w, &loraPair{a: &a, b: &b}, out, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := runJobs(m.jobs(), 2); err != nil {
		t.Fatal(err)
	}
	// B@A = [[-0.5, 1.5, 3.5], [-2.25, -3.875, -5.5]]; W + 2·B@A:
	want := []float32{0, 1, 7.5, -0.5, -7.5, -12}
	if !reflect.DeepEqual(out.F32, want) {
		t.Fatalf("got %v, want %v", out.F32, want)
	}
}

func TestFullWeights(t *testing.T) {
	f := newFixture(t, 4)
	f.adapterJS = nil
	f.head.Set("weights", "full")
	f.head.Set("lora", int64(0))
	kev, base := f.write()
	// Move the base into the Kev directory: a full-weight checkpoint.
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		os.Rename(filepath.Join(base, e.Name()), filepath.Join(kev, e.Name()))
	}
	ck, err := Open(kev, "", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ck.Adapter != nil || ck.Scale != 0 {
		t.Fatal("full checkpoint has an adapter")
	}
	name := "layers.0.linear_attn.in_proj_qkv.weight"
	src := f.base["model.language_model."+name]
	want, _ := src.Float32()
	if !reflect.DeepEqual(ck.Weights.Tensors[name].F32, want) {
		t.Error("full weights changed")
	}
	// head.pt saying "lora" with full weights on disk is refused.
	f.head.Set("weights", "lora")
	hf, _ := os.Create(filepath.Join(kev, HeadFile))
	torchpt.Save(hf, f.head)
	hf.Close()
	_, err = Open(kev, "", Options{})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "weights" {
		t.Fatalf("got %v", err)
	}
}

func TestTextOnlyNames(t *testing.T) {
	f := newFixture(t, 5)
	cfg := f.config["text_config"].(map[string]any)
	cfg["model_type"] = "qwen3_5_text"
	delete(cfg, "layer_types") // derived from full_attention_interval 2: L F L F
	f.config = cfg
	renamed := map[string]safetensors.Tensor{}
	for name, tn := range f.base {
		if canon, ok := strings.CutPrefix(name, "model.language_model."); ok {
			tn.Name = "model." + canon
			renamed[tn.Name] = tn
		}
	}
	f.base = renamed
	kev, base := f.write()
	ck, err := Open(kev, base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ck.Weights.Config.LayerTypes; !reflect.DeepEqual(got, []qwen35.LayerType{0, 1, 0, 1}) {
		t.Errorf("layer types %v", got)
	}
}

func TestOpenErrors(t *testing.T) {
	lm := "model.language_model."
	tests := []struct {
		name   string
		mutate func(f *fixture)
		check  func(t *testing.T, err error)
	}{
		{"unknown architecture", func(f *fixture) { f.config["model_type"] = "qwen3_next" }, configErr("model_type", "not a supported base")},
		{"layer types length", func(f *fixture) {
			f.config["text_config"].(map[string]any)["layer_types"] = []string{"linear_attention"}
		}, configErr("text_config.layer_types", "1 entries")},
		{"bad layer type", func(f *fixture) {
			f.config["text_config"].(map[string]any)["layer_types"] = []string{"linear_attention", "mamba", "x", "y"}
		}, configErr("text_config.layer_types[1]", "mamba")},
		{"kv heads", func(f *fixture) { f.config["text_config"].(map[string]any)["num_key_value_heads"] = 3 }, configErr("text_config.num_key_value_heads", "does not divide")},
		{"value heads", func(f *fixture) { f.config["text_config"].(map[string]any)["linear_num_key_heads"] = 3 }, configErr("text_config.linear_num_key_heads", "does not divide")},
		{"negative dim", func(f *fixture) { f.config["text_config"].(map[string]any)["hidden_size"] = -16 }, configErr("text_config.hidden_size", "positive")},
		{"no rope theta", func(f *fixture) {
			delete(f.config["text_config"].(map[string]any)["rope_parameters"].(map[string]any), "rope_theta")
		}, configErr("text_config.rope_theta", "missing")},
		{"rope type", func(f *fixture) {
			f.config["text_config"].(map[string]any)["rope_parameters"].(map[string]any)["rope_type"] = "yarn"
		}, configErr("text_config.rope_parameters.rope_type", "yarn")},
		{"missing tensor", func(f *fixture) { delete(f.base, lm+"layers.1.self_attn.k_norm.weight") },
			tensorErr("layers.1.self_attn.k_norm.weight", "base", "missing", []int{8})},
		{"wrong shape", func(f *fixture) {
			f.setBase(lm+"layers.0.mlp.up_proj.weight", safetensors.BF16, []int{16, 24}, make([]float32, 384))
		},
			tensorErr(lm+"layers.0.mlp.up_proj.weight", ".safetensors", "wrong shape", []int{24, 16})},
		{"unexpected tensor", func(f *fixture) {
			f.setBase(lm+"layers.0.mlp.extra.weight", safetensors.BF16, []int{2}, []float32{1, 2})
		},
			tensorErr(lm+"layers.0.mlp.extra.weight", ".safetensors", "not a tensor", nil)},
		{"integer tensor", func(f *fixture) {
			f.base[lm+"norm.weight"] = safetensors.Tensor{Name: lm + "norm.weight", DType: safetensors.I32, Shape: []int{16}, Data: make([]byte, 64)}
		}, tensorErr(lm+"norm.weight", ".safetensors", "not a float", nil)},
		{"adapter missing B", func(f *fixture) { delete(f.adapter, "base_model.model.layers.0.mlp.down_proj.lora_B.weight") },
			tensorErr("layers.0.mlp.down_proj.weight", "adapter_model.safetensors", "no lora_B", nil)},
		{"adapter wrong shape", func(f *fixture) {
			f.setAdapter("base_model.model.layers.1.self_attn.o_proj.lora_A.weight", []int{4, 15}, make([]float32, 60))
		}, tensorErr("base_model.model.layers.1.self_attn.o_proj.lora_A.weight", "adapter_model.safetensors", "wrong shape", []int{4, 16})},
		{"adapter embedding", func(f *fixture) {
			f.setAdapter("base_model.model.embed_tokens.lora_embedding_A", []int{4, 40}, make([]float32, 160))
		}, tensorErr("base_model.model.embed_tokens.lora_embedding_A", "adapter_model.safetensors", "not a LoRA factor", nil)},
		{"adapter not targeted", func(f *fixture) { f.adapterJS["target_modules"] = []string{"q_proj"} },
			func(t *testing.T, err error) {
				var te *TensorError
				if !errors.As(err, &te) || !strings.Contains(te.Reason, "target_modules") {
					t.Fatalf("got %v", err)
				}
			}},
		{"trainable tokens", func(f *fixture) { f.adapterJS["trainable_token_indices"] = []int{5, 6} }, configErr("trainable_token_indices", "cannot be merged")},
		{"dora", func(f *fixture) { f.adapterJS["use_dora"] = true }, configErr("use_dora", "cannot be merged")},
		{"rank missing", func(f *fixture) { delete(f.adapterJS, "r") }, configErr("r", "missing")},
		{"rank disagrees", func(f *fixture) { f.head.Set("lora", int64(16)) }, configErr("lora", "r = 4")},
		{"head says full", func(f *fixture) { f.head.Set("weights", "full") }, configErr("weights", "LoRA adapter")},
		{"head weights value", func(f *fixture) { f.head.Set("weights", "half") }, configErr("weights", "not one of")},
		{"head no base", func(f *fixture) { f.head = dictWithout(f.head, "base") }, configErr("base", "missing")},
		{"head temperature", func(f *fixture) { f.head.Set("temperature", -1.0) }, configErr("temperature", "positive")},
		{"head extra tensor", func(f *fixture) {
			sd, _ := f.head.Get("head")
			sd.(*torchpt.Dict).Set("v.weight", torchpt.NewFloat32([]int{1}, []float32{1}))
		}, configErr("head", "exactly")},
		{"head dim", func(f *fixture) { f.head.Set("head_dim", int64(7)) }, configErr("head.q.weight", "head_dim=7")},
		{"head width", func(f *fixture) {
			sd, _ := f.head.Get("head")
			sd.(*torchpt.Dict).Set("q.weight", torchpt.NewFloat32([]int{6, 15}, make([]float32, 90)))
			sd.(*torchpt.Dict).Set("k.weight", torchpt.NewFloat32([]int{6, 15}, make([]float32, 90)))
		}, tensorErr("head.q.weight", "head.pt", "hidden_size", []int{6, 16})},
		{"no adapter no weights", func(f *fixture) { f.adapterJS = nil }, configErr("", "neither")},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, uint64(100+i))
			tc.mutate(f)
			kev, base := f.write()
			_, err := Open(kev, base, Options{DType: qwen35.BF16})
			if err == nil {
				t.Fatal("no error")
			}
			tc.check(t, err)
		})
	}
}

func dictWithout(d *torchpt.Dict, key string) *torchpt.Dict {
	out := torchpt.NewDict()
	for _, k := range d.Keys() {
		if k != key {
			v, _ := d.Get(k)
			out.Set(k, v)
		}
	}
	return out
}

func configErr(field, reason string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field || !strings.Contains(ce.Reason, reason) {
			t.Fatalf("got %T %v; want *ConfigError field %q reason ~%q", err, err, field, reason)
		}
	}
}

func tensorErr(tensor, file, reason string, want []int) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		var te *TensorError
		if !errors.As(err, &te) || te.Tensor != tensor || !strings.Contains(te.File, file) || !strings.Contains(te.Reason, reason) ||
			(want != nil && !reflect.DeepEqual(te.Want, want)) {
			t.Fatalf("got %T %v; want *TensorError %q in ~%q reason ~%q want %v", err, err, tensor, file, reason, want)
		}
	}
}

func TestConfigDefaultsAndRopeLocations(t *testing.T) {
	// A flat text config giving only a few fields: the rest are class defaults.
	c, err := ParseConfig("c.json", []byte(`{"model_type":"qwen3_5_text","hidden_size":2560,"num_hidden_layers":32,
		"intermediate_size":9216,"linear_num_value_heads":32,"rope_theta":10000000,"tie_word_embeddings":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.HeadDim != 256 || c.NumHeads != 16 || c.NumKVHeads != 4 || c.RotaryDim() != 64 || c.ConvDim() != 8192 || !c.AttnOutputGate {
		t.Fatalf("%+v", c)
	}
	full := 0
	for i, lt := range c.LayerTypes {
		if lt == qwen35.FullAttention {
			full++
			if (i+1)%4 != 0 {
				t.Errorf("layer %d full", i)
			}
		}
	}
	if full != 8 {
		t.Errorf("%d full-attention layers", full)
	}
	for _, js := range []string{
		`{"model_type":"qwen3_5_text","rope_scaling":{"rope_type":"default","rope_theta":5e6,"partial_rotary_factor":0.5}}`,
		`{"model_type":"qwen3_5","text_config":{"rope_parameters":{"rope_theta":5e6},"partial_rotary_factor":0.5}}`,
	} {
		c, err := ParseConfig("c.json", []byte(js))
		if err != nil {
			t.Fatal(err)
		}
		if c.RopeTheta != 5e6 || c.PartialRotaryFactor != 0.5 {
			t.Errorf("%s: theta %v prf %v", js, c.RopeTheta, c.PartialRotaryFactor)
		}
	}
	var ce *ConfigError
	if _, err := ParseConfig("c.json", []byte(`{"model_type":"qwen3_5","text_config":{"rope_theta":1e7,"head_dim":"x"}}`)); !errors.As(err, &ce) || ce.Field != "text_config.head_dim" {
		t.Errorf("got %v", err)
	}
	if _, err := ParseConfig("c.json", []byte(`{`)); !errors.As(err, &ce) || !strings.Contains(ce.Reason, "bad JSON") {
		t.Errorf("got %v", err)
	}
}
