package torchpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/zip"
)

// The archives under testdata are written by testdata/make_fixtures.py with
// the pickling steps torch.save uses; <name>.json holds the expected values.

func readJSON(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, d *Dict, key string) any {
	t.Helper()
	v, ok := d.Get(key)
	if !ok {
		t.Fatalf("no key %q", key)
	}
	return v
}

func checkFloats(t *testing.T, what string, tn *Tensor, want []float64) {
	t.Helper()
	got, err := tn.Float32()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		w := float32(want[i])
		if tn.DType == Float64 {
			w = float32(want[i])
		}
		if math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], w)
		}
	}
}

func TestHeadArchive(t *testing.T) {
	v, err := Load("testdata/head.pt")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Keys []string
		Head map[string]struct {
			Shape  []int
			Values []float64
		}
		Temperature float64
		Big         string
	}
	readJSON(t, "head.json", &want)
	top, ok := v.(*Dict)
	if !ok {
		t.Fatalf("top is %T", v)
	}
	var keys []string
	for _, k := range top.Keys() {
		keys = append(keys, k.(string))
	}
	if !reflect.DeepEqual(keys, want.Keys) {
		t.Errorf("keys %v, want %v", keys, want.Keys)
	}
	head := get(t, top, "head").(*Dict)
	if head.Class != "collections.OrderedDict" || head.Len() != 4 {
		t.Errorf("head: class %q, %d entries", head.Class, head.Len())
	}
	if head.Attrs == nil {
		t.Fatal("state_dict _metadata lost")
	}
	if md := get(t, head.Attrs, "_metadata").(*Dict); md.Len() != 3 {
		t.Errorf("_metadata has %d entries", md.Len())
	}
	for name, w := range want.Head {
		tn := get(t, head, name).(*Tensor)
		if tn.DType != Float32 || !reflect.DeepEqual(tn.Shape, w.Shape) {
			t.Errorf("%s: %s %v", name, tn.DType, tn.Shape)
		}
		checkFloats(t, name, tn, w.Values)
	}
	if get(t, top, "temperature").(float64) != want.Temperature {
		t.Errorf("temperature %v", get(t, top, "temperature"))
	}
	if get(t, top, "lora").(int64) != 16 || get(t, top, "option_isolation").(bool) {
		t.Errorf("lora/option_isolation wrong")
	}
	args := get(t, top, "args").(*Dict)
	if get(t, args, "seed") != nil || get(t, args, "neg").(int64) != -300000 {
		t.Errorf("args: %v %v", get(t, args, "seed"), get(t, args, "neg"))
	}
	if b := get(t, args, "big").(*big.Int); b.String() != want.Big {
		t.Errorf("big = %s, want %s", b, want.Big)
	}
	if tg := get(t, args, "targets").(*List); !reflect.DeepEqual(tg.Items, []any{"q_proj", "k_proj"}) {
		t.Errorf("targets %v", tg.Items)
	}
	if sh := get(t, args, "shape").(Tuple); !reflect.DeepEqual(sh, Tuple{int64(2), int64(3)}) {
		t.Errorf("shape %v", sh)
	}
}

