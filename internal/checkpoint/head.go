package checkpoint

import (
	"fmt"
	"math"
	"strings"

	"github.com/kevgo/kev/internal/quote"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/internal/torchpt"
)

// Head is Kev's pointer head and the metadata head.pt carries. Missing keys
// take the defaults Kev gives old files.
type Head struct {
	Base              string  // base model id, e.g. "Qwen/Qwen3.5-4B-Base"
	BaseRevision      string  // 40-hex commit, "" when None
	LoRA              int     // adapter rank, 0 for full-weight checkpoints
	HeadDim           int     // pointer head width (256)
	OptionIsolation   bool    // false for Qwen3.5 checkpoints
	SpecialEmbeddings bool    // trained special-token embeddings
	WeightsDType      string  // "fp32" or "bf16"
	Temperature       float64 // calibration temperature T (1.0 = raw)
	Holdout           []any
	Weights           string // "lora" or "full"

	// The head's linear maps, fp32: QWeight and KWeight [HeadDim, d],
	// QBias and KBias [HeadDim].
	QWeight, QBias, KWeight, KBias *qwen35.Tensor

	// Meta is the whole head.pt dict, extra keys ("args", ...) included.
	Meta *torchpt.Dict
}

// ReadHead loads and validates head.pt.
func ReadHead(path string) (*Head, error) {
	v, err := torchpt.Load(path)
	if err != nil {
		return nil, err
	}
	return headFromValue(path, v)
}

