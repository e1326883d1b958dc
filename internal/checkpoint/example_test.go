package checkpoint_test

import (
	"fmt"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/qwen35"
)

func ExampleParseConfig() {
	cfg, err := checkpoint.ParseConfig("config.json", []byte(`{
		"model_type": "qwen3_5",
		"tie_word_embeddings": true,
		"text_config": {
			"hidden_size": 2560, "num_hidden_layers": 32, "intermediate_size": 9216,
			"num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
			"linear_num_value_heads": 32, "full_attention_interval": 4,
			"rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25}
		}
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.HiddenSize, cfg.LayerTypes[2], cfg.LayerTypes[3], cfg.RotaryDim(), cfg.ConvDim())
	// Output: 2560 linear_attention full_attention 64 8192
}

// ExampleParseConfig_qwen3 reads the config.json of an attention-only base of Kev's previous generation
// (Qwen3-8B-Base's fields, in the released transformers 4.51 form).
func ExampleParseConfig_qwen3() {
	cfg, err := checkpoint.ParseConfig("config.json", []byte(`{
		"model_type": "qwen3", "hidden_size": 4096, "num_hidden_layers": 36, "intermediate_size": 12288,
		"num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
		"rope_theta": 1000000, "rope_scaling": null, "use_sliding_window": false, "sliding_window": null,
		"tie_word_embeddings": false, "attention_bias": false
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Arch, cfg.Hybrid(), cfg.QKNorm(), cfg.PlusOneNorm(), cfg.RotaryDim(), len(checkpoint.ExpectedShapes(&cfg)))
	// Output: qwen3 false true false 128 398
}

// A streaming load: each tensor is built when asked for and released once the engine has its own copy; tensors
// no adapter touches point into the mapped file.
func ExampleOpenStream() {
	dir := "../../testdata/golden/tiny-a/"
	ck, err := checkpoint.OpenStream(dir+"kev", dir+"base", checkpoint.StreamOptions{Options: checkpoint.Options{DType: qwen35.BF16}})
	if err != nil {
		panic(err)
	}
	defer ck.Close()
	w := ck.Weights
	c := w.Config
	embed, err := w.Lookup("embed_tokens.weight", c.VocabSize, c.HiddenSize)
	if err != nil {
		panic(err)
	}
	q, err := w.Lookup("layers.3.self_attn.q_proj.weight", 2*c.NumHeads*c.HeadDim, c.HiddenSize)
	if err != nil {
		panic(err)
	}
	fmt.Println(embed.DType, embed.Mapped, q.DType, q.Mapped, ck.Bytes())
	w.Release("embed_tokens.weight", "layers.3.self_attn.q_proj.weight")
	// Output: BF16 true BF16 false 489088
}