func TestViews(t *testing.T) {
	for _, name := range []string{"views", "views_p4"} {
		t.Run(name, func(t *testing.T) {
			v, err := Load("testdata/" + name + ".pt")
			if err != nil {
				t.Fatal(err)
			}
			var want struct {
				Float  [][]float64
				Shapes [][]int
			}
			readJSON(t, name+".json", &want)
			items := v.(*List).Items
			floats := []int{0, 1, 2, 3, 4, 5, 6, 8}
			for j, i := range floats {
				tn := items[i].(*Tensor)
				checkFloats(t, "item "+string(rune('0'+i)), tn, want.Float[j])
			}
			for i, sh := range want.Shapes {
				if got := items[i].(*Tensor).Shape; !reflect.DeepEqual(got, sh) && !(len(got) == 0 && len(sh) == 0) {
					t.Errorf("item %d shape %v, want %v", i, got, sh)
				}
			}
			// Views of one storage share its bytes.
			if &items[0].(*Tensor).Storage[0] != &items[1].(*Tensor).Storage[0] {
				t.Error("views do not share a storage")
			}
			if items[4].(*Tensor).DType != BFloat16 || items[5].(*Tensor).DType != Float16 {
				t.Error("dtypes")
			}
			i64 := items[7].(*Tensor)
			if i64.DType != Int64 {
				t.Fatalf("int tensor dtype %s", i64.DType)
			}
			if _, err := i64.Float32(); err == nil {
				t.Error("int64 tensor converted to float")
			}
			if p := items[8].(*Tensor); !p.Parameter || !p.RequiresGrad {
				t.Error("parameter flags lost")
			}
			if b := items[9].([]byte); !bytes.Equal(b, []byte("\x00\xffraw")) {
				t.Errorf("bytes %q", b)
			}
			if tp := items[10].(Tuple); !reflect.DeepEqual(tp, Tuple{int64(1), "two", 3.5}) {
				t.Errorf("tuple %v", tp)
			}
			if bi := items[11].(*big.Int); bi.String() != "18446744073709551616" {
				t.Errorf("2**64 = %s", bi)
			}
		})
	}
}

func TestForbiddenGlobal(t *testing.T) {
	_, err := Load("testdata/evil.pt")
	var fg *ForbiddenGlobalError
	if !errors.As(err, &fg) || fg.Name != "system" {
		t.Fatalf("got %v", err)
	}
	var te *Error
	if !errors.As(err, &te) || te.File != "testdata/evil.pt" || te.Entry != "archive/data.pkl" || te.Offset <= 0 {
		t.Fatalf("error %v does not locate the global", err)
	}
	if !strings.Contains(err.Error(), "system") {
		t.Errorf("message %q does not name the global", err)
	}
}

type entry struct {
	name string
	data []byte
}

func makeZip(t testing.TB, entries ...entry) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pk assembles pickle bytes from pieces.
func pk(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case string:
			b = append(b, p...)
		case byte:
			b = append(b, p)
		case int:
			b = append(b, byte(p))
		case rune:
			b = append(b, byte(p))
		case []byte:
			b = append(b, p...)
		}
	}
	return b
}

func unicode(s string) []byte {
	b := []byte{'X', 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(len(s)))
	return append(b, s...)
}

// storagePid pushes ('storage', torch.<typ>, key, 'cpu', numel).
func storagePid(typ, key string, numel byte) []byte {
	return pk("(", unicode("storage"), "ctorch\n"+typ+"\n", unicode(key), unicode("cpu"), 'K', numel, "tQ")
}

// tensorPickle is _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict()).
func tensorPickle(pid []byte, offset byte, size, stride []byte) []byte {
	tup := func(xs []byte) []byte {
		b := []byte{'('}
		for _, x := range xs {
			b = append(b, 'K', x)
		}
		return append(b, 't')
	}
	return pk(0x80, 2, "ctorch._utils\n_rebuild_tensor_v2\n(", pid, 'K', offset, tup(size), tup(stride),
		0x89, "ccollections\nOrderedDict\n)R", "tR.")
}

