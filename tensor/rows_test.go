package tensor_test

import (
	"reflect"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
	_ "github.com/kevgo/kev/tensor/cpu"
)

// TestFromHostRowsFallback checks the stacked upload on a backend without FromHostRows (the CPU one): the
// concatenation, and a single part as it is.
func TestFromHostRowsFallback(t *testing.T) {
	b, err := tensor.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	a := &qwen35.Tensor{Shape: []int{1, 2}, DType: qwen35.BF16, BF16: []uint16{0x3f80, 0x4000}}
	c := &qwen35.Tensor{Shape: []int{2, 2}, DType: qwen35.BF16, BF16: []uint16{0x4040, 0x4080, 0xbf80, 0}}
	x, err := tensor.FromHostRows(b, a, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, 2, 3, 4, -1, 0}; !reflect.DeepEqual(got, want) || !reflect.DeepEqual(x.Shape(), []int{3, 2}) {
		t.Errorf("stacked %v %v, want [3 2] %v", x.Shape(), got, want)
	}
	y, err := tensor.FromHostRows(b, c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(y.Shape(), []int{2, 2}) {
		t.Errorf("single part: shape %v", y.Shape())
	}
}
