package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/internal/torchpt"
)

// allocDuring reports the bytes f allocates and how long it takes.
func allocDuring(f func()) (uint64, time.Duration) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, d
}

// TestHardeningConfigBounds: every size in config.json is checked against
// its bound before anything proportional to it is allocated; num_hidden_layers
// 1e8 used to build a per-layer map and run out of memory.
func TestHardeningConfigBounds(t *testing.T) {
	tests := []struct {
		field string
		value any
	}{
		{"num_hidden_layers", 1e8},
		{"num_hidden_layers", 1 << 31},
		{"num_hidden_layers", 1 << 53},
		{"num_hidden_layers", 1025},
		{"hidden_size", 1 << 20},
		{"intermediate_size", 1 << 30},
		{"vocab_size", 1e9},
		{"num_attention_heads", 1 << 16},
		{"num_key_value_heads", 1 << 16},
		{"head_dim", 1 << 20},
		{"linear_num_key_heads", 1 << 16},
		{"linear_num_value_heads", 1 << 16},
		{"linear_key_head_dim", 1 << 20},
		{"linear_value_head_dim", 1 << 20},
		{"linear_conv_kernel_dim", 1000},
		{"full_attention_interval", 1e8},
	}
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			cfg := tinyConfigJSON()
			text := cfg["text_config"].(map[string]any)
			text[tc.field] = tc.value
			if tc.field == "full_attention_interval" {
				delete(text, "layer_types")
			}
			data, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var perr error
			alloc, d := allocDuring(func() { _, perr = ParseConfig("config.json", data) })
			var ce *ConfigError
			if !errors.As(perr, &ce) || ce.Field != "text_config."+tc.field || !strings.Contains(ce.Reason, "over the limit") {
				t.Fatalf("got %v, want a *ConfigError on text_config.%s over the limit", perr, tc.field)
			}
			if alloc > 1<<20 {
				t.Errorf("allocated %d bytes (in %v)", alloc, d)
			}
		})
	}
	// layer_types longer than the layer limit is refused on its length.
	cfg := tinyConfigJSON()
	cfg["text_config"].(map[string]any)["layer_types"] = make([]string, 5000)
	data, _ := json.Marshal(cfg)
	var ce *ConfigError
	if _, err := ParseConfig("config.json", data); !errors.As(err, &ce) || ce.Field != "text_config.layer_types" {
		t.Fatalf("got %v", err)
	}
	// The bounds admit a 27B-class text config.
	big := tinyConfigJSON()
	bt := big["text_config"].(map[string]any)
	for k, v := range map[string]any{"hidden_size": 5120, "num_hidden_layers": 64, "intermediate_size": 17408,
		"vocab_size": 248320, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
		"linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128, "linear_value_head_dim": 128} {
		bt[k] = v
	}
	delete(bt, "layer_types")
	bt["full_attention_interval"] = 4
	data, _ = json.Marshal(big)
	c, err := ParseConfig("config.json", data)
	if err != nil || c.NumLayers != 64 || len(c.LayerTypes) != 64 {
		t.Fatalf("27B-class config: %v", err)
	}
}

// TestHardeningConfigAgainstTensors: a config within its bounds that
// promises more layers than the weights hold is refused on the first missing
// tensor, before any weight is allocated.
func TestHardeningConfigAgainstTensors(t *testing.T) {
	f := newFixture(t, 7)
	text := f.config["text_config"].(map[string]any)
	text["num_hidden_layers"] = 1024
	text["vocab_size"] = 4 << 20
	delete(text, "layer_types")
	kev, base := f.write()
	var err error
	alloc, _ := allocDuring(func() { _, err = Open(kev, base, Options{DType: qwen35.F32}) })
	var te *TensorError
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want a *TensorError", err)
	}
	if alloc > 16<<20 { // the 4M×16 embedding alone would be 256 MiB
		t.Errorf("allocated %d bytes before refusing", alloc)
	}
}

