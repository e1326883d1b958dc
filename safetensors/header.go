package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	untrusted "github.com/kevgo/kev/internal/quote"
)

// Info describes one tensor of a header: its dtype, shape and the byte span
// [Begin, End) relative to the start of the data section.
type Info struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64
}

// Header is a parsed, validated safetensors header.
type Header struct {
	// Tensors lists the tensors in data order (ascending Begin).
	Tensors []Info
	// Metadata is the "__metadata__" string map, nil when absent.
	Metadata map[string]string
	// Size is the JSON header length N; the data section starts at 8+N.
	Size int64
}

// DataStart is the file offset of the data section, 8+Size.
func (h *Header) DataStart() int64 { return 8 + h.Size }

// ParseHeader validates a complete safetensors header. file names the file
// in errors; prefix holds at least the first 8+N bytes of the file (the length
// word and the JSON header); fileSize is the size of the whole file. The data
// section must be covered exactly by the tensors' spans, without gaps or
// overlaps, as the reference implementation requires.
func ParseHeader(file string, prefix []byte, fileSize int64) (*Header, error) {
	ferr := func(tensor string, off int64, format string, args ...any) error {
		return &FormatError{File: file, Tensor: tensor, Offset: off, Reason: fmt.Sprintf(format, args...)}
	}
	if fileSize < 8 || len(prefix) < 8 {
		return nil, ferr("", 0, "file is %d bytes, shorter than the 8-byte header length", fileSize)
	}
	n := binaryLE64(prefix)
	if n > MaxHeaderSize {
		return nil, ferr("", 0, "header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if n > uint64(fileSize-8) {
		return nil, ferr("", 0, "header length %d runs past the end of the %d-byte file", n, fileSize)
	}
	if uint64(len(prefix)-8) < n {
		return nil, ferr("", 8, "header truncated: have %d of %d bytes", len(prefix)-8, n)
	}
	js := prefix[8 : 8+n]
	if len(js) == 0 || js[0] != '{' {
		return nil, ferr("", 8, "header does not start with '{'")
	}
	h := &Header{Size: int64(n)}
	dataLen := fileSize - 8 - int64(n)

	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	seen := map[string]bool{}
	jerr := func(tensor string, err error) error {
		return ferr(tensor, 8+dec.InputOffset(), "bad JSON header: %s", untrusted.Error(err))
	}
	if _, err := dec.Token(); err != nil { // '{'
		return nil, jerr("", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jerr("", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, jerr("", fmt.Errorf("key of type %T is not a string", tok))
		}
		if seen[key] {
			return nil, ferr(key, 8+dec.InputOffset(), "duplicate key in header")
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, jerr(key, err)
		}
		if key == "__metadata__" {
			if string(bytes.TrimSpace(raw)) == "null" {
				continue
			}
			md, err := parseMetadata(raw)
			if err != nil {
				return nil, ferr("", 8+dec.InputOffset(), "__metadata__: %s", untrusted.Error(err))
			}
			h.Metadata = md
			continue
		}
		info, err := parseInfo(key, raw)
		if err != nil {
			return nil, ferr(key, 8+dec.InputOffset(), "%s", untrusted.Error(err))
		}
		h.Tensors = append(h.Tensors, info)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, jerr("", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, ferr("", 8+dec.InputOffset(), "trailing data after the JSON header")
	}

	sort.SliceStable(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	var pos int64
	for _, t := range h.Tensors {
		off := h.DataStart() + t.Begin
		if t.Begin != pos {
			if t.Begin < pos {
				return nil, ferr(t.Name, off, "data span [%d, %d) overlaps the previous tensor, which ends at %d", t.Begin, t.End, pos)
			}
			return nil, ferr(t.Name, off, "data span [%d, %d) leaves a gap after %d", t.Begin, t.End, pos)
		}
		if t.End > dataLen {
			return nil, ferr(t.Name, off, "data span [%d, %d) runs past the end of the %d-byte data section", t.Begin, t.End, dataLen)
		}
		pos = t.End
	}
	if pos != dataLen {
		return nil, ferr("", h.DataStart()+pos, "data section is %d bytes but the tensors cover %d", dataLen, pos)
	}
	return h, nil
}

func binaryLE64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil {
		return nil, err
	} else if tok != json.Delim('{') {
		return nil, errors.New("not an object of strings")
	}
	md := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // object keys are always strings
		if _, dup := md[key]; dup {
			return nil, fmt.Errorf("duplicate key %s", untrusted.Name(key))
		}
		tok, err = dec.Token()
		if err != nil {
			return nil, err
		}
		v, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("value of %s is not a string", untrusted.Name(key))
		}
		md[key] = v
	}
	return md, nil
}

type rawInfo struct {
	DType       *string        `json:"dtype"`
	Shape       *[]json.Number `json:"shape"`
	DataOffsets *[]json.Number `json:"data_offsets"`
}

func parseInfo(name string, raw json.RawMessage) (Info, error) {
	var r rawInfo
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Info{}, fmt.Errorf("bad tensor entry: %s", untrusted.Error(err))
	}
	if r.DType == nil || r.Shape == nil || r.DataOffsets == nil {
		return Info{}, errors.New("tensor entry needs dtype, shape and data_offsets")
	}
	dt := DType(*r.DType)
	if dt.Size() == 0 {
		return Info{}, fmt.Errorf("unknown dtype %s", untrusted.String(*r.DType))
	}
	info := Info{Name: name, DType: dt, Shape: make([]int, len(*r.Shape))}
	numel := uint64(1)
	for i, s := range *r.Shape {
		v, err := parseUint(s)
		if err != nil || v > math.MaxInt64 {
			return Info{}, fmt.Errorf("shape[%d] = %s is not a valid dimension", i, untrusted.String(string(s)))
		}
		info.Shape[i] = int(v)
		if v != 0 && numel > math.MaxInt64/v {
			return Info{}, fmt.Errorf("shape %s overflows", dims(info.Shape[:i+1]))
		}
		numel *= v
	}
	if len(*r.DataOffsets) != 2 {
		return Info{}, fmt.Errorf("data_offsets has %d entries, want 2", len(*r.DataOffsets))
	}
	b, err1 := parseUint((*r.DataOffsets)[0])
	e, err2 := parseUint((*r.DataOffsets)[1])
	if err1 != nil || err2 != nil || b > math.MaxInt64 || e > math.MaxInt64 {
		return Info{}, fmt.Errorf("data_offsets [%s, %s] are not valid offsets", untrusted.String(string((*r.DataOffsets)[0])), untrusted.String(string((*r.DataOffsets)[1])))
	}
	if e < b {
		return Info{}, fmt.Errorf("data_offsets [%d, %d] end before they begin", b, e)
	}
	size := uint64(dt.Size())
	if numel > math.MaxInt64/size || numel*size != e-b {
		return Info{}, fmt.Errorf("dtype %s × shape %s needs %d bytes, data_offsets [%d, %d] span %d",
			dt, dims(info.Shape), numel*size, b, e, e-b)
	}
	info.Begin, info.End = int64(b), int64(e)
	return info, nil
}

// dims shows a shape from a header, at most 8 dimensions.
func dims(d []int) string {
	if len(d) <= 8 {
		return fmt.Sprint(d)
	}
	return fmt.Sprintf("%v…(%d dims)", d[:8], len(d))
}

func parseUint(n json.Number) (uint64, error) {
	var v uint64
	s := string(n)
	if s == "" {
		return 0, errors.New("empty number")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%s is not a non-negative integer", untrusted.String(s))
		}
		if v > (math.MaxUint64-uint64(c-'0'))/10 {
			return 0, fmt.Errorf("%s overflows", untrusted.String(s))
		}
		v = v*10 + uint64(c-'0')
	}
	return v, nil
}
