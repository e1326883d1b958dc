package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	untrusted "github.com/kevgo/kev/internal/quote"
)

// IndexFile is the conventional name of a sharded checkpoint's index.
const IndexFile = "model.safetensors.index.json"

// Bounds on an index file: the largest real ones (tens of thousands of expert
// tensors) are a few megabytes, their metadata a few hundred bytes.
const (
	MaxIndexBytes    = 16 << 20 // the whole file
	MaxMetadataBytes = 64 << 10 // its "metadata" object, parsed into Go values
)

// Checkpoint is a set of safetensors files read as one: a sharded
// checkpoint, or a single file. Tensor names are unique across its files.
type Checkpoint struct {
	// Files are the open files, in the order they were given or, for an
	// index, sorted by name.
	Files []*File
	// Metadata is the index's "metadata" object (nil without an index).
	Metadata map[string]any

	where  map[string]*File
	closed bool
}

// OpenDir opens the checkpoint in dir: the files named by its
// model.safetensors.index.json when there is one, otherwise every
// model*.safetensors file in it.
func OpenDir(dir string) (*Checkpoint, error) {
	idx := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(idx); err == nil {
		return OpenIndex(idx)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, &FormatError{File: dir, Offset: -1, Reason: "no " + IndexFile + " and no model*.safetensors files"}
	}
	sort.Strings(paths)
	return OpenFiles(paths...)
}

// OpenFiles opens the given files as one checkpoint. A tensor name present in
// two files is a *FormatError naming both.
func OpenFiles(paths ...string) (*Checkpoint, error) {
	c := &Checkpoint{where: map[string]*File{}}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Files = append(c.Files, f)
		for _, name := range f.Names() {
			if g, dup := c.where[name]; dup {
				c.Close()
				return nil, &FormatError{File: p, Tensor: name, Offset: -1, Reason: "also present in " + g.Path}
			}
			c.where[name] = f
		}
	}
	return c, nil
}

// OpenIndex opens a sharded checkpoint through its index file
// (model.safetensors.index.json: {"metadata": {...}, "weight_map": {tensor:
// file}}). Every entry must name a file in the index's directory that holds
// the tensor; every tensor of those files must be in the weight map; no
// tensor may appear in two files.
func OpenIndex(indexPath string) (*Checkpoint, error) {
	ierr := func(tensor, format string, args ...any) error {
		return &FormatError{File: indexPath, Tensor: tensor, Offset: -1, Reason: fmt.Sprintf(format, args...)}
	}
	raw, err := readLimited(indexPath, MaxIndexBytes)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			return nil, ierr("", "index of more than %d bytes", MaxIndexBytes)
		}
		return nil, err
	}
	var top struct {
		Metadata  json.RawMessage `json:"metadata"`
		WeightMap json.RawMessage `json:"weight_map"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, ierr("", "bad JSON: %s", untrusted.Error(err))
	}
	var meta map[string]any
	if len(top.Metadata) > MaxMetadataBytes {
		return nil, ierr("", "metadata of %d bytes, over the %d-byte limit", len(top.Metadata), MaxMetadataBytes)
	}
	if top.Metadata != nil {
		if err := json.Unmarshal(top.Metadata, &meta); err != nil {
			return nil, ierr("", "metadata: %s", untrusted.Error(err))
		}
	}
	if top.WeightMap == nil {
		return nil, ierr("", "no weight_map")
	}
	wm, order, err := stringMap(top.WeightMap)
	if err != nil {
		return nil, ierr("", "weight_map: %s", untrusted.Error(err))
	}
	dir := filepath.Dir(indexPath)
	var files []string
	seen := map[string]bool{}
	for _, name := range order {
		fn := wm[name]
		if fn == "" || fn != filepath.Base(fn) || fn == "." || fn == ".." || strings.ContainsAny(fn, `/\`) {
			return nil, ierr(name, "file %s is not a plain file name", untrusted.Name(fn))
		}
		if !seen[fn] {
			seen[fn] = true
			files = append(files, fn)
		}
	}
	sort.Strings(files)
	paths := make([]string, len(files))
	for i, fn := range files {
		paths[i] = filepath.Join(dir, fn)
		if _, err := os.Stat(paths[i]); err != nil {
			t := ""
			for _, name := range order {
				if wm[name] == fn {
					t = name
					break
				}
			}
			return nil, ierr(t, "shard %s: %v", untrusted.Name(fn), err)
		}
	}
	c, err := OpenFiles(paths...)
	if err != nil {
		return nil, err
	}
	c.Metadata = meta
	for _, name := range order {
		f := c.where[name]
		if f == nil || filepath.Base(f.Path) != wm[name] {
			c.Close()
			if f != nil {
				return nil, ierr(name, "index says %s, but the tensor is in %s", untrusted.Name(wm[name]), f.Path)
			}
			return nil, ierr(name, "index says %s, which has no such tensor", untrusted.Name(wm[name]))
		}
	}
	for name, f := range c.where {
		if _, ok := wm[name]; !ok {
			c.Close()
			return nil, &FormatError{File: f.Path, Tensor: name, Offset: -1, Reason: "tensor is not in " + indexPath}
		}
	}
	return c, nil
}

// stringMap decodes a JSON object of strings, refusing duplicate keys, and
// returns the keys in document order.
func stringMap(raw []byte) (map[string]string, []string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil {
		return nil, nil, err
	} else if tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not an object")
	}
	m := map[string]string{}
	var order []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		key := tok.(string)
		if _, dup := m[key]; dup {
			return nil, nil, fmt.Errorf("duplicate entry %s", untrusted.Name(key))
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("entry %s is not a string", untrusted.Name(key))
		}
		m[key] = v
		order = append(order, key)
	}
	return m, order, nil
}

// Names lists every tensor name, sorted.
func (c *Checkpoint) Names() []string { return sortedKeys(c.where) }

// Has reports whether some file holds a tensor called name.
func (c *Checkpoint) Has(name string) bool { _, ok := c.where[name]; return ok }

// Tensor returns a zero-copy view of the named tensor: a *MissingError when
// no file has it, ErrClosed after Close.
func (c *Checkpoint) Tensor(name string) (*Tensor, error) {
	if c.closed {
		return nil, ErrClosed
	}
	f, ok := c.where[name]
	if !ok {
		where := "checkpoint"
		if len(c.Files) > 0 {
			where = filepath.Dir(c.Files[0].Path)
		}
		return nil, &MissingError{File: where, Tensor: name}
	}
	return f.Tensor(name)
}

// Close closes every file, returning the first error.
func (c *Checkpoint) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	var first error
	for _, f := range c.Files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

var errTooLarge = errors.New("file too large")

// readLimited reads a file of at most max bytes, never reading more than
// max+1 of a longer one (errTooLarge).
func readLimited(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errTooLarge
	}
	return b, nil
}
