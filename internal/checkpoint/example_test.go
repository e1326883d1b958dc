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
