//go:build cuda

package cudrv

/*
#include <cuda.h>
#include <stdint.h>

// kev_encode_tiled takes the device address as an integer (it is not a host pointer).
static CUresult kev_encode_tiled(CUtensorMap *m, CUtensorMapDataType dt, uint64_t addr, const cuuint64_t *dims,
		const cuuint64_t *strides, const cuuint32_t *box, const cuuint32_t *elem, CUtensorMapSwizzle sw) {
	return cuTensorMapEncodeTiled(m, dt, 2, (void *)(uintptr_t)addr, dims, strides,
		box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
		CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// TensorMap is an encoded CUtensorMap: 128 bytes that a kernel takes by value (64-byte aligned, marshalled with
// Args.Bytes(m[:], 64)) to drive the bulk tensor copy engine (TMA) on compute capability 9.0 and newer.
type TensorMap [128]byte

// TensorMapError reports a tensor-map description the driver would reject, naming the field.
type TensorMapError struct {
	Field  string // e.g. "Stride"
	Reason string
}

// Error formats the failure as "cudrv: tensor map: Field: Reason".
func (e *TensorMapError) Error() string {
	return fmt.Sprintf("cudrv: tensor map: %s: %s", e.Field, e.Reason)
}

// Tile2D describes a row-major matrix of bf16 (or, with Bytes, 8-bit) elements in device memory and the box one
// copy moves.
type Tile2D struct {
	Addr       cu.DevicePtr // 16-byte aligned
	Rows, Cols int          // matrix shape in elements; reads outside it are zero-filled
	Stride     int          // bytes between rows: a multiple of 16, at least Cols elements
	BoxRows    int          // 1..256
	BoxCols    int          // elements; at most 128 bytes with Swizzle128
	Swizzle128 bool         // 128-byte swizzle (the layout wgmma reads with a 128-byte swizzle descriptor)
	Bytes      bool         // 8-bit elements (FP8 codes, copied as uint8) instead of bf16
}

// EncodeTiled2D encodes t as a tiled tensor map of bf16 (uint8 with t.Bytes) elements (cuTensorMapEncodeTiled, L2
// promotion 256 B, zero fill). Dimension 0 of the map is the column (contiguous) index, dimension 1 the row.
func EncodeTiled2D(t Tile2D) (TensorMap, error) {
	var m TensorMap
	es, dt := 2, C.CUtensorMapDataType(C.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16)
	if t.Bytes {
		es, dt = 1, C.CU_TENSOR_MAP_DATA_TYPE_UINT8
	}
	switch {
	case t.Addr == 0 || t.Addr%16 != 0:
		return m, &TensorMapError{"Addr", fmt.Sprintf("%#x is not a 16-byte aligned device address", uintptr(t.Addr))}
	case t.Rows <= 0 || t.Cols <= 0:
		return m, &TensorMapError{"Rows, Cols", fmt.Sprintf("%d, %d must be positive", t.Rows, t.Cols)}
	case t.Stride%16 != 0 || t.Stride < es*t.Cols || int64(t.Stride) >= 1<<40:
		return m, &TensorMapError{"Stride", fmt.Sprintf("%d bytes must be a multiple of 16, ≥ %d and < 2^40", t.Stride, es*t.Cols)}
	case t.BoxRows < 1 || t.BoxRows > 256 || t.BoxCols < 1 || t.BoxCols > 256 || (es*t.BoxCols)%16 != 0:
		return m, &TensorMapError{"BoxRows, BoxCols", fmt.Sprintf("%d, %d must be in 1..256, BoxCols·%d a multiple of 16", t.BoxRows, t.BoxCols, es)}
	case t.Swizzle128 && es*t.BoxCols > 128:
		return m, &TensorMapError{"BoxCols", fmt.Sprintf("%d elements exceed the 128-byte swizzle span", t.BoxCols)}
	}
	dims := [2]C.cuuint64_t{C.cuuint64_t(t.Cols), C.cuuint64_t(t.Rows)}
	strides := [1]C.cuuint64_t{C.cuuint64_t(t.Stride)}
	box := [2]C.cuuint32_t{C.cuuint32_t(t.BoxCols), C.cuuint32_t(t.BoxRows)}
	elem := [2]C.cuuint32_t{1, 1}
	sw := C.CUtensorMapSwizzle(C.CU_TENSOR_MAP_SWIZZLE_NONE)
	if t.Swizzle128 {
		sw = C.CU_TENSOR_MAP_SWIZZLE_128B
	}
	var cm C.CUtensorMap
	r := C.kev_encode_tiled(&cm, dt, C.uint64_t(t.Addr), &dims[0], &strides[0], &box[0], &elem[0], sw)
	if err := check("cuTensorMapEncodeTiled", r); err != nil {
		return m, err
	}
	copy(m[:], unsafe.Slice((*byte)(unsafe.Pointer(&cm)), unsafe.Sizeof(cm)))
	return m, nil
}
