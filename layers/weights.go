package layers

import (
	"fmt"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// fetch returns the tensor called name, checking its shape and data length.
func fetch(w *qwen35.Weights, name string, shape ...int) (*qwen35.Tensor, error) {
	t, ok := w.Tensors[name]
	if !ok || t == nil {
		return nil, fmt.Errorf("layers: tensor %q missing", name)
	}
	same := len(t.Shape) == len(shape)
	for i := 0; same && i < len(shape); i++ {
		same = t.Shape[i] == shape[i]
	}
	if !same {
		return nil, fmt.Errorf("layers: tensor %q has shape %v, want %v", name, t.Shape, shape)
	}
	if (t.DType == qwen35.F32 && len(t.F32) != t.Len()) || (t.DType == qwen35.BF16 && len(t.BF16) != t.Len()) ||
		(t.DType != qwen35.F32 && t.DType != qwen35.BF16) {
		return nil, fmt.Errorf("layers: tensor %q: %v data does not match shape %v", name, t.DType, t.Shape)
	}
	return t, nil
}

// floats returns t's values as float32.
func floats(t *qwen35.Tensor) []float32 {
	if t.DType == qwen35.F32 {
		return t.F32
	}
	out := make([]float32, len(t.BF16))
	for i, h := range t.BF16 {
		out[i] = half.BF16ToF32(h)
	}
	return out
}

// concatRows stacks 2-D tensors with equal column counts; BF16 if all are.
func concatRows(ts ...*qwen35.Tensor) *qwen35.Tensor {
	rows, cols, allBF16 := 0, ts[0].Shape[1], true
	for _, t := range ts {
		rows += t.Shape[0]
		allBF16 = allBF16 && t.DType == qwen35.BF16
	}
	out := &qwen35.Tensor{Shape: []int{rows, cols}}
	if allBF16 {
		out.DType = qwen35.BF16
		for _, t := range ts {
			out.BF16 = append(out.BF16, t.BF16...)
		}
		return out
	}
	out.DType = qwen35.F32
	for _, t := range ts {
		out.F32 = append(out.F32, floats(t)...)
	}
	return out
}

// loader uploads named tensors, remembering the first error.
type loader struct {
	b   tensor.Backend
	w   *qwen35.Weights
	err error
}

// matrix uploads a matrix in its stored type.
func (l *loader) matrix(name string, rows, cols int) tensor.Tensor {
	return l.stacked([]string{name}, []int{rows}, cols)
}

// stacked uploads several matrices stacked by rows as one.
func (l *loader) stacked(names []string, rows []int, cols int) tensor.Tensor {
	if l.err != nil {
		return nil
	}
	parts := make([]*qwen35.Tensor, len(names))
	for i, n := range names {
		if parts[i], l.err = fetch(l.w, n, rows[i], cols); l.err != nil {
			return nil
		}
	}
	var t tensor.Tensor
	t, l.err = l.b.FromHost(concatRows(parts...))
	return t
}

// vector uploads a 1-D tensor as float32.
func (l *loader) vector(name string, n int) tensor.Tensor {
	if l.err != nil {
		return nil
	}
	var h *qwen35.Tensor
	if h, l.err = fetch(l.w, name, n); l.err != nil {
		return nil
	}
	var t tensor.Tensor
	t, l.err = l.b.FromFloat32([]int{n}, floats(h))
	return t
}
