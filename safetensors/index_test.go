package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"testing"
)

// writeIndex writes an index of about size bytes: a small metadata object and a weight map of expert tensors over 48
// shards, as the index of a large mixture-of-experts checkpoint has. It returns the path and the entries.
func writeIndex(t *testing.T, size int) (string, int) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("{\n  \"metadata\": {\n    \"total_size\": 1234567890123\n  },\n  \"weight_map\": {\n")
	n := 0
	for b.Len() < size-100 {
		if n > 0 {
			b.WriteString(",\n")
		}
		layer, expert := n/768, n/6%128
		part := []string{"gate_proj", "up_proj", "down_proj", "gate_proj.scales", "up_proj.scales", "down_proj.scales"}[n%6]
		fmt.Fprintf(&b, "    \"model.layers.%d.mlp.experts.%d.%s.weight\": \"model-%05d-of-00048.safetensors\"", layer, expert, part, 1+layer%48)
		n++
	}
	b.WriteString("\n  }\n}\n")
	path := filepath.Join(t.TempDir(), IndexFile)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, n
}

// TestIndexAllocations parses a valid 8 MiB index (about 80,000 entries) and counts the bytes it allocates, garbage
// included (runtime.MemStats.TotalAlloc): at most twice the file's size and a small constant, where the weight map
// it returns — every tensor name, a map entry and its place in the order — is most of that.
func TestIndexAllocations(t *testing.T) {
	const size = 8 << 20
	path, entries := writeIndex(t, size)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	readIndex(path) // warm: the first call's one-time allocations (the decoder's caches) are not the file's
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ix, err := readIndex(path)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if ix.entries.n != entries || len(ix.files) != 48 || ix.meta["total_size"] != float64(1234567890123) {
		t.Fatalf("%d entries, %d files, metadata %v; want %d, 48", ix.entries.n, len(ix.files), ix.meta, entries)
	}
	for e := range ix.entries.all() {
		if !ix.has(e.name) {
			t.Fatalf("%s: not found", e.name)
		}
	}
	if ix.has("model.layers.0.mlp.experts.0.gate_proj") || ix.has("") {
		t.Error("a name not in the index was found")
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	const slack = 256 << 10
	t.Logf("a %d-byte index of %d entries: %d bytes allocated (%.2f× the file), %d allocations",
		st.Size(), entries, alloc, float64(alloc)/float64(st.Size()), after.Mallocs-before.Mallocs)
	if alloc > 2*uint64(st.Size())+slack {
		t.Errorf("allocated %d bytes parsing a %d-byte index: over twice its size and %d", alloc, st.Size(), slack)
	}
}

// referenceIndex parses an index with encoding/json as OpenIndex did before it streamed (the whole file held, keys
// matched exactly, a second "metadata" or "weight_map" refused): the metadata, and the weight map's names and files
// in document order.
func referenceIndex(data []byte) (meta map[string]any, names, files []string, err error) {
	if !json.Valid(data) {
		return nil, nil, nil, errors.New("bad JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, _ := dec.Token(); tok != json.Delim('{') {
		return nil, nil, nil, errors.New("not an object")
	}
	var rawMeta, rawMap json.RawMessage
	for dec.More() {
		tok, _ := dec.Token()
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, nil, err
		}
		switch tok.(string) {
		case "metadata":
			if rawMeta != nil {
				return nil, nil, nil, errors.New("two metadata objects")
			}
			rawMeta = raw
		case "weight_map":
			if rawMap != nil {
				return nil, nil, nil, errors.New("two weight maps")
			}
			rawMap = raw
		}
	}
	if rawMeta != nil {
		if len(rawMeta) > MaxMetadataBytes {
			return nil, nil, nil, errors.New("metadata too large")
		}
		if err := json.Unmarshal(rawMeta, &meta); err != nil {
			return nil, nil, nil, err
		}
	}
	if rawMap == nil {
		return nil, nil, nil, errors.New("no weight_map")
	}
	md := json.NewDecoder(bytes.NewReader(rawMap))
	if tok, _ := md.Token(); tok != json.Delim('{') {
		return nil, nil, nil, errors.New("weight_map: not an object")
	}
	seen := map[string]bool{}
	for md.More() {
		tok, _ := md.Token()
		name := tok.(string)
		if seen[name] {
			return nil, nil, nil, errors.New("duplicate entry")
		}
		seen[name] = true
		tok, _ = md.Token()
		fn, ok := tok.(string)
		if !ok {
			return nil, nil, nil, errors.New("not a string")
		}
		names, files = append(names, name), append(files, fn)
	}
	return meta, names, files, nil
}

// checkIndex compares readIndex on data with referenceIndex: both accept it or both refuse it, and when they accept
// it they read the same metadata and entries.
func checkIndex(t *testing.T, data []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), IndexFile)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ix, err := readIndex(path)
	meta, names, files, rerr := referenceIndex(data)
	if (err == nil) != (rerr == nil) {
		t.Fatalf("%q: readIndex %v, encoding/json %v", data, err, rerr)
	}
	if err != nil {
		var fe *FormatError
		if !errors.As(err, &fe) || fe.File != path {
			t.Errorf("%q: %v is not a *FormatError naming the file", data, err)
		}
		return
	}
	var gotNames, gotFiles []string
	for e := range ix.entries.all() {
		gotNames, gotFiles = append(gotNames, e.name), append(gotFiles, ix.files[e.file])
	}
	if !reflect.DeepEqual(ix.meta, meta) || !slices.Equal(gotNames, names) || !slices.Equal(gotFiles, files) {
		t.Errorf("%q: read %v %q %q, encoding/json %v %q %q", data, ix.meta, gotNames, gotFiles, meta, names, files)
	}
	for _, name := range names {
		if !ix.has(name) {
			t.Errorf("%q: has(%q) = false", data, name)
		}
	}
}

