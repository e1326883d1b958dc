package checkpoint

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/torchpt"
	"github.com/kevgo/kev/safetensors"
)

// A tiny Qwen3.5 written to disk the way the released files are laid out:
// a multimodal config.json, bf16 text weights under model.language_model.
// (A_log fp32) sharded in two files with an index, vision and MTP tensors
// beside them; a PEFT adapter (fp32 factors) and head.pt.

func tinyConfigJSON() map[string]any {
	return map[string]any{
		"architectures":       []string{"Qwen3_5ForConditionalGeneration"},
		"model_type":          "qwen3_5",
		"tie_word_embeddings": true,
		"text_config": map[string]any{
			"model_type": "qwen3_5_text", "hidden_size": 16, "num_hidden_layers": 4, "intermediate_size": 24,
			"vocab_size": 40, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
			"linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 4,
			"linear_value_head_dim": 4, "linear_conv_kernel_dim": 4, "rms_norm_eps": 1e-6,
			"full_attention_interval": 2,
			"layer_types":             []string{"linear_attention", "full_attention", "linear_attention", "full_attention"},
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
				"mrope_section": []int{1, 1, 0}, "mrope_interleaved": true},
		},
		"vision_config": map[string]any{"depth": 1},
	}
}

type fixture struct {
	t         *testing.T
	rng       *rand.Rand
	config    map[string]any
	base      map[string]safetensors.Tensor // checkpoint name -> tensor
	adapter   map[string]safetensors.Tensor
	adapterJS map[string]any
	head      *torchpt.Dict
	r         int
	alpha     float64
}

func values(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

func newFixture(t *testing.T, seed uint64) *fixture {
	f := &fixture{t: t, rng: rand.New(rand.NewPCG(seed, 77)), config: tinyConfigJSON(),
		base: map[string]safetensors.Tensor{}, adapter: map[string]safetensors.Tensor{}, r: 4, alpha: 8}
	cfg, err := ParseConfig("config.json", mustJSON(f.config))
	if err != nil {
		t.Fatal(err)
	}
	shapes := ExpectedShapes(&cfg)
	for _, name := range sortedNames(shapes) {
		shape := shapes[name]
		n := 1
		for _, s := range shape {
			n *= s
		}
		dt := safetensors.BF16
		if strings.HasSuffix(name, "A_log") {
			dt = safetensors.F32
		}
		f.setBase("model.language_model."+name, dt, shape, values(f.rng, n, 0.5))
		parts := strings.Split(name, ".")
		if len(shape) == 2 && len(parts) == 5 && loraModules[parts[3]] {
			target := strings.TrimSuffix(name, ".weight")
			f.setAdapter("base_model.model."+target+".lora_A.weight", []int{f.r, shape[1]}, values(f.rng, f.r*shape[1], 0.3))
			f.setAdapter("base_model.model."+target+".lora_B.weight", []int{shape[0], f.r}, values(f.rng, shape[0]*f.r, 0.3))
		}
	}
	f.setBase("model.visual.blocks.0.attn.qkv.weight", safetensors.BF16, []int{3, 2}, values(f.rng, 6, 1))
	f.setBase("mtp.fc.weight", safetensors.BF16, []int{2, 2}, values(f.rng, 4, 1))
	f.adapterJS = map[string]any{
		"peft_type": "LORA", "task_type": "FEATURE_EXTRACTION", "r": f.r, "lora_alpha": f.alpha, "lora_dropout": 0.05,
		"use_rslora": false, "trainable_token_indices": nil, "bias": "none", "fan_in_fan_out": false,
		"base_model_name_or_path": "Qwen/Qwen3.5-0.8B-Base",
		"target_modules": []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
			"in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj"},
	}
	sd := torchpt.NewDict()
	sd.Class = "collections.OrderedDict"
	sd.Set("q.weight", torchpt.NewFloat32([]int{6, 16}, values(f.rng, 96, 0.2)))
	sd.Set("q.bias", torchpt.NewFloat32([]int{6}, values(f.rng, 6, 0.2)))
	sd.Set("k.weight", torchpt.NewFloat32([]int{6, 16}, values(f.rng, 96, 0.2)))
	sd.Set("k.bias", torchpt.NewFloat32([]int{6}, values(f.rng, 6, 0.2)))
	args := torchpt.NewDict()
	args.Set("lr", 2e-4)
	args.Set("run", "runs/tiny")
	h := torchpt.NewDict()
	for _, kv := range []struct {
		k string
		v any
	}{{"args", args}, {"base", "Qwen/Qwen3.5-0.8B-Base"}, {"head", sd}, {"base_revision", nil},
		{"lora", int64(f.r)}, {"head_dim", int64(6)}, {"option_isolation", false}, {"special_embeddings", false},
		{"weights_dtype", "fp32"}, {"temperature", 2.41}, {"holdout", &torchpt.List{}}, {"weights", "lora"}} {
		h.Set(kv.k, kv.v)
	}
	f.head = h
	return f
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (f *fixture) setBase(name string, dt safetensors.DType, shape []int, vals []float32) {
	tn, err := safetensors.FromFloat32(name, dt, shape, vals)
	if err != nil {
		f.t.Fatal(err)
	}
	f.base[name] = tn
}

func (f *fixture) setAdapter(name string, shape []int, vals []float32) {
	tn, err := safetensors.FromFloat32(name, safetensors.F32, shape, vals)
	if err != nil {
		f.t.Fatal(err)
	}
	f.adapter[name] = tn
}

func sortedTensors(m map[string]safetensors.Tensor) []safetensors.Tensor {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]safetensors.Tensor, len(names))
	for i, n := range names {
		out[i] = m[n]
	}
	return out
}