func floatBytes(vals ...float32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func TestHandBuiltTensor(t *testing.T) {
	st := floatBytes(1.5, -2.25, 3.125, 0.375, -7, 9.5)
	p := tensorPickle(storagePid("FloatStorage", "0", 6), 1, []byte{2, 2}, []byte{1, 2})
	z := makeZip(t, entry{"x/data.pkl", p}, entry{"x/data/0", st})
	v, err := Decode(bytes.NewReader(z), int64(len(z)), "hand.pt", DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := v.(*Tensor).Float32()
	// storage[1 + i*1 + j*2]: [[-2.25, 0.375], [3.125, -7]]
	if !reflect.DeepEqual(got, []float32{-2.25, 0.375, 3.125, -7}) {
		t.Errorf("got %v", got)
	}
}

func TestErrors(t *testing.T) {
	st := floatBytes(1, 2, 3, 4)
	good := storagePid("FloatStorage", "0", 4)
	tests := []struct {
		name    string
		entries []entry
		raw     []byte
		reason  string
	}{
		{"not zip", nil, []byte("hello world"), "not a zip"},
		{"legacy", nil, []byte{0x80, 0x02, 0x8a, 0x0a}, "legacy"},
		{"no data.pkl", []entry{{"a/other", []byte{1}}}, nil, "no <root>/data.pkl"},
		{"big endian", []entry{{"a/data.pkl", pk(0x80, 2, "N.")}, {"a/byteorder", []byte("big")}}, nil, "byte order"},
		{"bad opcode", []entry{{"a/data.pkl", pk(0x80, 2, 0xff)}}, nil, "opcode 0xff"},
		{"protocol 1", []entry{{"a/data.pkl", pk(0x80, 1, "N.")}}, nil, "protocol 1"},
		{"no stop", []entry{{"a/data.pkl", pk(0x80, 2, "N")}}, nil, "no STOP"},
		{"underflow", []entry{{"a/data.pkl", pk(0x80, 2, ".")}}, nil, "underflow"},
		{"memo", []entry{{"a/data.pkl", pk(0x80, 2, "h", 7, ".")}}, nil, "memo key 7"},
		{"truncated string", []entry{{"a/data.pkl", pk(0x80, 2, "X", 0xff, 0xff, 0, 0, "ab.")}}, nil, "runs past"},
		{"bad utf8", []entry{{"a/data.pkl", pk(0x80, 2, 0x8c, 2, 0xff, 0xfe, ".")}}, nil, "UTF-8"},
		{"list key", []entry{{"a/data.pkl", pk(0x80, 2, "}]K", 1, "s.")}}, nil, "dict key"},
		{"call non-callable", []entry{{"a/data.pkl", pk(0x80, 2, "ctorch\nFloatStorage\n)R.")}}, nil, "cannot call"},
		{"missing storage", []entry{{"a/data.pkl", tensorPickle(good, 0, []byte{4}, []byte{1})}}, nil, "no entry a/data/0"},
		{"storage size", []entry{{"a/data.pkl", tensorPickle(good, 0, []byte{4}, []byte{1})}, {"a/data/0", st[:12]}}, nil, "needs 16"},
		{"view past end", []entry{{"a/data.pkl", tensorPickle(good, 1, []byte{4}, []byte{1})}, {"a/data/0", st}}, nil, "runs past"},
		{"stride past end", []entry{{"a/data.pkl", tensorPickle(good, 0, []byte{2, 2}, []byte{3, 1})}, {"a/data/0", st}}, nil, "runs past"},
		{"expanding view", []entry{{"a/data.pkl", tensorPickle(storagePid("FloatStorage", "0", 1), 0, []byte{255, 255, 255, 255}, []byte{0, 0, 0, 0})}, {"a/data/0", st[:4]}}, nil, "expands"},
		{"storage type", []entry{{"a/data.pkl", tensorPickle(storagePid("QInt8Storage", "0", 4), 0, []byte{4}, []byte{1})}, {"a/data/0", st}}, nil, "QInt8Storage"},
		{"storage key", []entry{{"a/data.pkl", tensorPickle(storagePid("FloatStorage", "../0", 4), 0, []byte{4}, []byte{1})}, {"a/data/0", st}}, nil, "storage key"},
		{"pid shape", []entry{{"a/data.pkl", pk(0x80, 2, unicode("x"), 0x85, "Q.")}}, nil, "5"},
		{"stack global", []entry{{"a/data.pkl", pk(0x80, 4, 0x8c, 8, "builtins", 0x8c, 4, "eval", 0x93, ".")}}, nil, "builtins.eval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.raw
			if data == nil {
				data = makeZip(t, tc.entries...)
			}
			_, err := Decode(bytes.NewReader(data), int64(len(data)), "bad.pt", DefaultLimits)
			var te *Error
			if !errors.As(err, &te) || te.File != "bad.pt" || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %v, want *Error mentioning %q", err, tc.reason)
			}
		})
	}
}

