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
// it needs; on the cuda device read as fp32 weights under the name "fp8"; and at open time refused on a backend
// without FP8 products (the replica named), and, for now, on every backend.
func TestFP8Option(t *testing.T) {
	for _, c := range []struct {
		in      DType
		backend string
		want    string // the canonical name, or "" for an *OptionError whose reason contains reason
		reason  string
	}{
		{"fp8", "cpu", "", "compute capability 8.9"},
		{"FP8", "cpu", "", "cuda device"},
		{"e4m3", "cpu", "", "8.9 or newer"},
		{"fp8", "cuda", "fp8", ""},
		{"float8_e4m3fn", "cuda", "fp8", ""},
		{"fp4", "cuda", "", `"fp8"`},
	} {
		dt, got, err := parseDType(c.in, c.backend)
		if c.want != "" {
			if err != nil || got != DType(c.want) || dt != qwen35.F32 {
				t.Errorf("parseDType(%q, %s) = %v, %q, %v; want F32 weights named %q", c.in, c.backend, dt, got, err, c.want)
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
	if err := checkFP8(FP8, nil); !errors.As(err, &oe) || !strings.Contains(oe.Reason, "not supported by the model loader") {
		t.Errorf("checkFP8 with every backend able: %v, want the loader's refusal", err)
	}
}
