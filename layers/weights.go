package layers

import (
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// loader uploads named tensors, remembering the first error, and releases each
// from a streaming source once uploaded.
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
		if parts[i], l.err = l.w.Lookup(n, rows[i], cols); l.err != nil {
			return nil
		}
	}
	var t tensor.Tensor
	t, l.err = tensor.FromHostRows(l.b, parts...)
	l.w.Release(names...)
	return t
}

// vector uploads a 1-D tensor as float32.
func (l *loader) vector(name string, n int) tensor.Tensor {
	if l.err != nil {
		return nil
	}
	var h *qwen35.Tensor
	if h, l.err = l.w.Lookup(name, n); l.err != nil {
		return nil
	}
	var t tensor.Tensor
	t, l.err = l.b.FromFloat32([]int{n}, h.Float32s())
	l.w.Release(name)
	return t
}

// vectors uploads several 1-D tensors concatenated, as float32.
func (l *loader) vectors(names []string, sizes []int) tensor.Tensor {
	if l.err != nil {
		return nil
	}
	var all []float32
	for i, n := range names {
		var h *qwen35.Tensor
		if h, l.err = l.w.Lookup(n, sizes[i]); l.err != nil {
			return nil
		}
		all = append(all, h.Float32s()...)
	}
	var t tensor.Tensor
	t, l.err = l.b.FromFloat32([]int{len(all)}, all)
	l.w.Release(names...)
	return t
}
