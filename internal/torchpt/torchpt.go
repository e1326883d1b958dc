// Package torchpt reads torch.save archives (the zip format PyTorch has
// written since 1.6) without Python: the pickle is run by a restricted
// unpickler that knows plain containers and scalars, tensors and a handful of
// torch globals, and refuses every other global by name, never executing
// anything.
//
// A loaded file is a tree of Go values: *Dict (dict and OrderedDict, keys in
// insertion order), *List, Tuple, string, []byte, int64 (or *big.Int beyond
// 64 bits), float64, bool, nil, and *Tensor for tensors. Values reached
// twice through the pickle memo are shared, so a hostile file can build a
// cyclic tree; walk untrusted trees with a depth limit.
package torchpt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"strings"

	"github.com/klauspost/compress/zip"

	"github.com/kevgo/kev/internal/half"
)

// DType is a tensor element type.
type DType uint8

// The element types of torch storages.
const (
	Float32 DType = iota + 1
	Float64
	Float16
	BFloat16
	Int64
	Int32
	Int16
	Int8
	Uint8
	Bool
)

var dtypeInfo = map[DType]struct {
	name string
	size int
}{
	Float32: {"float32", 4}, Float64: {"float64", 8}, Float16: {"float16", 2}, BFloat16: {"bfloat16", 2},
	Int64: {"int64", 8}, Int32: {"int32", 4}, Int16: {"int16", 2}, Int8: {"int8", 1}, Uint8: {"uint8", 1}, Bool: {"bool", 1},
}

