package safetensors

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

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
	ix, err := readIndex(indexPath)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(indexPath)
	for i, fn := range ix.files { // in order of first appearance: the first entry with a bad name is named
		if fn == "" || fn != filepath.Base(fn) || fn == "." || fn == ".." || strings.ContainsAny(fn, `/\`) {
			return nil, ierr(ix.firstOf(i), "file %s is not a plain file name", untrusted.Name(fn))
		}
	}
	byName := make([]int, len(ix.files))
	for i := range byName {
		byName[i] = i
	}
	sort.Slice(byName, func(a, b int) bool { return ix.files[byName[a]] < ix.files[byName[b]] })
	paths := make([]string, len(ix.files))
	for k, i := range byName {
		paths[k] = filepath.Join(dir, ix.files[i])
		if _, err := os.Stat(paths[k]); err != nil {
			return nil, ierr(ix.firstOf(i), "shard %s: %v", untrusted.Name(ix.files[i]), err)
		}
	}
	c, err := OpenFiles(paths...)
	if err != nil {
		return nil, err
	}
	c.Metadata = ix.meta
	for e := range ix.entries.all() {
		f, fn := c.where[e.name], ix.files[e.file]
		if f == nil || filepath.Base(f.Path) != fn {
			c.Close()
			if f != nil {
				return nil, ierr(e.name, "index says %s, but the tensor is in %s", untrusted.Name(fn), f.Path)
			}
			return nil, ierr(e.name, "index says %s, which has no such tensor", untrusted.Name(fn))
		}
	}
	if len(c.where) != ix.entries.n { // every entry's tensor is in its file: one more tensor is not in the index
		for name, f := range c.where {
			if !ix.has(name) {
				c.Close()
				return nil, &FormatError{File: f.Path, Tensor: name, Offset: -1, Reason: "tensor is not in " + indexPath}
			}
		}
	}
	return c, nil
}

// index is a parsed index file: its metadata, and its weight map as entries in document order, each naming its
// tensor and its file (an index into files, which hold each file name once, in order of first appearance).
type index struct {
	meta    map[string]any
	files   []string
	entries entryList
	sorted  []int32 // entries by name, for has
}

// indexEntry is one entry of a weight map.
type indexEntry struct {
	name string
	file int32
}

// entryList holds a weight map's entries in blocks of entryBlock, so that a big map is never copied as it grows
// (append's copies of one slice would allocate several times the entries' size).
type entryList struct {
	blocks [][]indexEntry
	n      int
}

// entryBlock is how many entries a block of an entryList holds.
const entryBlock = 1024

// add appends an entry.
func (l *entryList) add(e indexEntry) {
	if l.n%entryBlock == 0 {
		l.blocks = append(l.blocks, make([]indexEntry, entryBlock))
	}
	l.blocks[l.n/entryBlock][l.n%entryBlock] = e
	l.n++
}

// at returns entry i.
func (l *entryList) at(i int32) indexEntry { return l.blocks[i/entryBlock][i%entryBlock] }

// all yields the entries in order.
func (l *entryList) all() iter.Seq[indexEntry] {
	return func(yield func(indexEntry) bool) {
		for i := range l.n {
			if !yield(l.blocks[i/entryBlock][i%entryBlock]) {
				return
			}
		}
	}
}

// firstOf returns the tensor of the first entry naming file i.
func (ix *index) firstOf(i int) string {
	for e := range ix.entries.all() {
		if int(e.file) == i {
			return e.name
		}
	}
	return ""
}

// has reports whether the weight map has an entry for a tensor.
func (ix *index) has(name string) bool {
	k := sort.Search(len(ix.sorted), func(k int) bool { return ix.entries.at(ix.sorted[k]).name >= name })
	return k < len(ix.sorted) && ix.entries.at(ix.sorted[k]).name == name
}

// readIndex reads an index file as it streams it, never holding the whole file: it keeps the weight map's names
// and entries, each file name once, and allocates little besides (TestIndexAllocations: at most twice the file's
// size, garbage included). The metadata is parsed into Go values only when its JSON is at most MaxMetadataBytes;
// the weight map must be an object of strings with unique keys; other keys are checked and skipped. Keys match
// exactly, and "metadata" or "weight_map" twice is an error (encoding/json would have matched any case and kept the
// last).
func readIndex(indexPath string) (*index, error) {
	ierr := func(format string, args ...any) error {
		return &FormatError{File: indexPath, Offset: -1, Reason: fmt.Sprintf(format, args...)}
	}
	f, err := os.Open(indexPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	tooLarge := ierr("index of more than %d bytes", MaxIndexBytes)
	if st.Size() > MaxIndexBytes {
		return nil, tooLarge
	}
	cr := &countingReader{r: io.LimitReader(f, MaxIndexBytes+1)} // a file that grew since
	sc := &indexScanner{r: bufio.NewReader(cr)}
	ix, err := sc.index()
	switch {
	case cr.n > MaxIndexBytes:
		return nil, tooLarge
	case err != nil:
		var fe *FormatError
		if errors.As(err, &fe) {
			fe.File = indexPath
			return nil, fe
		}
		return nil, ierr("bad JSON: %s", untrusted.Error(err))
	}
	return ix, nil
}

// indexScanner reads an index's JSON a byte at a time. Its errors are syntax errors, or *FormatErrors without File.
type indexScanner struct {
	r   *bufio.Reader
	buf []byte // the last string literal read, quotes included
}

// index reads the top-level object and what follows it (only white space).
func (s *indexScanner) index() (*index, error) {
	ferr := func(format string, args ...any) error {
		return &FormatError{Offset: -1, Reason: fmt.Sprintf(format, args...)}
	}
	ix := &index{}
	seenMeta, seenMap := false, false
	err := s.object(func() error {
		key, err := s.string()
		if err != nil {
			return err
		}
		if err := s.colon(); err != nil {
			return err
		}
		switch key {
		case "metadata":
			if seenMeta {
				return ferr("two metadata objects")
			}
			seenMeta = true
			raw, n, err := s.value(MaxMetadataBytes)
			if err != nil {
				return err
			}
			if n > MaxMetadataBytes {
				return ferr("metadata of %d bytes, over the %d-byte limit", n, MaxMetadataBytes)
			}
			if err := json.Unmarshal(raw, &ix.meta); err != nil {
				return ferr("metadata: %s", untrusted.Error(err))
			}
		case "weight_map":
			if seenMap {
				return ferr("two weight maps")
			}
			seenMap = true
			return s.weightMap(ix)
		default:
			raw, _, err := s.value(MaxIndexBytes)
			if err == nil && !json.Valid(raw) {
				err = fmt.Errorf("the value of %s is not JSON", untrusted.Name(key))
			}
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if c, err := s.next(); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("invalid character %q after the top-level object", c)
		}
		return nil, err
	}
	if !seenMap {
		return nil, ferr("no weight_map")
	}
	ix.sorted = make([]int32, ix.entries.n)
	for i := range ix.sorted {
		ix.sorted[i] = int32(i)
	}
	sort.Slice(ix.sorted, func(a, b int) bool { return ix.entries.at(ix.sorted[a]).name < ix.entries.at(ix.sorted[b]).name })
	for k := 1; k < len(ix.sorted); k++ {
		if name := ix.entries.at(ix.sorted[k]).name; name == ix.entries.at(ix.sorted[k-1]).name {
			return nil, ferr("weight_map: duplicate entry %s", untrusted.Name(name))
		}
	}
	return ix, nil
}

// weightMap reads a weight_map object into ix: each name decoded once and kept, each file name kept once.
func (s *indexScanner) weightMap(ix *index) error {
	file := map[string]int32{}
	if c, err := s.peek(); err != nil {
		return err
	} else if c != '{' {
		return &FormatError{Offset: -1, Reason: "weight_map: not an object"}
	}
	return s.object(func() error {
		name, err := s.string()
		if err != nil {
			return err
		}
		if err := s.colon(); err != nil {
			return err
		}
		if c, err := s.peek(); err != nil {
			return err
		} else if c != '"' {
			return &FormatError{Offset: -1, Reason: "weight_map: entry " + untrusted.Name(name) + " is not a string"}
		}
		if err := s.literal(); err != nil {
			return err
		}
		i, ok := file[string(s.buf[1:len(s.buf)-1])] // looked up without a copy
		if !ok || !s.plain() {
			fn, err := s.decode()
			if err != nil {
				return err
			}
			if i, ok = file[fn]; !ok {
				if len(ix.files) == math.MaxInt32 {
					return &FormatError{Offset: -1, Reason: "weight_map: too many files"}
				}
				i = int32(len(ix.files))
				file[fn] = i
				ix.files = append(ix.files, fn)
			}
		}
		if ix.entries.n == math.MaxInt32 {
			return &FormatError{Offset: -1, Reason: "weight_map: too many entries"}
		}
		ix.entries.add(indexEntry{name: name, file: i})
		return nil
	})
}

// object reads an object, calling member for each of its members (at the member's key).
func (s *indexScanner) object(member func() error) error {
	if c, err := s.next(); err != nil {
		return unexpected(err)
	} else if c != '{' {
		return fmt.Errorf("invalid character %q looking for the beginning of an object", c)
	}
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c == '}' {
		s.r.ReadByte()
		return nil
	}
	for {
		if err := member(); err != nil {
			return err
		}
		if c, err = s.next(); err != nil {
			return unexpected(err)
		}
		switch c {
		case '}':
			return nil
		case ',':
			if c, err = s.peek(); err != nil {
				return err
			}
			if c != '"' {
				return fmt.Errorf("invalid character %q looking for the beginning of an object key", c)
			}
		default:
			return fmt.Errorf("invalid character %q after an object member", c)
		}
	}
}

// next reads the next byte that is not white space.
func (s *indexScanner) next() (byte, error) {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, err
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return c, nil
		}
	}
}

// peek returns the next byte that is not white space, leaving it to be read; the end of the file is an error.
func (s *indexScanner) peek() (byte, error) {
	c, err := s.next()
	if err != nil {
		return 0, unexpected(err)
	}
	s.r.UnreadByte()
	return c, nil
}

// colon reads the colon after an object key.
func (s *indexScanner) colon() error {
	c, err := s.next()
	if err != nil {
		return unexpected(err)
	}
	if c != ':' {
		return fmt.Errorf("invalid character %q after an object key", c)
	}
	return nil
}

// string reads a string and returns its value.
func (s *indexScanner) string() (string, error) {
	c, err := s.peek()
	if err != nil {
		return "", err
	}
	if c != '"' {
		return "", fmt.Errorf("invalid character %q looking for a string", c)
	}
	if err := s.literal(); err != nil {
		return "", err
	}
	return s.decode()
}

// literal reads a string literal, from its opening quote (the next byte) to its closing one, into buf.
func (s *indexScanner) literal() error {
	s.buf = s.buf[:0]
	escaped := false
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return unexpected(err)
		}
		s.buf = append(s.buf, c)
		switch {
		case len(s.buf) == 1:
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			return nil
		}
	}
}

// plain reports whether the literal in buf means the bytes between its quotes: no escape, no control character,
// valid UTF-8.
func (s *indexScanner) plain() bool {
	text := s.buf[1 : len(s.buf)-1]
	ascii := true
	for _, c := range text {
		if c == '\\' || c < 0x20 {
			return false
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	return ascii || utf8.Valid(text)
}

// decode returns the value of the literal in buf, as encoding/json reads it.
func (s *indexScanner) decode() (string, error) {
	if s.plain() {
		return string(s.buf[1 : len(s.buf)-1]), nil
	}
	var v string
	err := json.Unmarshal(s.buf, &v)
	return v, err
}

// value reads any JSON value and returns its text while that is at most limit bytes, and its length. It looks only
// for the value's end: the caller parses or checks the text.
func (s *indexScanner) value(limit int) (raw []byte, n int, err error) {
	if _, err := s.peek(); err != nil {
		return nil, 0, err
	}
	add := func(b ...byte) {
		if n += len(b); n <= limit {
			raw = append(raw, b...)
		}
	}
	depth := 0
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return nil, 0, unexpected(err)
		}
		switch c {
		case '"':
			s.r.UnreadByte()
			if err := s.literal(); err != nil {
				return nil, 0, err
			}
			add(s.buf...)
		case '{', '[':
			depth++
			add(c)
		case '}', ']', ',', ' ', '\t', '\n', '\r':
			if depth == 0 { // the end of a number or literal
				s.r.UnreadByte()
				return raw, n, nil
			}
			add(c)
			if c == '}' || c == ']' {
				depth--
			}
		default:
			add(c)
		}
		if depth == 0 && (c == '}' || c == ']' || c == '"') {
			return raw, n, nil
		}
	}
}

// unexpected turns the end of the file inside a value into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
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