// indexCases are indexes that readIndex must read as encoding/json does: escapes, odd white space, values of every
// kind in the metadata and in other keys, and JSON that is broken in every place the scanner looks.
var indexCases = []string{
	`{"weight_map":{}}`,
	` { "metadata" : { "total_size" : 12 } , "weight_map" : { "a" : "s1.safetensors" , "b" : "s2.safetensors" } } ` + "\n",
	"{\"weight_map\":\t{\"a\":\r\n\"s\"}}",
	`{"weight_map":{"a\"b":"s\u00e9.safetensors","\u00e9\ud83d\ude00":"s","x\/y":"s\\t"}}`,
	`{"weight_map":{"\ud800":"s","a":"\u0000"}}`,
	"{\"weight_map\":{\"caf\xc3\xa9\":\"s\",\"bad\xff\":\"s\"}}",
	`{"metadata":null,"weight_map":{"a":"s"}}`,
	`{"metadata":{"a":[1,2.5e3,-0,true,false,null,"}]"],"b":{"c":{}}},"weight_map":{"a":"s"}}`,
	`{"other":[{"x":"]}"},[[]],1e-3],"weight_map":{"a":"s"},"more":"x","n":-12.5,"t":true,"z":null}`,
	`{"weight_map":{"a":"s"},"other":{"a":[1,{"b":"{"}]}}`,
	`{"weight_map":{"a":"s","a":"t"}}`,
	`{"weight_map":{"a":"s"},"weight_map":{"b":"s"}}`,
	`{"metadata":{},"metadata":{},"weight_map":{}}`,
	`{"weight_map":{"a":1}}`,
	`{"weight_map":{"a":{"b":"c"}}}`,
	`{"weight_map":[]}`,
	`{"weight_map":null}`,
	`{"weight_map":"x"}`,
	`{"metadata":12,"weight_map":{}}`,
	`{"metadata":"x","weight_map":{}}`,
	`{"metadata":[],"weight_map":{}}`,
	`{"metadata":{"a":1]},"weight_map":{}}`,
	`{"metadata":{"a":tru},"weight_map":{}}`,
	`{"metadata":1 2,"weight_map":{}}`,
	`{"metadata":,"weight_map":{}}`,
	`{"other":tru,"weight_map":{}}`,
	`{"other":{"a":1,},"weight_map":{}}`,
	`{"other":[1,,2],"weight_map":{}}`,
	`{"other":01,"weight_map":{}}`,
	`{"weight_map":{"a":"s",}}`,
	`{"weight_map":{"a":"s"},}`,
	`{"weight_map":{"a" "s"}}`,
	`{"weight_map":{a:"s"}}`,
	`{"weight_map":{"a":"s"}} x`,
	`{"weight_map":{"a":"s"}}{}`,
	`{"weight_map":{"a":"s\x"}}`,
	"{\"weight_map\":{\"a\":\"s\x01\"}}",
	`{"weight_map":{"a":"s"}`,
	`{"weight_map":{"a":"s`,
	`{"weight_map":`,
	`{"metadata":{"a":`,
	`{"metadata":12`,
	`[]`,
	``,
	`"weight_map"`,
	`{"Weight_Map":{"a":"s"}}`,
	`{"weight\u005fmap":{"a":"s"}}`,
	"\ufeff{\"weight_map\":{}}",
}

// TestIndexSyntax reads indexCases as encoding/json reads them.
func TestIndexSyntax(t *testing.T) {
	for _, c := range indexCases {
		checkIndex(t, []byte(c))
	}
}

// FuzzIndex reads any index as encoding/json reads it.
func FuzzIndex(f *testing.F) {
	for _, c := range indexCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkIndex(t, data)
	})
}