// String returns torch's name for d, e.g. "float32".
func (d DType) String() string {
	if i, ok := dtypeInfo[d]; ok {
		return i.name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size is the number of bytes per element.
func (d DType) Size() int { return dtypeInfo[d].size }

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == Float32 || d == Float64 || d == Float16 || d == BFloat16 }

// Tensor is a tensor view onto a storage: element (i0, i1, ...) lives at
// storage element Offset + Σ i_k·Stride[k]. Storage holds the whole storage's
// little-endian bytes, possibly shared with other tensors.
type Tensor struct {
	DType        DType
	Shape        []int
	Stride       []int
	Offset       int // in elements
	Storage      []byte
	StorageKey   string // the archive's data/<key> entry
	RequiresGrad bool
	Parameter    bool // saved as an nn.Parameter
}

// Len is the number of elements (1 for a scalar).
func (t *Tensor) Len() int {
	n := 1
	for _, s := range t.Shape {
		n *= s
	}
	return n
}

// Float32 returns the tensor's elements in row-major order as a new
// []float32, following the strides. Float types only; F64 rounds to nearest.
func (t *Tensor) Float32() ([]float32, error) {
	if !t.DType.IsFloat() {
		return nil, fmt.Errorf("torchpt: tensor of dtype %s is not a float tensor", t.DType)
	}
	size := t.DType.Size()
	conv := func(i int) float32 { // storage element i
		b := t.Storage[i*size:]
		switch t.DType {
		case Float32:
			return math.Float32frombits(binary.LittleEndian.Uint32(b))
		case BFloat16:
			return half.BF16ToF32(binary.LittleEndian.Uint16(b))
		case Float16:
			return half.F16ToF32(binary.LittleEndian.Uint16(b))
		default:
			return float32(math.Float64frombits(binary.LittleEndian.Uint64(b)))
		}
	}
	out := make([]float32, t.Len())
	if len(out) == 0 {
		return out, nil
	}
	idx := make([]int, len(t.Shape))
	pos := t.Offset
	for i := range out {
		out[i] = conv(pos)
		for k := len(idx) - 1; k >= 0; k-- {
			idx[k]++
			pos += t.Stride[k]
			if idx[k] < t.Shape[k] {
				break
			}
			pos -= idx[k] * t.Stride[k]
			idx[k] = 0
		}
	}
	return out, nil
}

// Limits bound what a file may make the loader allocate.
type Limits struct {
	MaxStorageBytes int64 // largest storage entry
	MaxElements     int64 // largest tensor
	MaxStack        int   // pickle stack depth, MARKs and list length
	MaxMemo         int   // pickle memo entries
	MaxLongBytes    int   // bytes of one pickled integer
}

// DefaultLimits suit any real checkpoint file.
var DefaultLimits = Limits{
	MaxStorageBytes: 1 << 36,
	MaxElements:     1 << 34,
	MaxStack:        1 << 22,
	MaxMemo:         1 << 22,
	MaxLongBytes:    1 << 10,
}

// Error reports a file that cannot be loaded. Entry is the archive member
// concerned ("archive/data.pkl"), Offset the byte offset in it (-1 when
// none). Err, when set, is the underlying error (a *ForbiddenGlobalError for
// a refused global).
type Error struct {
	File   string
	Entry  string
	Offset int64
	Reason string
	Err    error
}

// Error describes the failure and where it happened.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("torchpt: ")
	b.WriteString(e.File)
	if e.Entry != "" {
		b.WriteString(": ")
		b.WriteString(e.Entry)
	}
	if e.Offset >= 0 {
		fmt.Fprintf(&b, " at offset %d", e.Offset)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Load reads the torch.save archive at path.
func Load(path string) (any, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return Decode(f, st.Size(), path, DefaultLimits)
}

// Decode reads a torch.save archive of size bytes from r; name stands for
// the file in errors.
func Decode(r io.ReaderAt, size int64, name string, lim Limits) (any, error) {
	fail := func(entry string, off int64, err error, format string, args ...any) error {
		return &Error{File: name, Entry: entry, Offset: off, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		if size >= 2 {
			var magic [2]byte
			if _, err := r.ReadAt(magic[:], 0); err == nil && magic[0] == 0x80 {
				return nil, fail("", -1, nil, "legacy (non-zip) torch.save format is not supported")
			}
		}
		return nil, fail("", -1, err, "not a zip archive: %v", err)
	}
	entries := map[string]*zip.File{}
	root := ""
	for _, f := range zr.File {
		if _, dup := entries[f.Name]; dup {
			return nil, fail(f.Name, -1, nil, "duplicate archive entry")
		}
		entries[f.Name] = f
		if path.Base(f.Name) == "data.pkl" && strings.Count(f.Name, "/") == 1 {
			if root != "" {
				return nil, fail(f.Name, -1, nil, "second data.pkl (first in %s/)", root)
			}
			root = path.Dir(f.Name)
		}
	}
	if root == "" {
		return nil, fail("", -1, nil, "no <root>/data.pkl entry")
	}
	read := func(f *zip.File, max int64) ([]byte, error) {
		if f.UncompressedSize64 > uint64(max) {
			return nil, fail(f.Name, -1, nil, "entry of %d bytes exceeds the %d-byte limit", f.UncompressedSize64, max)
		}
		if f.Method == zip.Store && f.UncompressedSize64 > uint64(size) {
			return nil, fail(f.Name, -1, nil, "stored entry of %d bytes is larger than the archive", f.UncompressedSize64)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, fail(f.Name, -1, err, "%v", err)
		}
		defer rc.Close()
		b := make([]byte, f.UncompressedSize64)
		if _, err := io.ReadFull(rc, b); err != nil {
			return nil, fail(f.Name, -1, err, "%v", err)
		}
		var extra [1]byte
		if n, _ := rc.Read(extra[:]); n > 0 {
			return nil, fail(f.Name, -1, nil, "entry longer than its declared size")
		}
		return b, nil
	}
	if bo, ok := entries[root+"/byteorder"]; ok {
		b, err := read(bo, 16)
		if err != nil {
			return nil, err
		}
		if string(b) != "little" {
			return nil, fail(bo.Name, -1, nil, "byte order %q is not supported", b)
		}
	}
	pklEntry := root + "/data.pkl"
	pkl, err := read(entries[pklEntry], lim.MaxStorageBytes)
	if err != nil {
		return nil, err
	}
	storages := map[string]*storage{}
	u := &unpickler{data: pkl, memo: map[uint32]any{}, limits: lim}
	u.load = func(pid Tuple) (any, error) {
		if len(pid) != 5 {
			return nil, fmt.Errorf("persistent id has %d fields, want 5", len(pid))
		}
		if tag, _ := pid[0].(string); tag != "storage" {
			return nil, fmt.Errorf("persistent id kind %v is not \"storage\"", pid[0])
		}
		st, ok := pid[1].(Global)
		if !ok {
			return nil, fmt.Errorf("storage type is a %s", typeName(pid[1]))
		}
		var dt DType
		if st == gUntypedStorage {
			dt = Uint8
		} else if dt, ok = storageTypes[st.Name]; !ok || st.Module != "torch" {
			return nil, fmt.Errorf("storage type %s is not supported", st)
		}
		key, ok := pid[2].(string)
		if !ok || key == "" || strings.ContainsAny(key, "/\\") || key == "." || key == ".." {
			return nil, fmt.Errorf("bad storage key %v", pid[2])
		}
		if _, ok := pid[3].(string); !ok {
			return nil, fmt.Errorf("storage location is a %s", typeName(pid[3]))
		}
		numel, ok := pid[4].(int64)
		if !ok || numel < 0 || numel > lim.MaxStorageBytes/int64(dt.Size()) {
			return nil, fmt.Errorf("storage size %v is not valid", pid[4])
		}
		if s, ok := storages[key]; ok {
			if s.dtype != dt || s.numel != numel {
				return nil, fmt.Errorf("storage %s used as %s[%d] and %s[%d]", key, s.dtype, s.numel, dt, numel)
			}
			return s, nil
		}
		ent, ok := entries[root+"/data/"+key]
		if !ok {
			return nil, fmt.Errorf("storage %s: no entry %s/data/%s", key, root, key)
		}
		if want := uint64(numel) * uint64(dt.Size()); ent.UncompressedSize64 != want {
			return nil, fmt.Errorf("storage %s: entry holds %d bytes, %s[%d] needs %d", key, ent.UncompressedSize64, dt, numel, want)
		}
		data, err := read(ent, lim.MaxStorageBytes)
		if err != nil {
			return nil, err
		}
		s := &storage{dtype: dt, key: key, numel: numel, data: data}
		storages[key] = s
		return s, nil
	}
	v, err := u.run()
	if err != nil {
		var oe *opError
		if errors.As(err, &oe) {
			var inner *Error
			if errors.As(oe.err, &inner) {
				return nil, inner
			}
			return nil, fail(pklEntry, int64(oe.off), oe.err, "%s", oe.reason)
		}
		return nil, fail(pklEntry, -1, err, "%v", err)
	}
	if _, bad := v.(*storage); bad {
		return nil, fail(pklEntry, -1, nil, "a bare storage is not supported")
	}
	return v, nil
}
