package safetensors

import (
	"fmt"
	"io"
	"os"
	"sort"

	untrusted "github.com/kevgo/kev/internal/quote"
)

// File is an open safetensors file. Its tensors are zero-copy views of the
// file's bytes, memory-mapped where the platform allows it (read into memory
// otherwise); they stay valid until Close.
type File struct {
	// Path is the file's path, as given to Open (or the name given to Parse).
	Path string
	// Metadata is the header's "__metadata__" map, nil when absent.
	Metadata map[string]string

	header *Header
	byName map[string]int
	data   []byte // the whole file
	unmap  func() error
	closed bool
}

// MissingError reports a tensor that a file or checkpoint does not hold.
type MissingError struct {
	File   string
	Tensor string
}

// Error describes the failure and where it happened.
func (e *MissingError) Error() string {
	return fmt.Sprintf("safetensors: %s: no tensor %s", e.File, untrusted.Name(e.Tensor))
}

// Open memory-maps the safetensors file at path and validates its header.
// If mapping fails the file is read into memory instead.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	size := st.Size()
	if !st.Mode().IsRegular() {
		return nil, &FormatError{File: path, Offset: -1, Reason: "not a regular file"}
	}
	// Validate the header before mapping so that garbage never costs a map.
	var lenBuf [8]byte
	if size < 8 {
		return nil, &FormatError{File: path, Offset: 0, Reason: fmt.Sprintf("file is %d bytes, shorter than the 8-byte header length", size)}
	}
	if _, err := fh.ReadAt(lenBuf[:], 0); err != nil {
		return nil, err
	}
	n := binaryLE64(lenBuf[:])
	if n > MaxHeaderSize || n > uint64(size-8) {
		_, err := ParseHeader(path, lenBuf[:], size)
		return nil, err
	}
	data, unmap, err := mapFile(fh, size)
	if err != nil {
		data = make([]byte, size)
		if _, err := io.ReadFull(io.NewSectionReader(fh, 0, size), data); err != nil {
			return nil, err
		}
		unmap = nil
	}
	f, err := newFile(path, data)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// Parse validates data, the complete bytes of a safetensors file, and
// returns a File whose tensors alias data. name stands for the file in
// errors.
func Parse(name string, data []byte) (*File, error) { return newFile(name, data) }

func newFile(name string, data []byte) (*File, error) {
	h, err := ParseHeader(name, data, int64(len(data)))
	if err != nil {
		return nil, err
	}
	f := &File{Path: name, Metadata: h.Metadata, header: h, data: data, byName: make(map[string]int, len(h.Tensors))}
	for i, t := range h.Tensors {
		f.byName[t.Name] = i
	}
	return f, nil
}

// Header returns the file's parsed header.
func (f *File) Header() *Header { return f.header }

// Names lists the tensor names in data order.
func (f *File) Names() []string {
	names := make([]string, len(f.header.Tensors))
	for i, t := range f.header.Tensors {
		names[i] = t.Name
	}
	return names
}

// Has reports whether the file holds a tensor called name.
func (f *File) Has(name string) bool { _, ok := f.byName[name]; return ok }

// Tensor returns a zero-copy view of the named tensor: a *MissingError when
// the file has none, ErrClosed after Close.
func (f *File) Tensor(name string) (*Tensor, error) {
	if f.closed {
		return nil, ErrClosed
	}
	i, ok := f.byName[name]
	if !ok {
		return nil, &MissingError{File: f.Path, Tensor: name}
	}
	return f.view(i), nil
}

func (f *File) view(i int) *Tensor {
	t := f.header.Tensors[i]
	start := f.header.DataStart()
	return &Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, File: f.Path,
		Data: f.data[start+t.Begin : start+t.End : start+t.End]}
}

// Tensors returns views of all tensors in data order.
func (f *File) Tensors() ([]*Tensor, error) {
	if f.closed {
		return nil, ErrClosed
	}
	out := make([]*Tensor, len(f.header.Tensors))
	for i := range out {
		out[i] = f.view(i)
	}
	return out, nil
}

// Close releases the file's mapping. Views obtained earlier must not be used
// afterwards. Closing twice is harmless.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	f.data = nil
	if f.unmap != nil {
		u := f.unmap
		f.unmap = nil
		return u()
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
