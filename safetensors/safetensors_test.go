package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/half"
)

// rawFile assembles a file from a literal JSON header and n data bytes.
func rawFile(header string, n int) []byte {
	b := make([]byte, 8, 8+len(header)+n)
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	for i := 0; i < n; i++ {
		b = append(b, byte(i*7+3))
	}
	return b
}

func randomValues(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64()) * 3
	}
	return v
}

func TestRoundTripDTypes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []DType{F32, BF16, F16, F64} {
		t.Run(string(dt), func(t *testing.T) {
			shape := []int{3, 5, 2}
			vals := randomValues(r, 30)
			tn, err := FromFloat32("w", dt, shape, vals)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := Write(&buf, []Tensor{tn}, map[string]string{"format": "pt"}); err != nil {
				t.Fatal(err)
			}
			f, err := Parse("mem", buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if f.Metadata["format"] != "pt" {
				t.Errorf("metadata = %v", f.Metadata)
			}
			got, err := f.Tensor("w")
			if err != nil {
				t.Fatal(err)
			}
			if got.DType != dt || !reflect.DeepEqual(got.Shape, shape) {
				t.Fatalf("got %s %v", got.DType, got.Shape)
			}
			out, err := got.Float32()
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				want := v
				switch dt {
				case BF16:
					want = half.RoundBF16(v)
				case F16:
					want = half.F16ToF32(half.F16FromF32(v))
				}
				if math.Float32bits(out[i]) != math.Float32bits(want) {
					t.Fatalf("element %d: got %v want %v", i, out[i], want)
				}
			}
		})
	}
}

func TestBF16Accessor(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	vals := randomValues(r, 17)
	tn, _ := FromFloat32("b", BF16, []int{17}, vals)
	bits, err := tn.BF16()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if bits[i] != half.BF16FromF32(v) {
			t.Fatalf("element %d: %#x want %#x", i, bits[i], half.BF16FromF32(v))
		}
	}
	f32, _ := FromFloat32("f", F32, []int{17}, vals)
	var de *DTypeError
	if _, err := f32.BF16(); !errors.As(err, &de) || de.Tensor != "f" || de.DType != F32 {
		t.Fatalf("BF16 on F32: %v", err)
	}
}

