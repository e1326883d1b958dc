package qwen35

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestLookup(t *testing.T) {
	w := &Weights{Tensors: map[string]*Tensor{
		"ok":    {Shape: []int{2, 3}, DType: F32, F32: make([]float32, 6)},
		"short": {Shape: []int{2, 3}, DType: BF16, BF16: make([]uint16, 5)},
	}}
	if _, err := w.Lookup("ok", 2, 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		shape  []int
		reason string
	}{
		{"absent", []int{1}, "missing"},
		{"ok", []int{3, 2}, "has shape [2 3], want [3 2]"},
		{"ok", []int{6}, "has shape [2 3], want [6]"},
		{"short", []int{2, 3}, "BF16 data does not match shape [2 3]"},
	} {
		var te *TensorError
		_, err := w.Lookup(c.name, c.shape...)
		if !errors.As(err, &te) || te.Name != c.name || te.Reason != c.reason {
			t.Errorf("Lookup(%q, %v) = %v, want reason %q", c.name, c.shape, err, c.reason)
		}
	}
}

func TestConcatRowsAndFloat32s(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	a := &Tensor{Shape: []int{2, 2}, DType: BF16, BF16: []uint16{0x3f80, 0xc000, 0x4040, uint16(r.UintN(0x7f00))}}
	b := &Tensor{Shape: []int{1, 2}, DType: BF16, BF16: []uint16{0x3f00, 0x4080}}
	c := &Tensor{Shape: []int{1, 2}, DType: F32, F32: []float32{r.Float32() + 0.5, -7.25}}
	ab := ConcatRows(a, b)
	if ab.DType != BF16 || ab.Shape[0] != 3 || len(ab.BF16) != 6 || ab.BF16[4] != 0x3f00 {
		t.Errorf("all-BF16 concat: %+v", ab)
	}
	abc := ConcatRows(a, b, c)
	want := append(append(a.Float32s(), b.Float32s()...), c.F32...)
	if abc.DType != F32 || abc.Shape[0] != 4 || abc.Shape[1] != 2 || len(abc.F32) != len(want) {
		t.Fatalf("mixed concat: %+v", abc)
	}
	for i := range want {
		if abc.F32[i] != want[i] {
			t.Errorf("element %d: %v, want %v", i, abc.F32[i], want[i])
		}
	}
	if got := a.Float32s()[:3]; got[0] != 1 || got[1] != -2 || got[2] != 3 {
		t.Errorf("Float32s: %v", got)
	}
}
