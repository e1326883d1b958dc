//go:build cuda

package cuda

import (
	"errors"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// FromHostRows uploads 2-D tensors with equal column counts stacked by rows (tensor.RowsUploader): when every part
// is BF16, each is copied straight into its rows of one BF16 tensor, with no stacked copy on the host; otherwise as
// FromHost of qwen35.ConcatRows.
func (b *Backend) FromHostRows(parts ...*qwen35.Tensor) (tensor.Tensor, error) {
	if len(parts) == 0 {
		return nil, errors.New("cuda: FromHostRows: no tensors")
	}
	rows, cols := 0, -1
	for _, p := range parts {
		if p == nil || len(p.Shape) != 2 || (cols >= 0 && p.Shape[1] != cols) {
			return nil, errors.New("cuda: FromHostRows: want 2-D tensors with equal column counts")
		}
		if p.DType != qwen35.BF16 {
			return b.FromHost(qwen35.ConcatRows(parts...))
		}
		if err := checkShape(p.Shape, len(p.BF16)); err != nil {
			return nil, err
		}
		rows, cols = rows+p.Shape[0], p.Shape[1]
	}
	var t *Tensor
	err := b.run(func(s *scope) error {
		var err error
		if t, err = s.newTensor(tensor.BF16, false, []int{rows, cols}); err != nil { // weights: no room past the rows
			return err
		}
		var off int64
		for _, p := range parts {
			n := int64(2 * len(p.BF16))
			if n == 0 {
				continue
			}
			raw := unsafe.Slice((*byte)(unsafe.Pointer(&p.BF16[0])), n)
			if err := s.q.Upload(Buffer{Ptr: t.buf.Ptr + cu.DevicePtr(off), Bytes: n}, raw); err != nil {
				return err
			}
			off += n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	t.loaded = true
	return t, nil
}
