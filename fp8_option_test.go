package kev

import (
	"errors"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// TestFP8Option checks how the fp8 dtype is read: refused on the cpu device with an *OptionError that says what
// it needs; on the cuda device read as bf16 weights (the product weights fp32, see Load) under the name "fp8"; and
// at open time refused on a backend without FP8 products (the replica named), accepted on backends with them.
func TestFP8Option(t *testing.T) {
	for _, c := range []struct {
		in      DType
		backend string
		want    string // the canonical name, or "" for an *OptionError whose reason contains reason
		reason  string
	}{
		{"fp8", "cpu", "", "compute capability 9.0"},
		{"FP8", "cpu", "", "cuda device"},
		{"e4m3", "cpu", "", "9.0 (Hopper)"},
		{"fp8", "cuda", "fp8", ""},
		{"float8_e4m3fn", "cuda", "fp8", ""},
		{"fp4", "cuda", "", `"fp8"`},
	} {
		dt, got, err := parseDType(c.in, c.backend)
		if c.want != "" {
			if err != nil || got != DType(c.want) || dt != qwen35.BF16 {
				t.Errorf("parseDType(%q, %s) = %v, %q, %v; want BF16 weights named %q", c.in, c.backend, dt, got, err, c.want)
			}
			continue
		}
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != "DType" || !strings.Contains(oe.Reason, c.reason) {
			t.Errorf("parseDType(%q, %s): error %v, want an *OptionError on DType saying %q", c.in, c.backend, err, c.reason)
		}
	}

	err := checkFP8(FP8, []tensor.Backend{cpu.New()})
	var oe *OptionError
	if !errors.As(err, &oe) || !strings.Contains(oe.Reason, "replica 0") || !strings.Contains(oe.Reason, "9.0 (Hopper)") {
		t.Errorf("checkFP8 on the cpu backend: %v, want an *OptionError naming replica 0 and what fp8 needs", err)
	}
	err = checkFP8(FP8, []tensor.Backend{newFP8Backend(fakeFP8), cpu.New()})
	if !errors.As(err, &oe) || !strings.Contains(oe.Reason, "replica 1") {
		t.Errorf("checkFP8 with replica 1 on the cpu backend: %v, want an *OptionError naming replica 1", err)
	}
	if err := checkFP8(FP8, []tensor.Backend{newFP8Backend(fakeFP8), newFP8Backend(fakeFP8)}); err != nil {
		t.Errorf("checkFP8 with every backend able: %v", err)
	}
}

// TestFP8WeightBytes checks the weight bytes an FP8 load reports: each product weight one byte an element and four
// bytes a row in place of the four bytes an element the checkpoint built it in, or two bytes an element for those
// kept in bf16; other tensors as built.
func TestFP8WeightBytes(t *testing.T) {
	c := &qwen35.Config{Arch: qwen35.Qwen3, HiddenSize: 16, NumLayers: 1, IntermediateSize: 32, VocabSize: 10,
		LayerTypes: []qwen35.LayerType{qwen35.FullAttention}, NumHeads: 2, NumKVHeads: 1, HeadDim: 8}
	// Products: q [16, 16], k and v [8, 16], o [16, 16], gate and up [32, 16], down [16, 32]: 2,304 elements in 128
	// rows. Host: those in fp32, the embedding [10, 16] and the five norms of 16, 16, 16, 8 and 8 elements.
	host := int64(4*2304 + 2*160 + 4*64)
	for _, c2 := range []struct {
		name string
		kept []string
		want int64
	}{
		{"all fp8", nil, 2304 + 4*128 + 2*160 + 4*64},
		{"q, k, v kept", []string{"layers.0.self_attn.q_proj.weight+layers.0.self_attn.k_proj.weight+layers.0.self_attn.v_proj.weight"},
			2*512 + (2304 - 512) + 4*(128-32) + 2*160 + 4*64},
	} {
		if got := fp8WeightBytes(c, host, c2.kept); got != c2.want {
			t.Errorf("%s: %d bytes, want %d", c2.name, got, c2.want)
		}
	}
}
