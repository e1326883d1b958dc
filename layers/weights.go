package layers

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// loader uploads named tensors, remembering the first error, and releases each
// from a streaming source once uploaded.
type loader struct {
	b    tensor.Backend
	w    *qwen35.Weights
	err  error
	fp8  bool     // product weights as F8E4M3 (Options.FP8)
	kept []string // product weights of an FP8 load kept in bf16 (Model.KeptBF16)
}

// matrix uploads a matrix in its stored type.
func (l *loader) matrix(name string, rows, cols int) tensor.Tensor {
	return l.stacked([]string{name}, []int{rows}, cols)
}

// stacked uploads several matrices stacked by rows as one.
func (l *loader) stacked(names []string, rows []int, cols int) tensor.Tensor {
	return l.upload(names, rows, cols, func(_ []string, parts []*qwen35.Tensor) (tensor.Tensor, error) {
		return tensor.FromHostRows(l.b, parts...)
	})
}

// product uploads the weight of a matrix product, several matrices stacked by rows as one: in their stored type,
// or as F8E4M3 in an FP8 load (uploadProduct).
func (l *loader) product(names []string, rows []int, cols int) tensor.Tensor {
	if !l.fp8 {
		return l.stacked(names, rows, cols)
	}
	return l.upload(names, rows, cols, l.uploadProduct)
}

// products is product's upload for deltanet.Options.Products: nil (as stored) unless the load is FP8.
func (l *loader) products() func(names []string, parts []*qwen35.Tensor) (tensor.Tensor, error) {
	if !l.fp8 {
		return nil
	}
	return l.uploadProduct
}

// upload looks the named matrices up, checking their shapes, uploads them with up and releases them.
func (l *loader) upload(names []string, rows []int, cols int, up func([]string, []*qwen35.Tensor) (tensor.Tensor, error)) tensor.Tensor {
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
	t, l.err = up(names, parts)
	l.w.Release(names...)
	return t
}

// uploadProduct uploads the product weight stacked from parts as F8E4M3 (tensor.FromHostRowsFP8), or in bf16
// when the backend's FP8 products do not take its shape (Options.FP8).
func (l *loader) uploadProduct(names []string, parts []*qwen35.Tensor) (tensor.Tensor, error) {
	t, err := tensor.FromHostRowsFP8(l.b, parts...)
	var se *tensor.ShapeError
	if errors.As(err, &se) {
		bf := make([]*qwen35.Tensor, len(parts))
		for i, p := range parts {
			bf[i] = roundBF16(p)
		}
		if t, err = tensor.FromHostRows(l.b, bf...); err == nil {
			l.kept = append(l.kept, strings.Join(names, "+"))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("layers: %s: %w", strings.Join(names, ", "), err)
	}
	return t, nil
}

// roundBF16 returns t in bf16: t itself when it is, else its values each rounded to nearest even.
func roundBF16(t *qwen35.Tensor) *qwen35.Tensor {
	if t.DType == qwen35.BF16 {
		return t
	}
	out := &qwen35.Tensor{Shape: t.Shape, DType: qwen35.BF16, BF16: make([]uint16, t.Len())}
	for i, v := range t.Float32s() {
		out.BF16[i] = half.BF16FromF32(v)
	}
	return out
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
