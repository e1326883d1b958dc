package tensor

import (
	"fmt"

	"github.com/kevgo/kev/internal/qwen35"
)

// RowsUploader is implemented by backends that can upload several 2-D host tensors stacked by rows as one tensor
// without first stacking them on the host (a load then copies each weight once).
type RowsUploader interface {
	// FromHostRows uploads parts, which have equal column counts, stacked by rows in order, as FromHost would
	// upload qwen35.ConcatRows(parts...).
	FromHostRows(parts ...*qwen35.Tensor) (Tensor, error)
}

// FromHostRows uploads parts stacked by rows: with b's FromHostRows when it has one, else FromHost of their
// concatenation (a single part is uploaded as it is).
func FromHostRows(b Backend, parts ...*qwen35.Tensor) (Tensor, error) {
	if len(parts) == 1 {
		return b.FromHost(parts[0])
	}
	if ru, ok := b.(RowsUploader); ok {
		return ru.FromHostRows(parts...)
	}
	return b.FromHost(qwen35.ConcatRows(parts...))
}

// FromHostRowsFP8 uploads parts, 2-D host tensors of equal column counts, stacked by rows in order, as one F8E4M3
// weight: FromFloat32FP8 of their values (Float32s) concatenated, each row quantized with its own scale, so that a
// row's codes do not depend on the parts beside it. A single F32 part is passed on without a copy. Parts that are
// not 2-D matrices of one width are a *ShapeError; a backend without FP8 products gives a *DTypeError.
func FromHostRowsFP8(b Backend, parts ...*qwen35.Tensor) (Tensor, error) {
	const op = "FromHostRowsFP8"
	if len(parts) == 0 {
		return nil, &ShapeError{Op: op, Arg: "parts", Want: "one or more [rows, K] matrices"}
	}
	rows := 0
	for i, p := range parts {
		if p == nil || len(p.Shape) != 2 || p.Shape[1] != parts[0].Shape[1] {
			var shape []int
			if p != nil {
				shape = p.Shape
			}
			want := "[rows, K]"
			if i > 0 && len(parts[0].Shape) == 2 {
				want = fmt.Sprintf("[rows, %d] (the width of part 0)", parts[0].Shape[1])
			}
			return nil, &ShapeError{Op: op, Arg: fmt.Sprintf("parts[%d]", i), Shape: shape, Want: want}
		}
		rows += p.Shape[0]
	}
	k := parts[0].Shape[1]
	if len(parts) == 1 {
		return FromFloat32FP8(b, []int{rows, k}, parts[0].Float32s())
	}
	all := make([]float32, 0, rows*k)
	for _, p := range parts {
		all = append(all, p.Float32s()...)
	}
	return FromFloat32FP8(b, []int{rows, k}, all)
}
