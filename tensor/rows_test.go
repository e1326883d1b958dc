package tensor_test

import (
	"errors"
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

// fp8Recorder is the CPU backend with FP8 products of its own: FromFloat32FP8 records the shape and data it is
// given and uploads them as float32.
type fp8Recorder struct {
	tensor.Backend
	shapes [][]int
	data   [][]float32
}

func (r *fp8Recorder) CheckFP8() error { return nil }

func (r *fp8Recorder) FromFloat32FP8(shape []int, data []float32) (tensor.Tensor, error) {
	r.shapes = append(r.shapes, append([]int(nil), shape...))
	r.data = append(r.data, data)
	return r.FromFloat32(shape, data)
}

// TestFromHostRowsFP8 checks the stacked FP8 upload: the parts' values concatenated in order (BF16 and F32 parts
// alike), a single F32 part passed on as it is, shape errors for parts that do not stack, and the *DTypeError of a
// backend without FP8 products.
func TestFromHostRowsFP8(t *testing.T) {
	cpu, err := tensor.Open("cpu")
	if err != nil {
		t.Fatal(err)
	}
	a := &qwen35.Tensor{Shape: []int{1, 2}, DType: qwen35.BF16, BF16: []uint16{0x3f80, 0x4000}}
	c := &qwen35.Tensor{Shape: []int{2, 2}, DType: qwen35.F32, F32: []float32{3, 4, -1, 0.5}}
	for _, tc := range []struct {
		name  string
		parts []*qwen35.Tensor
		shape []int
		data  []float32
		arg   string // the *ShapeError's Arg, or ""
	}{
		{"stacked", []*qwen35.Tensor{a, c}, []int{3, 2}, []float32{1, 2, 3, 4, -1, 0.5}, ""},
		{"one F32 part", []*qwen35.Tensor{c}, []int{2, 2}, c.F32, ""},
		{"one BF16 part", []*qwen35.Tensor{a}, []int{1, 2}, []float32{1, 2}, ""},
		{"none", nil, nil, nil, "parts"},
		{"widths differ", []*qwen35.Tensor{a, {Shape: []int{1, 3}, DType: qwen35.F32, F32: make([]float32, 3)}}, nil, nil, "parts[1]"},
		{"not a matrix", []*qwen35.Tensor{{Shape: []int{2}, DType: qwen35.F32, F32: make([]float32, 2)}}, nil, nil, "parts[0]"},
		{"nil part", []*qwen35.Tensor{a, nil}, nil, nil, "parts[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &fp8Recorder{Backend: cpu}
			x, err := tensor.FromHostRowsFP8(r, tc.parts...)
			if tc.arg != "" {
				var se *tensor.ShapeError
				if !errors.As(err, &se) || se.Arg != tc.arg || len(r.shapes) != 0 {
					t.Fatalf("error %v after %d uploads, want a *ShapeError on %s and none", err, len(r.shapes), tc.arg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(r.shapes) != 1 || !reflect.DeepEqual(r.shapes[0], tc.shape) || !reflect.DeepEqual(r.data[0], tc.data) ||
				!reflect.DeepEqual(x.Shape(), tc.shape) {
				t.Fatalf("uploaded %v %v, want one upload of %v %v", r.shapes, r.data, tc.shape, tc.data)
			}
			if len(tc.parts) == 1 && tc.parts[0].DType == qwen35.F32 && &r.data[0][0] != &tc.parts[0].F32[0] {
				t.Error("a single F32 part was copied")
			}
		})
	}
	var de *tensor.DTypeError
	if _, err := tensor.FromHostRowsFP8(cpu, a, a); !errors.As(err, &de) || de.DType != tensor.F8E4M3 {
		t.Errorf("on the cpu backend: %v, want a *tensor.DTypeError for F8E4M3", err)
	}
}
