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
	"hash/crc32"
	"io"
	"math"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zip"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/quote"
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

// Limits bound what a file may make the loader allocate. A zero field takes
// DefaultLimits' value.
//
// No declared size is trusted: an entry is read as a stream and refused as
// soon as it yields more than it declares, so an archive cannot make Decode
// allocate more than the limits below, whatever its headers say.
type Limits struct {
	MaxPickleBytes  int64 // the data.pkl entry
	MaxStorageBytes int64 // largest storage entry
	MaxTotalBytes   int64 // all entries read, data.pkl included
	// MaxRatio is the largest expansion of a compressed entry over 1 MiB
	// (uncompressed bytes per compressed byte); beyond it the entry is
	// refused as a zip bomb. torch.save stores its entries uncompressed.
	MaxRatio    int64
	MaxElements int64 // largest tensor
	MaxStack    int   // pickle stack depth, MARKs and list length
	MaxMemo     int   // pickle memo entries
	// MaxLongBytes bounds one pickled integer: the bytes of LONG1/LONG4, the
	// digits of a text LONG. It is checked before anything is parsed.
	MaxLongBytes int
	// MaxObjectBytes bounds the objects the pickle builds (an estimate of
	// their bytes: strings, containers, memo, stack, shapes; the storages
	// are not counted, they are the file's own). Zero gives each file
	// ObjectBytesBase plus ObjectBytesPerByte times its data.pkl, so that a
	// pickle and what it builds take at most about twice its size (plus 1
	// MiB): a 476 KB pickle that built 5 GB of copies is refused at 1.5 MB. A head's
	// pickle (about 1 KB) builds about 12 KB; a pickle of a whole state dict
	// builds about 11 times its size and needs a larger bound set here.
	MaxObjectBytes int64
	// MaxInflatedBytes bounds what the compressed entries inflate to, all
	// together. Zero gives twice the archive's size plus 1 MiB: torch.save
	// stores its entries, so a compressed one is rare, and an 8 MB archive
	// holding a deflated 1 GiB storage is refused before it is read.
	MaxInflatedBytes int64
}

// The per-file objects budget when Limits.MaxObjectBytes is 0: a fixed base
// for the small pickles every archive has, plus the pickle's size.
const (
	ObjectBytesBase    = 1 << 20
	ObjectBytesPerByte = 1
)

// DefaultLimits suit any real head file (kilobytes to a few megabytes: a
// 27B-class head is 5 MB) with a wide margin: data.pkl up to 64 MiB, one
// storage and the whole archive up to 1 GiB, compressed entries expanding at
// most 200:1.
var DefaultLimits = Limits{
	MaxPickleBytes:  64 << 20,
	MaxStorageBytes: 1 << 30,
	MaxTotalBytes:   1 << 30,
	MaxRatio:        200,
	MaxElements:     1 << 34,
	MaxStack:        1 << 22,
	MaxMemo:         1 << 22,
	MaxLongBytes:    1 << 10,
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	set := func(v *int64, def int64) {
		if *v <= 0 {
			*v = def
		}
	}
	set(&l.MaxPickleBytes, d.MaxPickleBytes)
	set(&l.MaxStorageBytes, d.MaxStorageBytes)
	set(&l.MaxTotalBytes, d.MaxTotalBytes)
	set(&l.MaxRatio, d.MaxRatio)
	set(&l.MaxElements, d.MaxElements)
	if l.MaxStack <= 0 {
		l.MaxStack = d.MaxStack
	}
	if l.MaxMemo <= 0 {
		l.MaxMemo = d.MaxMemo
	}
	if l.MaxLongBytes <= 0 {
		l.MaxLongBytes = d.MaxLongBytes
	}
	return l
}

// minBombBytes is the size under which a compressed entry is never refused
// for its compression ratio.
const minBombBytes = 1 << 20

// ErrLimit is the Err of an *Error that refuses an entry or a value over one
// of the Limits: a declared size over its limit, an entry longer than it
// declares, a zip bomb, a pickled integer too long.
var ErrLimit = errors.New("torchpt: over a size limit")

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
		b.WriteString(entryName(e.Entry))
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