// write lays the fixture out under a new temp dir and returns (kevDir, baseDir).
func (f *fixture) write() (string, string) {
	t := f.t
	root := t.TempDir()
	kev, base := filepath.Join(root, "kev"), filepath.Join(root, "base")
	os.MkdirAll(kev, 0o755)
	os.MkdirAll(base, 0o755)
	os.WriteFile(filepath.Join(base, ConfigFile), mustJSON(f.config), 0o644)
	all := sortedTensors(f.base)
	mid := len(all) / 2
	shards := [][]safetensors.Tensor{all[:mid], all[mid:]}
	wm := map[string]string{}
	for i, ts := range shards {
		fn := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
		if err := safetensors.WriteFile(filepath.Join(base, fn), ts, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		for _, tn := range ts {
			wm[tn.Name] = fn
		}
	}
	os.WriteFile(filepath.Join(base, safetensors.IndexFile), mustJSON(map[string]any{"metadata": map[string]any{"total_size": 1}, "weight_map": wm}), 0o644)
	if f.adapterJS != nil {
		os.WriteFile(filepath.Join(kev, AdapterConfigFile), mustJSON(f.adapterJS), 0o644)
		if err := safetensors.WriteFile(filepath.Join(kev, AdapterFile), sortedTensors(f.adapter), map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
	}
	hf, err := os.Create(filepath.Join(kev, HeadFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := torchpt.Save(hf, f.head); err != nil {
		t.Fatal(err)
	}
	hf.Close()
	return kev, base
}

// reference computes the merged weight exactly (float64) for a canonical name.
func (f *fixture) reference(canon string, s float64) []float64 {
	w := f.base["model.language_model."+canon]
	wv, _ := w.Float32()
	out := make([]float64, len(wv))
	for i, v := range wv {
		out[i] = float64(v)
	}
	target := strings.TrimSuffix(canon, ".weight")
	a, okA := f.adapter["base_model.model."+target+".lora_A.weight"]
	b, okB := f.adapter["base_model.model."+target+".lora_B.weight"]
	if !okA || !okB {
		return out
	}
	av, _ := a.Float32()
	bv, _ := b.Float32()
	rows, in, r := w.Shape[0], w.Shape[1], a.Shape[0]
	for o := 0; o < rows; o++ {
		for i := 0; i < in; i++ {
			var d float64
			for k := 0; k < r; k++ {
				d += float64(bv[o*r+k]) * float64(av[k*in+i])
			}
			out[o*in+i] += s * d
		}
	}
	return out
}