func headFromValue(path string, v any) (*Head, error) {
	herr := func(field, format string, args ...any) error {
		return &ConfigError{File: path, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	meta, ok := v.(*torchpt.Dict)
	if !ok {
		return nil, herr("", "top-level object is not a dict")
	}
	h := &Head{HeadDim: 256, WeightsDType: "fp32", Temperature: 1, Weights: "lora", Meta: meta}
	get := func(key string) (any, bool) {
		x, ok := meta.Get(key)
		return x, ok
	}
	str := func(key string, dst *string, required bool, allowed ...string) error {
		x, ok := get(key)
		if !ok {
			if required {
				return herr(key, "missing")
			}
			return nil
		}
		s, isStr := x.(string)
		if !isStr {
			return herr(key, "is a %T, want a string", x)
		}
		if len(allowed) > 0 {
			good := false
			for _, a := range allowed {
				good = good || s == a
			}
			if !good {
				return herr(key, "%s is not one of %q", quote.String(s), allowed)
			}
		}
		*dst = s
		return nil
	}
	boolean := func(key string, dst *bool) error {
		x, ok := get(key)
		if !ok {
			return nil
		}
		b, isBool := x.(bool)
		if !isBool {
			return herr(key, "is a %T, want a bool", x)
		}
		*dst = b
		return nil
	}
	integer := func(key string, dst *int, min int64) error {
		x, ok := get(key)
		if !ok {
			return nil
		}
		n, isInt := x.(int64)
		if !isInt || n < min || n > 1<<30 {
			return herr(key, "%s is not an integer ≥ %d", describe(x), min)
		}
		*dst = int(n)
		return nil
	}
	if err := str("base", &h.Base, true); err != nil {
		return nil, err
	}
	if x, ok := get("base_revision"); ok && x != nil {
		if err := str("base_revision", &h.BaseRevision, false); err != nil {
			return nil, err
		}
	}
	if err := str("weights_dtype", &h.WeightsDType, false, "fp32", "bf16"); err != nil {
		return nil, err
	}
	if err := str("weights", &h.Weights, false, "lora", "full"); err != nil {
		return nil, err
	}
	if err := boolean("option_isolation", &h.OptionIsolation); err != nil {
		return nil, err
	}
	if err := boolean("special_embeddings", &h.SpecialEmbeddings); err != nil {
		return nil, err
	}
	if err := integer("lora", &h.LoRA, 0); err != nil {
		return nil, err
	}
	if err := integer("head_dim", &h.HeadDim, 1); err != nil {
		return nil, err
	}
	if x, ok := get("temperature"); ok {
		switch t := x.(type) {
		case float64:
			h.Temperature = t
		case int64:
			h.Temperature = float64(t)
		default:
			return nil, herr("temperature", "is a %T, want a number", x)
		}
		if !(h.Temperature > 0) || math.IsInf(h.Temperature, 0) {
			return nil, herr("temperature", "%v is not a positive finite number", h.Temperature)
		}
	}
	if x, ok := get("holdout"); ok && x != nil {
		l, isList := x.(*torchpt.List)
		if !isList {
			return nil, herr("holdout", "is a %T, want a list", x)
		}
		h.Holdout = l.Items
	}

	x, ok := get("head")
	if !ok {
		return nil, herr("head", "missing")
	}
	sd, ok := x.(*torchpt.Dict)
	if !ok {
		return nil, herr("head", "is a %T, want a state_dict", x)
	}
	want := []struct {
		key string
		dst **qwen35.Tensor
	}{{"q.weight", &h.QWeight}, {"q.bias", &h.QBias}, {"k.weight", &h.KWeight}, {"k.bias", &h.KBias}}
	if sd.Len() != len(want) {
		return nil, herr("head", "has %d entries %s, want exactly q.weight, q.bias, k.weight, k.bias", sd.Len(), keyList(sd.Keys()))
	}
	for _, w := range want {
		tv, ok := sd.Get(w.key)
		if !ok {
			return nil, herr("head."+w.key, "missing")
		}
		tn, ok := tv.(*torchpt.Tensor)
		if !ok {
			return nil, herr("head."+w.key, "is a %T, want a tensor", tv)
		}
		vals, err := tn.Float32()
		if err != nil {
			return nil, herr("head."+w.key, "%v", err)
		}
		*w.dst = &qwen35.Tensor{Shape: append([]int(nil), tn.Shape...), DType: qwen35.F32, F32: vals}
	}
	qs, ks := h.QWeight.Shape, h.KWeight.Shape
	if len(qs) != 2 || qs[0] != h.HeadDim {
		return nil, herr("head.q.weight", "shape %s, want [head_dim=%d, d]", dims(qs), h.HeadDim)
	}
	if len(ks) != 2 || ks[0] != h.HeadDim || ks[1] != qs[1] {
		return nil, herr("head.k.weight", "shape %s, want %s", dims(ks), dims(qs))
	}
	for _, b := range []struct {
		key string
		t   *qwen35.Tensor
	}{{"head.q.bias", h.QBias}, {"head.k.bias", h.KBias}} {
		if len(b.t.Shape) != 1 || b.t.Shape[0] != h.HeadDim {
			return nil, herr(b.key, "shape %s, want [%d]", dims(b.t.Shape), h.HeadDim)
		}
	}
	return h, nil
}

// describe shows a value from head.pt in a message: numbers and booleans as
// themselves, strings quoted and cut, anything else by type.
func describe(x any) string {
	switch v := x.(type) {
	case string:
		return quote.String(v)
	case int64, float64, bool:
		return fmt.Sprint(v)
	case nil:
		return "None"
	}
	return fmt.Sprintf("a %T", x)
}

// keyList shows at most four dict keys, each cut.
func keyList(keys []any) string {
	parts := make([]string, 0, 5)
	for i, k := range keys {
		if i == 4 {
			parts = append(parts, fmt.Sprintf("…(%d keys)", len(keys)))
			break
		}
		parts = append(parts, describe(k))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// dims shows a shape, at most 8 dimensions.
func dims(d []int) string {
	if len(d) <= 8 {
		return fmt.Sprint(d)
	}
	return fmt.Sprintf("%v…(%d dims)", d[:8], len(d))
}

// Dim is the hidden size the head reads (the second dim of q.weight).
func (h *Head) Dim() int { return h.QWeight.Shape[1] }