var fuzzLimits = Limits{MaxStorageBytes: 1 << 20, MaxElements: 1 << 18, MaxStack: 1 << 12, MaxMemo: 1 << 12, MaxLongBytes: 64}

func FuzzPickle(f *testing.F) {
	st := floatBytes(1, 2, 3, 4, 5, 6)
	f.Add(tensorPickle(storagePid("FloatStorage", "0", 6), 1, []byte{2, 2}, []byte{1, 2}))
	f.Add(pk(0x80, 2, "}q\x00(X\x01\x00\x00\x00aK\x01u."))
	for _, n := range []string{"head", "views", "views_p4"} {
		z, err := zip.OpenReader("testdata/" + n + ".pt")
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range z.File {
			if strings.HasSuffix(e.Name, "data.pkl") {
				rc, _ := e.Open()
				var b bytes.Buffer
				b.ReadFrom(rc)
				f.Add(b.Bytes())
			}
		}
		z.Close()
	}
	for _, seed := range hardeningPickleSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		data := makeZip(t, entry{"a/data.pkl", p}, entry{"a/data/0", st}, entry{"a/data/1", st[:8]}, entry{"a/data/2", st[:12]}, entry{"a/data/3", st[:16]})
		v, err := Decode(bytes.NewReader(data), int64(len(data)), "fuzz.pt", fuzzLimits)
		if err != nil {
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		if tn, ok := v.(*Tensor); ok && tn.DType.IsFloat() {
			if _, err := tn.Float32(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func FuzzArchive(f *testing.F) {
	for _, n := range []string{"head", "views", "evil"} {
		b, err := os.ReadFile("testdata/" + n + ".pt")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, seed := range hardeningArchiveSeeds(f) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := Decode(bytes.NewReader(data), int64(len(data)), "fuzz.pt", fuzzLimits)
		if err != nil {
			var te *Error
			if !errors.As(err, &te) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
		}
	})
}

func TestSaveRoundTrip(t *testing.T) {
	v, err := Load("testdata/head.pt")
	if err != nil {
		t.Fatal(err)
	}
	// A strided view is saved contiguous.
	views, err := Load("testdata/views.pt")
	if err != nil {
		t.Fatal(err)
	}
	top := v.(*Dict)
	top.Set("transposed", views.(*List).Items[1])
	top.Set("neg", int64(-1)<<40)
	top.Set("bytes", []byte{0, 1, 2})
	var buf bytes.Buffer
	if err := Save(&buf, top); err != nil {
		t.Fatal(err)
	}
	back, err := Decode(bytes.NewReader(buf.Bytes()), int64(buf.Len()), "saved.pt", DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	bd := back.(*Dict)
	if !reflect.DeepEqual(bd.Keys(), top.Keys()) {
		t.Fatalf("keys %v, want %v", bd.Keys(), top.Keys())
	}
	for _, k := range []string{"temperature", "base", "lora", "neg", "bytes"} {
		a, _ := top.Get(k)
		b, _ := bd.Get(k)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: %v != %v", k, b, a)
		}
	}
	ta, _ := top.Get("transposed")
	tb, _ := bd.Get("transposed")
	fa, _ := ta.(*Tensor).Float32()
	fb, _ := tb.(*Tensor).Float32()
	if !reflect.DeepEqual(fa, fb) || !reflect.DeepEqual(tb.(*Tensor).Stride, []int{4, 1}) {
		t.Errorf("transposed: %v vs %v, stride %v", fb, fa, tb.(*Tensor).Stride)
	}
	hb, _ := bd.Get("head")
	if hb.(*Dict).Class != "collections.OrderedDict" || hb.(*Dict).Attrs == nil {
		t.Error("state_dict class or _metadata lost")
	}
	args, _ := bd.Get("args")
	bv, _ := args.(*Dict).Get("big")
	if bv.(*big.Int).String() != "1180591620717411303424" {
		t.Errorf("big %v", bv)
	}
}
