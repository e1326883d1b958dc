package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/kevgo/kev/internal/half"
)

// Write writes tensors, in the given order, and metadata (may be nil) as a
// safetensors file. Names must be unique and not "__metadata__"; each
// tensor's Data must hold exactly Len elements of its DType. The header is
// padded with spaces to a multiple of 8 bytes, as the reference writer does.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	var hb strings.Builder
	hb.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hb.WriteByte(',')
		}
		first = false
	}
	if metadata != nil {
		sep()
		hb.WriteString(`"__metadata__":{`)
		for i, k := range sortedKeys(metadata) {
			if i > 0 {
				hb.WriteByte(',')
			}
			hb.Write(quote(k))
			hb.WriteByte(':')
			hb.Write(quote(metadata[k]))
		}
		hb.WriteByte('}')
	}
	seen := map[string]bool{}
	var off int64
	for _, t := range tensors {
		werr := func(format string, args ...any) error {
			return &FormatError{File: "(writer)", Tensor: t.Name, Offset: -1, Reason: fmt.Sprintf(format, args...)}
		}
		if t.Name == "" || t.Name == "__metadata__" {
			return werr("invalid tensor name")
		}
		if seen[t.Name] {
			return werr("duplicate tensor name")
		}
		seen[t.Name] = true
		if t.DType.Size() == 0 {
			return werr("unknown dtype %q", t.DType)
		}
		n := int64(1)
		for _, s := range t.Shape {
			if s < 0 {
				return werr("negative dimension in shape %v", t.Shape)
			}
			n *= int64(s)
		}
		if n*int64(t.DType.Size()) != int64(len(t.Data)) {
			return werr("%d data bytes for %s shape %v", len(t.Data), t.DType, t.Shape)
		}
		sep()
		hb.Write(quote(t.Name))
		hb.WriteString(`:{"dtype":"`)
		hb.WriteString(string(t.DType))
		hb.WriteString(`","shape":[`)
		for i, s := range t.Shape {
			if i > 0 {
				hb.WriteByte(',')
			}
			hb.WriteString(strconv.Itoa(s))
		}
		end := off + int64(len(t.Data))
		fmt.Fprintf(&hb, `],"data_offsets":[%d,%d]}`, off, end)
		off = end
	}
	hb.WriteByte('}')
	for hb.Len()%8 != 0 {
		hb.WriteByte(' ')
	}
	bw := bufio.NewWriter(w)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hb.Len()))
	bw.Write(lenBuf[:])
	bw.WriteString(hb.String())
	for _, t := range tensors {
		bw.Write(t.Data)
	}
	return bw.Flush()
}

// WriteFile writes tensors and metadata to a new file at path.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, tensors, metadata); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func quote(s string) []byte {
	b, _ := json.Marshal(s) // strings always marshal
	return b
}

// FromFloat32 builds a tensor of the given float dtype (F32, BF16 rounded to
// nearest even, F16, F64) from values in row-major order; len(values) must
// equal the product of shape.
func FromFloat32(name string, dtype DType, shape []int, values []float32) (Tensor, error) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	if n != len(values) {
		return Tensor{}, fmt.Errorf("safetensors: tensor %q: %d values for shape %v", name, len(values), shape)
	}
	t := Tensor{Name: name, DType: dtype, Shape: append([]int(nil), shape...), Data: make([]byte, n*dtype.Size())}
	d := t.Data
	switch dtype {
	case F32:
		for i, v := range values {
			binary.LittleEndian.PutUint32(d[4*i:], math.Float32bits(v))
		}
	case BF16:
		for i, v := range values {
			binary.LittleEndian.PutUint16(d[2*i:], half.BF16FromF32(v))
		}
	case F16:
		for i, v := range values {
			binary.LittleEndian.PutUint16(d[2*i:], half.F16FromF32(v))
		}
	case F64:
		for i, v := range values {
			binary.LittleEndian.PutUint64(d[8*i:], math.Float64bits(float64(v)))
		}
	default:
		return Tensor{}, &DTypeError{File: "(writer)", Tensor: name, DType: dtype, Want: "a float dtype (F32, BF16, F16, F64)"}
	}
	return t, nil
}