func TestIntegerRefused(t *testing.T) {
	var buf bytes.Buffer
	tn := Tensor{Name: "ids", DType: I64, Shape: []int{2}, Data: make([]byte, 16)}
	if err := Write(&buf, []Tensor{tn}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Parse("ints.safetensors", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := f.Tensor("ids")
	_, err = v.Float32()
	var de *DTypeError
	if !errors.As(err, &de) || de.File != "ints.safetensors" || de.Tensor != "ids" || de.DType != I64 {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), `"ids"`) {
		t.Errorf("error %q does not name the tensor", err)
	}
}

func TestHeaderErrors(t *testing.T) {
	big := make([]byte, 8)
	binary.LittleEndian.PutUint64(big, MaxHeaderSize+1)
	big = append(big, make([]byte, 64)...)
	long := make([]byte, 8)
	binary.LittleEndian.PutUint64(long, 1000)
	long = append(long, "{}"...)
	tests := []struct {
		name   string
		file   []byte
		tensor string
		reason string
	}{
		{"short file", []byte{1, 2, 3}, "", "shorter than the 8-byte"},
		{"header over limit", big, "", "exceeds"},
		{"header past end", long, "", "runs past the end"},
		{"not an object", rawFile(`[1,2]`, 0), "", "does not start with '{'"},
		{"bad json", rawFile(`{"a":`, 0), "a", "bad JSON"},
		{"trailing json", rawFile(`{} {}`, 0), "", "trailing data"},
		{"duplicate tensor", rawFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2), "a", "duplicate key"},
		{"metadata not strings", rawFile(`{"__metadata__":{"k":1}}`, 0), "", "__metadata__"},
		{"metadata not object", rawFile(`{"__metadata__":[]}`, 0), "", "__metadata__"},
		{"unknown dtype", rawFile(`{"x":{"dtype":"F12","shape":[1],"data_offsets":[0,1]}}`, 1), "x", "unknown dtype"},
		{"missing field", rawFile(`{"x":{"dtype":"F32","shape":[1]}}`, 4), "x", "needs dtype"},
		{"unknown field", rawFile(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":1}}`, 4), "x", "bad tensor entry"},
		{"negative dim", rawFile(`{"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4), "x", "not a valid dimension"},
		{"fractional dim", rawFile(`{"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4), "x", "not a valid dimension"},
		{"three offsets", rawFile(`{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 4), "x", "3 entries"},
		{"end before begin", rawFile(`{"x":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 4), "x", "end before"},
		{"span mismatch", rawFile(`{"x":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}}`, 4), "x", "needs 6 bytes"},
		{"shape overflow", rawFile(`{"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, 4), "x", "overflows"},
		{"gap", rawFile(`{"x":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 4), "x", "gap"},
		{"overlap", rawFile(`{"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"y":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`, 4), "y", "overlaps"},
		{"past data end", rawFile(`{"x":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, 4), "x", "runs past the end"},
		{"uncovered tail", rawFile(`{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 4), "", "cover 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.safetensors", tc.file)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("got %T %v, want *FormatError", err, err)
			}
			if fe.File != "bad.safetensors" || fe.Tensor != tc.tensor || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("got %+v, want tensor %q reason ~%q", fe, tc.tensor, tc.reason)
			}
		})
	}
}

func TestScalarsEmptyAndOrder(t *testing.T) {
	// Out-of-order header entries, a scalar and an empty tensor.
	hdr := `{"b":{"dtype":"F32","shape":[],"data_offsets":[4,8]},"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`
	f, err := Parse("m", rawFile(hdr, 8))
	if err != nil {
		t.Fatal(err)
	}
	names := f.Names()
	if names[0] != "a" || names[2] != "b" {
		t.Errorf("names %v not in data order", names)
	}
	b, _ := f.Tensor("b")
	if b.Len() != 1 || len(b.Data) != 4 {
		t.Errorf("scalar: len %d, %d bytes", b.Len(), len(b.Data))
	}
	e, _ := f.Tensor("e")
	if v, err := e.Float32(); err != nil || len(v) != 0 {
		t.Errorf("empty: %v %v", v, err)
	}
	var me *MissingError
	if _, err := f.Tensor("zz"); !errors.As(err, &me) || me.Tensor != "zz" {
		t.Errorf("missing: %v", err)
	}
}

func TestWriterRefuses(t *testing.T) {
	good := Tensor{Name: "a", DType: F32, Shape: []int{1}, Data: make([]byte, 4)}
	for _, tc := range []struct {
		name string
		ts   []Tensor
	}{
		{"duplicate", []Tensor{good, good}},
		{"metadata name", []Tensor{{Name: "__metadata__", DType: U8, Shape: []int{0}}}},
		{"size", []Tensor{{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 4)}}},
		{"dtype", []Tensor{{Name: "a", DType: "X", Shape: []int{1}, Data: make([]byte, 4)}}},
	} {
		var fe *FormatError
		if err := Write(&bytes.Buffer{}, tc.ts, nil); !errors.As(err, &fe) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}
}

func writeTemp(t *testing.T, dir, name string, ts []Tensor) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := WriteFile(p, ts, nil); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenMappedAndClose(t *testing.T) {
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	vals := randomValues(r, 1000)
	tn, _ := FromFloat32("x", BF16, []int{10, 100}, vals)
	p := writeTemp(t, dir, "m.safetensors", []Tensor{tn})
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.Tensor("x")
	if err != nil {
		t.Fatal(err)
	}
	out, _ := v.Float32()
	for i := range vals {
		if out[i] != half.RoundBF16(vals[i]) {
			t.Fatalf("element %d", i)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Tensor("x"); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// A corrupt file on disk names its path.
	bad := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(bad, rawFile(`{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 1), 0o644)
	var fe *FormatError
	if _, err := Open(bad); !errors.As(err, &fe) || fe.File != bad || fe.Tensor != "x" {
		t.Errorf("corrupt: %v", err)
	}
	huge := filepath.Join(dir, "huge.safetensors")
	os.WriteFile(huge, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'}, 0o644)
	if _, err := Open(huge); !errors.As(err, &fe) || fe.File != huge {
		t.Errorf("huge header: %v", err)
	}
}

func shard(t *testing.T, name string, seed uint64) Tensor {
	r := rand.New(rand.NewPCG(seed, 9))
	tn, err := FromFloat32(name, F32, []int{2, 3}, randomValues(r, 6))
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

func TestSharded(t *testing.T) {
	dir := t.TempDir()
	writeTemp(t, dir, "model-00001-of-00002.safetensors", []Tensor{shard(t, "a", 1), shard(t, "b", 2)})
	writeTemp(t, dir, "model-00002-of-00002.safetensors", []Tensor{shard(t, "c", 3)})
	idx := `{"metadata":{"total_size":72},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, IndexFile), []byte(idx), 0o644)
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.Names(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("names %v", got)
	}
	ct, err := c.Tensor("c")
	if err != nil {
		t.Fatal(err)
	}
	want := shard(t, "c", 3)
	if !bytes.Equal(ct.Data, want.Data) || !strings.HasSuffix(ct.File, "model-00002-of-00002.safetensors") {
		t.Errorf("c: wrong data or file %s", ct.File)
	}
	if c.Metadata["total_size"] != float64(72) {
		t.Errorf("metadata %v", c.Metadata)
	}
}

func TestShardedErrors(t *testing.T) {
	one, two := "s1.safetensors", "s2.safetensors"
	tests := []struct {
		name   string
		index  string
		files  map[string][]string // file -> tensors
		tensor string
		reason string
	}{
		{"missing file", `{"weight_map":{"a":"s1.safetensors","b":"nope.safetensors"}}`,
			map[string][]string{one: {"a"}}, "b", "nope.safetensors"},
		{"missing tensor", `{"weight_map":{"a":"s1.safetensors","z":"s1.safetensors"}}`,
			map[string][]string{one: {"a"}}, "z", "no such tensor"},
		{"wrong file", `{"weight_map":{"a":"s2.safetensors","b":"s1.safetensors"}}`,
			map[string][]string{one: {"a", "b"}, two: {"c"}}, "a", `index says "s2.safetensors"`},
		{"duplicate across shards", `{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}`,
			map[string][]string{one: {"a", "b"}, two: {"b"}}, "b", "also present in"},
		{"unlisted tensor", `{"weight_map":{"a":"s1.safetensors"}}`,
			map[string][]string{one: {"a", "x"}}, "x", "not in"},
		{"path escape", `{"weight_map":{"a":"../s1.safetensors"}}`,
			map[string][]string{one: {"a"}}, "a", "plain file name"},
		{"duplicate entry", `{"weight_map":{"a":"s1.safetensors","a":"s1.safetensors"}}`,
			map[string][]string{one: {"a"}}, "", "duplicate entry"},
		{"no weight map", `{"metadata":{}}`, map[string][]string{one: {"a"}}, "", "no weight_map"},
		{"bad json", `{"weight_map":`, map[string][]string{one: {"a"}}, "", "bad JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			seed := uint64(10)
			for fn, names := range tc.files {
				var ts []Tensor
				for _, n := range names {
					seed++
					ts = append(ts, shard(t, n, seed))
				}
				writeTemp(t, dir, fn, ts)
			}
			ip := filepath.Join(dir, IndexFile)
			os.WriteFile(ip, []byte(tc.index), 0o644)
			c, err := OpenIndex(ip)
			if err == nil {
				c.Close()
				t.Fatal("no error")
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Tensor != tc.tensor || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("got %v, want tensor %q reason ~%q", err, tc.tensor, tc.reason)
			}
		})
	}
}

func TestOpenDirWithoutIndex(t *testing.T) {
	dir := t.TempDir()
	writeTemp(t, dir, "model.safetensors", []Tensor{shard(t, "w", 1)})
	writeTemp(t, dir, "adapter.safetensors", []Tensor{shard(t, "w", 2)}) // not model*: ignored
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Files) != 1 || !c.Has("w") {
		t.Errorf("files %d", len(c.Files))
	}
	var fe *FormatError
	if _, err := OpenDir(t.TempDir()); !errors.As(err, &fe) {
		t.Errorf("empty dir: %v", err)
	}
}

func FuzzParseHeader(f *testing.F) {
	var buf bytes.Buffer
	t1, _ := FromFloat32("a.weight", BF16, []int{2, 2}, []float32{1, -2, 3.5, 0.25})
	t2, _ := FromFloat32("b", F32, []int{}, []float32{7})
	Write(&buf, []Tensor{t1, t2}, map[string]string{"format": "pt"})
	f.Add(buf.Bytes())
	f.Add(rawFile(`{"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}`, 2))
	f.Add(rawFile(`{"x":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"__metadata__":{"a":"b"}}`, 0))
	f.Add([]byte{})
	f.Add(rawFile(`{"__metadata__":null}`, 0))
	for _, seed := range hardeningHeaderSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz", data)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		ts, _ := file.Tensors()
		for _, tn := range ts {
			if len(tn.Data) != tn.Len()*tn.DType.Size() {
				t.Fatalf("tensor %q: %d bytes for %v %s", tn.Name, len(tn.Data), tn.Shape, tn.DType)
			}
			if tn.DType.IsFloat() && tn.Len() < 1<<20 {
				if _, err := tn.Float32(); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