// TestHardeningConfigFileSize: a config.json over 16 MiB is refused unread.
func TestHardeningConfigFileSize(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(`{"model_type":"qwen3_5_text","x":"`+strings.Repeat("a", maxConfigBytes)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var ce *ConfigError
	if _, err := LoadConfig(p); !errors.As(err, &ce) || !strings.Contains(ce.Reason, "limit") {
		t.Fatalf("got %v", err)
	}
}

// TestHardeningHeadMessages: values from head.pt appear in messages only as
// short quoted prefixes.
func TestHardeningHeadMessages(t *testing.T) {
	long := strings.Repeat("z", 1<<20)
	tests := []struct {
		name   string
		mutate func(d *torchpt.Dict)
	}{
		{"weights", func(d *torchpt.Dict) { d.Set("weights", long) }},
		{"lora", func(d *torchpt.Dict) { d.Set("lora", long) }},
		{"head keys", func(d *torchpt.Dict) {
			sd, _ := d.Get("head")
			for i := range 1000 {
				sd.(*torchpt.Dict).Set(long[:1000+i], int64(i))
			}
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, uint64(200+i))
			tc.mutate(f.head)
			_, err := headFromValue("head.pt", f.head)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v", err)
			}
			if n := len(err.Error()); n > 600 {
				t.Fatalf("message of %d bytes: %.300s", n, err)
			}
		})
	}
}

// TestHardeningHubBase: a checkpoint from the hub must name its base on the
// hub: local paths of every shape are refused with a *ConfigError on the
// field.
func TestHardeningHubBase(t *testing.T) {
	rev := strings.Repeat("a", 40)
	tests := []struct {
		base, rev string
		want      string // "" for a refusal
		field     string
	}{
		{"Qwen/Qwen3.5-4B-Base", rev, "Qwen/Qwen3.5-4B-Base@" + rev, ""},
		{"Qwen/Qwen3.5-4B-Base", "", "Qwen/Qwen3.5-4B-Base", ""},
		{"/etc", "", "", "base"},
		{"/home/user/models/base", "", "", "base"},
		{"../../base", "", "", "base"},
		{"./base", "", "", "base"},
		{"~/base", "", "", "base"},
		{"C:\\models\\base", "", "", "base"},
		{"org/name/extra", "", "", "base"},
		{"", "", "", "base"},
		{"Qwen/Qwen3.5-4B-Base", "../../x", "", "base_revision"},
		{strings.Repeat("x", 1<<20), "", "", "base"},
	}
	for _, tc := range tests {
		h := &Head{Base: tc.base, BaseRevision: tc.rev}
		got, err := h.HubBase("head.pt")
		if tc.want != "" {
			if err != nil || got != tc.want {
				t.Errorf("HubBase(%q, %q) = %q, %v; want %q", tc.base, tc.rev, got, err, tc.want)
			}
			continue
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tc.field || ce.File != "head.pt" {
			t.Errorf("HubBase(%.40q, %q) = %q, %v; want a *ConfigError on %s", tc.base, tc.rev, got, err, tc.field)
		}
		if err != nil && len(err.Error()) > 800 {
			t.Errorf("message of %d bytes", len(err.Error()))
		}
	}
}

// FuzzParseConfig: any bytes give a config within the bounds or a typed
// error, quickly.
func FuzzParseConfig(f *testing.F) {
	tiny, _ := json.Marshal(tinyConfigJSON())
	f.Add(tiny)
	for _, seed := range []string{
		`{"model_type":"qwen3_5_text","num_hidden_layers":1e8,"rope_theta":1e7}`,
		`{"model_type":"qwen3_5_text","num_hidden_layers":2147483648,"rope_theta":1e7}`,
		`{"model_type":"qwen3_5_text","vocab_size":1e300,"rope_theta":1e7}`,
		`{"model_type":"qwen3_5_text","layer_types":["full_attention"],"num_hidden_layers":1,"rope_theta":1e7}`,
		`{"model_type":"qwen3_5","text_config":{"rope_parameters":{"rope_theta":5e6,"rope_type":"` + strings.Repeat("y", 200) + `"}}}`,
		`{"model_type":` + strings.Repeat("9", 300) + `}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("config.json", data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			if len(err.Error()) > 1000 {
				t.Fatalf("message of %d bytes", len(err.Error()))
			}
			return
		}
		if c.NumLayers > maxDims["num_hidden_layers"] || c.HiddenSize > maxDims["hidden_size"] ||
			c.VocabSize > maxDims["vocab_size"] || len(c.LayerTypes) != c.NumLayers {
			t.Fatalf("config out of bounds: %+v", c)
		}
	})
}

// TestHardeningAttnConfigBounds: the attention-only config forms take the same size bounds.
func TestHardeningAttnConfigBounds(t *testing.T) {
	for _, mt := range []string{"qwen3", "qwen2"} {
		cfg := `{"model_type":"` + mt + `","hidden_size":64,"num_hidden_layers":100000000,"intermediate_size":128,` +
			`"vocab_size":1000,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"rope_theta":10000}`
		_, err := ParseConfig("config.json", []byte(cfg))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "num_hidden_layers") {
			t.Errorf("%s: 1e8 layers: got %v, want a *ConfigError on num_hidden_layers", mt, err)
		}
	}
}