// entryName shows an archive member's name as is when it is short and
// printable, else quoted and cut (names come from the file).
func entryName(name string) string {
	if len(name) > quote.Max {
		return quote.String(name)
	}
	for _, r := range name {
		if !strconv.IsPrint(r) {
			return quote.String(name)
		}
	}
	return name
}

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
	lim = lim.withDefaults()
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
				return nil, fail(f.Name, -1, nil, "second data.pkl (first in %s/)", entryName(root))
			}
			root = path.Dir(f.Name)
		}
	}
	if root == "" {
		return nil, fail("", -1, nil, "no <root>/data.pkl entry")
	}
	budget := lim.MaxTotalBytes // bytes left to read in all
	inflate := lim.MaxInflatedBytes
	if inflate <= 0 {
		inflate = 2*size + 1<<20
	}
	inflateLeft := inflate // bytes compressed entries may still inflate to
	// read reads one entry as a stream, trusting none of its headers: what
	// it holds may not exceed max, the budget, what the header declares, nor
	// (compressed) MaxRatio times its compressed size.
	read := func(f *zip.File, maxBytes int64) ([]byte, error) {
		declared := f.UncompressedSize64
		limit := func(format string, args ...any) error { return fail(f.Name, -1, ErrLimit, format, args...) }
		switch {
		case declared > uint64(maxBytes):
			return nil, limit("entry declares %d bytes, over the %d-byte limit", declared, maxBytes)
		case declared > uint64(budget):
			return nil, limit("entry declares %d bytes, over the %d bytes left of the %d-byte limit on the archive", declared, budget, lim.MaxTotalBytes)
		case f.CompressedSize64 > uint64(size):
			return nil, fail(f.Name, -1, nil, "entry's compressed size %d is larger than the %d-byte archive", f.CompressedSize64, size)
		case f.Method == zip.Store && declared != f.CompressedSize64:
			return nil, fail(f.Name, -1, nil, "stored entry declares %d bytes but occupies %d", declared, f.CompressedSize64)
		case f.Method != zip.Store && declared > minBombBytes && declared/max(f.CompressedSize64, 1) > uint64(lim.MaxRatio):
			return nil, limit("entry expands %d compressed bytes to %d, more than %d:1 (a zip bomb?)", f.CompressedSize64, declared, lim.MaxRatio)
		case f.Method != zip.Store && declared > uint64(inflateLeft):
			return nil, limit("compressed entry declares %d bytes, over the %d bytes left of the %d that compressed entries may inflate to in a %d-byte archive", declared, inflateLeft, inflate, size)
		}
		raw, err := f.OpenRaw()
		if err != nil {
			return nil, fail(f.Name, -1, err, "%v", err)
		}
		var src io.Reader
		switch f.Method {
		case zip.Store:
			src = raw
		case zip.Deflate:
			fr := flate.NewReader(raw)
			defer fr.Close()
			src = fr
		default:
			return nil, fail(f.Name, -1, nil, "compression method %d is not supported", f.Method)
		}
		// The declared size is bounded by now: a stored entry's by the
		// archive's size, a compressed one's by what compressed entries may
		// inflate to. Read into exactly that much, and one byte more to see
		// an entry longer than it says.
		if f.Method != zip.Store {
			inflateLeft -= int64(declared)
		}
		buf := make([]byte, declared+1)
		h := crc32.NewIEEE()
		k, err := io.ReadFull(io.TeeReader(src, h), buf)
		n := int64(k)
		if err == io.ErrUnexpectedEOF || err == io.EOF {
			err = nil
		}
		switch {
		case uint64(n) > declared:
			return nil, limit("entry is longer than the %d bytes it declares", declared)
		case err != nil:
			return nil, fail(f.Name, -1, err, "%v", err)
		case uint64(n) < declared:
			return nil, fail(f.Name, -1, io.ErrUnexpectedEOF, "entry holds %d bytes, shorter than the %d it declares", n, declared)
		case h.Sum32() != f.CRC32:
			return nil, fail(f.Name, -1, zip.ErrChecksum, "CRC-32 %08x, the header says %08x", h.Sum32(), f.CRC32)
		}
		budget -= n
		return buf[:n:n], nil
	}
	if bo, ok := entries[root+"/byteorder"]; ok {
		b, err := read(bo, 16)
		if err != nil {
			return nil, err
		}
		if string(b) != "little" {
			return nil, fail(bo.Name, -1, nil, "byte order %s is not supported", quote.Bytes(b))
		}
	}
	pklEntry := root + "/data.pkl"
	pkl, err := read(entries[pklEntry], lim.MaxPickleBytes)
	if err != nil {
		return nil, err
	}
	storages := map[string]*storage{}
	u := &unpickler{data: pkl, memo: map[uint32]any{}, limits: lim,
		maxBuilt: lim.MaxObjectBytes}
	if u.maxBuilt <= 0 {
		u.maxBuilt = ObjectBytesBase + ObjectBytesPerByte*int64(len(pkl))
	}
	u.load = func(pid Tuple) (any, error) {
		if len(pid) != 5 {
			return nil, fmt.Errorf("persistent id has %d fields, want 5", len(pid))
		}
		if tag, _ := pid[0].(string); tag != "storage" {
			return nil, fmt.Errorf("persistent id kind %s is not \"storage\"", describe(pid[0]))
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
		if !ok || key == "" || len(key) > 256 || strings.ContainsAny(key, "/\\") || key == "." || key == ".." {
			return nil, fmt.Errorf("bad storage key %s", describe(pid[2]))
		}
		if _, ok := pid[3].(string); !ok {
			return nil, fmt.Errorf("storage location is a %s", typeName(pid[3]))
		}
		numel, ok := pid[4].(int64)
		if !ok || numel < 0 || numel > lim.MaxStorageBytes/int64(dt.Size()) {
			return nil, fmt.Errorf("storage size %s is not valid", describe(pid[4]))
		}
		if s, ok := storages[key]; ok {
			if s.dtype != dt || s.numel != numel {
				return nil, fmt.Errorf("storage %s used as %s[%d] and %s[%d]", quote.String(key), s.dtype, s.numel, dt, numel)
			}
			return s, nil
		}
		ent, ok := entries[root+"/data/"+key]
		if !ok {
			return nil, fmt.Errorf("storage %s: no entry %s", quote.String(key), entryName(root+"/data/"+key))
		}
		if want := uint64(numel) * uint64(dt.Size()); ent.UncompressedSize64 != want {
			return nil, fmt.Errorf("storage %s: entry holds %d bytes, %s[%d] needs %d", quote.String(key), ent.UncompressedSize64, dt, numel, want)
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
