// Package safetensors reads and writes the safetensors checkpoint format:
// an 8-byte little-endian header length, a JSON header describing every
// tensor (dtype, shape, byte span) and optional string metadata, then the raw
// little-endian tensor bytes.
//
// Open maps a file into memory and hands out zero-copy views of its tensors;
// OpenIndex and OpenDir do the same for checkpoints sharded across several
// files by a model.safetensors.index.json. Every header is validated in full
// (length bounds, JSON, dtypes, shapes against spans, spans inside the data
// section, no gaps or overlaps) and every failure is a *FormatError naming the
// file and, where there is one, the tensor.
package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/kevgo/kev/internal/half"
	untrusted "github.com/kevgo/kev/internal/quote"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes (100 MB, the
// limit of the reference implementation).
const MaxHeaderSize = 100_000_000

// DType is a safetensors element type, spelled as in the header ("BF16").
type DType string

// The element types of the format.
const (
	BOOL    DType = "BOOL"
	U8      DType = "U8"
	I8      DType = "I8"
	F8E5M2  DType = "F8_E5M2"
	F8E4M3  DType = "F8_E4M3"
	I16     DType = "I16"
	U16     DType = "U16"
	F16     DType = "F16"
	BF16    DType = "BF16"
	I32     DType = "I32"
	U32     DType = "U32"
	F32     DType = "F32"
	F64     DType = "F64"
	I64     DType = "I64"
	U64     DType = "U64"
	unknown DType = ""
)

var dtypeSizes = map[DType]int{
	BOOL: 1, U8: 1, I8: 1, F8E5M2: 1, F8E4M3: 1,
	I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4,
	F64: 8, I64: 8, U64: 8,
}

// Size is the number of bytes of one element, or 0 for an unknown dtype.
func (d DType) Size() int { return dtypeSizes[d] }

// IsFloat reports whether Float32 can convert elements of type d
// (F32, F16, BF16 and F64).
func (d DType) IsFloat() bool { return d == F32 || d == F16 || d == BF16 || d == F64 }

// FormatError reports a malformed or inconsistent file. File is the path (or
// the name given to Parse), Tensor the tensor concerned ("" when none), and
// Offset the byte offset in the file where the problem lies (-1 when none).
type FormatError struct {
	File   string
	Tensor string
	Offset int64
	Reason string
}

// Error describes the failure and where it happened.
func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("safetensors: ")
	b.WriteString(e.File)
	if e.Tensor != "" {
		fmt.Fprintf(&b, ": tensor %s", untrusted.Name(e.Tensor))
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " at offset %d", e.Offset)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// DTypeError reports a tensor whose element type cannot be used as asked, for
// example an integer tensor read as floats.
type DTypeError struct {
	File   string
	Tensor string
	DType  DType
	Want   string // what the caller needed, e.g. "a float dtype"
}

// Error describes the failure and where it happened.
func (e *DTypeError) Error() string {
	return fmt.Sprintf("safetensors: %s: tensor %s has dtype %s, want %s", e.File, untrusted.Name(e.Tensor), untrusted.String(string(e.DType)), e.Want)
}

// ErrClosed is returned when a closed File or Checkpoint is used.
var ErrClosed = errors.New("safetensors: file closed")

// Tensor is a view of one tensor. Data holds its raw little-endian bytes; for
// tensors returned by File and Checkpoint it aliases the mapped file and is
// valid only until Close. File is the path the tensor was read from.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
	File  string
}

// Len is the number of elements, the product of Shape (1 for a scalar).
func (t *Tensor) Len() int {
	n := 1
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// Float32 converts the tensor to a new []float32 (F32, BF16 and F16 exactly,
// F64 rounded to nearest). Other dtypes give a *DTypeError.
func (t *Tensor) Float32() ([]float32, error) {
	if !t.DType.IsFloat() {
		return nil, t.dtypeError("a float dtype (F32, BF16, F16, F64)")
	}
	dst := make([]float32, t.Len())
	return dst, t.Float32Into(dst)
}

// Float32Into converts the tensor into dst, which must have Len elements.
func (t *Tensor) Float32Into(dst []float32) error {
	if !t.DType.IsFloat() {
		return t.dtypeError("a float dtype (F32, BF16, F16, F64)")
	}
	n := t.Len()
	if len(dst) != n {
		return fmt.Errorf("safetensors: %s: tensor %s has %d elements, destination %d", t.File, untrusted.Name(t.Name), n, len(dst))
	}
	if len(t.Data) != n*t.DType.Size() {
		return &FormatError{File: t.File, Tensor: t.Name, Offset: -1,
			Reason: fmt.Sprintf("%d data bytes for %d %s elements", len(t.Data), n, t.DType)}
	}
	src := t.Data
	switch t.DType {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case BF16:
		BF16BytesToF32(dst, src)
	case F16:
		for i := range dst {
			dst[i] = half.F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	}
	return nil
}

// BF16 returns the tensor's raw bfloat16 bits as a new []uint16. Only BF16
// tensors are accepted; other dtypes give a *DTypeError.
func (t *Tensor) BF16() ([]uint16, error) {
	if t.DType != BF16 {
		return nil, t.dtypeError("BF16")
	}
	n := t.Len()
	if len(t.Data) != 2*n {
		return nil, &FormatError{File: t.File, Tensor: t.Name, Offset: -1,
			Reason: fmt.Sprintf("%d data bytes for %d BF16 elements", len(t.Data), n)}
	}
	dst := make([]uint16, n)
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint16(t.Data[2*i:])
	}
	return dst, nil
}

func (t *Tensor) dtypeError(want string) error {
	return &DTypeError{File: t.File, Tensor: t.Name, DType: t.DType, Want: want}
}

// BF16BytesToF32 widens little-endian bfloat16 bytes src (2·len(dst) bytes)
// into dst.
func BF16BytesToF32(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(src[2*i])<<16 | uint32(src[2*i+1])<<24)
	}
}
