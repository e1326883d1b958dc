package checkpoint_test

import (
	"fmt"

	"github.com/kevgo/kev/internal/checkpoint"
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
