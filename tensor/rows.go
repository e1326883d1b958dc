package tensor

import "github.com/kevgo/kev/internal/qwen35"

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
