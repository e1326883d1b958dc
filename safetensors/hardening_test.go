package safetensors

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestHardeningHeaderMessages: a header's names and values appear in errors
// only as short quoted prefixes, however large they are.
func TestHardeningHeaderMessages(t *testing.T) {
	big := strings.Repeat("7", 1<<20)
	name := strings.Repeat("n", 1<<20)
	tests := []struct{ name, header string }{
		{"long tensor name, bad dtype", `{"` + name + `":{"dtype":"X","shape":[1],"data_offsets":[0,1]}}`},
		{"long dtype", `{"x":{"dtype":"` + name + `","shape":[1],"data_offsets":[0,1]}}`},
		{"long dimension", `{"x":{"dtype":"U8","shape":[` + big + `],"data_offsets":[0,1]}}`},
		{"long offset", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[` + big + `,1]}}`},
		{"unknown field", `{"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"` + name + `":1}}`},
		{"many dims", `{"x":{"dtype":"U8","shape":[` + strings.Repeat("1,", 100000) + `2],"data_offsets":[0,1]}}`},
		{"metadata key", `{"__metadata__":{"` + name + `":1}}`},
		{"top-level number", big},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("evil.safetensors", rawFile(tc.header, 1))
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("got %T %.200v", err, err)
			}
			if n := len(err.Error()); n > 800 {
				t.Fatalf("message of %d bytes: %.300s", n, err)
			}
		})
	}
}

// hardeningHeaderSeeds are FuzzParseHeader seeds with oversized names and
// numbers.
func hardeningHeaderSeeds() [][]byte {
	long := strings.Repeat("7", 300)
	return [][]byte{
		rawFile(`{"`+strings.Repeat("n", 300)+`":{"dtype":"X","shape":[1],"data_offsets":[0,1]}}`, 1),
		rawFile(`{"x":{"dtype":"U8","shape":[`+long+`],"data_offsets":[0,1]}}`, 1),
		rawFile(`{"x":{"dtype":"U8","shape":[1],"data_offsets":[`+long+`,1]}}`, 1),
		rawFile(`{"x":{"dtype":"U8","shape":[`+strings.Repeat("1,", 40)+`1],"data_offsets":[0,1]}}`, 1),
		rawFile(long, 1),
	}
}

// TestHardeningIndexSize (index.json): an index file is read only up to
// MaxIndexBytes, and its metadata parsed into Go values only up to
// MaxMetadataBytes (a 100 MB index used to be read whole and reach 3.22
// GB): both are refused with a *FormatError, having allocated little.
func TestHardeningIndexSize(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, IndexFile)
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"metadata": {"x": [`)
	f.Write(bytes.Repeat([]byte("[],"), (MaxIndexBytes+10)/3))
	f.WriteString(`[]]}, "weight_map": {}}`)
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = OpenIndex(big)
	runtime.ReadMemStats(&after)
	var fe *FormatError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "index of more than 16777216 bytes") {
		t.Fatalf("got %v, want a FormatError on the index's size", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("allocated %d bytes refusing a %d-byte index", alloc, MaxIndexBytes+10)
	}
	meta := `{"metadata": {"x": [` + strings.Repeat("[],", 100_000) + `[]]}, "weight_map": {}}`
	if err := os.WriteFile(big, []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&before)
	_, err = OpenIndex(big)
	runtime.ReadMemStats(&after)
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "metadata of 300011 bytes, over the 65536-byte limit") {
		t.Fatalf("got %v, want a FormatError on the metadata's size", err)
	}
	// TotalAlloc counts every allocation, the garbage of json's decoding
	// included (more of it under the race detector): eight times the file
	// is still far from what an unbounded parse of the metadata costs.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(meta)) {
		t.Errorf("allocated %d bytes refusing a %d-byte index", alloc, len(meta))
	}
}
