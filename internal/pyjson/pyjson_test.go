package pyjson

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// cpython holds what CPython printed for the same inputs (testdata/gen_cpython.py).
type cpython struct {
	Python string      `json:"python"`
	Repr   [][2]string `json:"repr"`
	Round  [][3]any    `json:"round"`
	Loads  []struct {
		In      string `json:"in"`
		OK      bool   `json:"ok"`
		Dumps   string `json:"dumps"`
		Compact string `json:"compact"`
		Msg     string `json:"msg"`
		Pos     int    `json:"pos"`
		Str     string `json:"str"`
	} `json:"loads"`
	Dumps [][3]string `json:"dumps"`
}

func loadCPython(t *testing.T) *cpython {
	t.Helper()
	b, err := os.ReadFile("testdata/cpython.json")
	if err != nil {
		t.Fatal(err)
	}
	var c cpython
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func fromBits(t *testing.T, h string) float64 {
	t.Helper()
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 8 {
		t.Fatalf("bad bits %q", h)
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b))
}

func TestFormatFloatMatchesCPython(t *testing.T) {
	c := loadCPython(t)
	if len(c.Repr) < 1000 {
		t.Fatalf("only %d repr vectors", len(c.Repr))
	}
	for _, r := range c.Repr {
		x := fromBits(t, r[0])
		if got := FormatFloat(x); got != r[1] {
			t.Errorf("FormatFloat(%v) = %q, CPython repr %q", x, got, r[1])
		}
	}
}

func TestFormatFloatTable(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want string
	}{
		{1, "1.0"}, {0, "0.0"}, {math.Copysign(0, -1), "-0.0"}, {2, "2.0"}, {0.7, "0.7"}, {0.2088, "0.2088"},
		{1e16, "1e+16"}, {123456789012345678.0, "1.2345678901234568e+17"}, {0.0001, "0.0001"}, {0.00001, "1e-05"},
		{1e21, "1e+21"}, {1e-7, "1e-07"}, {1.5e-5, "1.5e-05"}, {1e15, "1000000000000000.0"},
		{9999999999999998.0, "9999999999999998.0"}, {math.Inf(1), "inf"}, {math.Inf(-1), "-inf"}, {math.NaN(), "nan"},
		{100, "100.0"}, {-2.5, "-2.5"}, {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
	} {
		if got := FormatFloat(tc.x); got != tc.want {
			t.Errorf("FormatFloat(%v) = %q, want %q", tc.x, got, tc.want)
		}
	}
}

func TestRoundMatchesCPython(t *testing.T) {
	c := loadCPython(t)
	for _, r := range c.Round {
		x := fromBits(t, r[0].(string))
		n := int(r[1].(float64))
		want := fromBits(t, r[2].(string))
		if got := Round(x, n); math.Float64bits(got) != math.Float64bits(want) {
			t.Errorf("Round(%v, %d) = %v, CPython %v", x, n, got, want)
		}
	}
}

func TestRoundTable(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		n    int
		want float64
	}{
		{0.00005, 4, 0.0001}, // 5.000000000000000409e-05: above the tie
		{0.12345, 4, 0.1235}, // 0.123450000000000004174
		{2.675, 2, 2.67},     // 2.67499999999999982236431605997495353221893310546875
		{0.5, 0, 0},
		{1.5, 0, 2},
		{2.5, 0, 2},
		{0.125, 2, 0.12}, // exact tie: to even
		{0.375, 2, 0.38},
		{0.7, 4, 0.7},
		{float64(float32(0.3)), 4, 0.3},
		{1234.5678, -2, 1200},
		{-0.00001, 4, math.Copysign(0, -1)},
	} {
		if got := Round(tc.x, tc.n); math.Float64bits(got) != math.Float64bits(tc.want) {
			t.Errorf("Round(%v, %d) = %v, want %v", tc.x, tc.n, got, tc.want)
		}
	}
	if !math.IsNaN(Round(math.NaN(), 4)) || !math.IsInf(Round(math.Inf(-1), 4), -1) {
		t.Error("Round must pass NaN and infinities through")
	}
}

// exactRound4 rounds x to 4 decimals on its exact rational value, half to even: an independent check of Round.
func exactRound4(x float64) float64 {
	r := new(big.Rat).SetFloat64(x)
	r.Mul(r, big.NewRat(10000, 1))
	neg := r.Sign() < 0
	r.Abs(r)
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	twice := new(big.Int).Mul(m, big.NewInt(2))
	switch twice.Cmp(r.Denom()) {
	case 1:
		q.Add(q, big.NewInt(1))
	case 0:
		if q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
	}
	f, _ := new(big.Rat).SetFrac(q, big.NewInt(10000)).Float64()
	if neg {
		f = -f
	}
	return f
}

func TestRoundAgainstExactRationals(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		var x float64
		switch i % 4 {
		case 0:
			x = float64(rng.Float32())
		case 1:
			x = rng.Float64()
		case 2:
			x = float64(rng.IntN(2000000)) / 20000 // many exact or near ties
		default:
			x = (rng.Float64() - 0.5) * 1e6
		}
		if got, want := Round(x, 4), exactRound4(x); got != want {
			t.Fatalf("Round(%v (%s), 4) = %v, exact %v", x, strconv.FormatFloat(x, 'g', 30, 64), got, want)
		}
	}
}

func TestParseMatchesCPython(t *testing.T) {
	c := loadCPython(t)
	// Lone surrogates are the one chosen difference: they decode to U+FFFD (see Parse).
	lone := map[string]string{`"\ud800"`: `"\ufffd"`, `"\udc00x"`: `"\ufffdx"`, `"\ud800\u0041"`: `"\ufffdA"`}
	for _, l := range c.Loads {
		v, err := Parse([]byte(l.In))
		if want, ok := lone[l.In]; ok {
			if err != nil || Dumps(v) != want {
				t.Errorf("Parse(%s) = %s, %v; want %s", l.In, Dumps(v), err, want)
			}
			continue
		}
		if l.OK {
			if err != nil {
				t.Errorf("Parse(%q): %v, CPython accepts it", l.In, err)
				continue
			}
			if got := Dumps(v); got != l.Dumps {
				t.Errorf("Dumps(Parse(%q)) = %s, CPython %s", l.In, got, l.Dumps)
			}
			if got := string(mustAppendAllowNaN(v)); got != l.Compact {
				t.Errorf("compact(Parse(%q)) = %s, CPython %s", l.In, got, l.Compact)
			}
			continue
		}
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Parse(%q) = %v, %v; CPython: %s", l.In, Dumps(v), err, l.Str)
			continue
		}
		if se.Msg != l.Msg || se.Pos != l.Pos || se.Error() != l.Str {
			t.Errorf("Parse(%q): %q at %d (%s), CPython %q at %d (%s)", l.In, se.Msg, se.Pos, se.Error(), l.Msg, l.Pos, l.Str)
		}
	}
}

// mustAppendAllowNaN is the compact form with Python's allow_nan=True, for comparing parsed documents with NaN.
func mustAppendAllowNaN(v Value) []byte {
	b, err := Compact(v)
	if err != nil {
		return []byte(strings.NewReplacer(", ", ",", ": ", ":").Replace(Dumps(v)))
	}
	return b
}

func TestQuotedMatchesCPython(t *testing.T) {
	c := loadCPython(t)
	for _, d := range c.Dumps {
		if got := string(AppendQuoted(nil, d[0], true)); got != d[1] {
			t.Errorf("ascii %q = %s, CPython %s", d[0], got, d[1])
		}
		if got := string(AppendQuoted(nil, d[0], false)); got != d[2] {
			t.Errorf("compact %q = %s, CPython %s", d[0], got, d[2])
		}
	}
}

func TestParseKeepsNumberKinds(t *testing.T) {
	v, err := Parse([]byte(`{"i": 12345678901234567890123, "f": 1.50, "e": 1e2, "z": -0, "b": true, "n": null}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key  string
		kind Kind
		str  string
	}{
		{"i", KindInt, "12345678901234567890123"}, {"f", KindFloat, "1.5"}, {"e", KindFloat, "100.0"},
		{"z", KindInt, "0"}, {"b", KindBool, "True"}, {"n", KindNull, "None"},
	} {
		m, ok := v.Get(tc.key)
		if !ok || m.Kind() != tc.kind || m.Str() != tc.str {
			t.Errorf("%s: kind %v str %q, want %v %q", tc.key, m.Kind(), m.Str(), tc.kind, tc.str)
		}
	}
}

func TestParseDuplicateKeys(t *testing.T) {
	v, err := Parse([]byte(`{"a": 1, "b": 2, "a": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := Dumps(v); got != `{"a": 3, "b": 2}` {
		t.Errorf("got %s", got)
	}
	if got := Dumps(Object(M("x", Int(1)), M("y", Int(2)), M("x", Int(5)))); got != `{"x": 5, "y": 2}` {
		t.Errorf("Object: got %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		in     string
		offset int
	}{
		{"[\xff]", 1},
		{"\x00\x00\x00[", 0},
		{"\xff\xfe[\x00]\x00", 0},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), MaxDepth},
		{"[" + strings.Repeat("7", MaxIntDigits+1) + "]", 1},
	} {
		_, err := Parse([]byte(tc.in))
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Offset != tc.offset {
			t.Errorf("Parse(%.20q): %v, want a ParseError at %d", tc.in, err, tc.offset)
		}
	}
	if _, err := Parse([]byte(strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth))); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	// Three bytes are read as UTF-8 whatever they hold, as Python's detect_encoding does.
	if _, err := Parse([]byte("[\x00]")); err == nil || err.(*SyntaxError).Msg != "Expecting value" {
		t.Errorf("NUL: %v", err)
	}
	if v, err := Parse([]byte("\xef\xbb\xbf[1]")); err != nil || Dumps(v) != "[1]" {
		t.Errorf("BOM: %v %v", v, err)
	}
	// Position in characters, line and column, as Python counts them.
	_, err := Parse([]byte("{\"é\":\n  1,}"))
	var se *SyntaxError
	if !errors.As(err, &se) || se.Pos != 10 || se.Offset != 11 || se.Line != 2 || se.Col != 5 {
		t.Errorf("got %#v", err)
	}
}

func TestLoneSurrogatesBecomeReplacementChar(t *testing.T) {
	v, err := Parse([]byte(`["\ud800", "\udc00x", "\ud800\u0041", "\ud83d\ude00"]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"\uFFFD", "\uFFFDx", "\uFFFDA", "😀"}
	for i, e := range v.Elems() {
		if e.AsString() != want[i] {
			t.Errorf("%d: %q, want %q", i, e.AsString(), want[i])
		}
	}
}

func TestCompactRefusesNonFinite(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := Compact(Array(Float(f))); !errors.Is(err, ErrNonFinite) {
			t.Errorf("%v: %v", f, err)
		}
	}
	if got := Dumps(Array(Float(math.NaN()), Float(math.Inf(-1)))); got != "[NaN, -Infinity]" {
		t.Errorf("Dumps: %s", got)
	}
}

func TestEditing(t *testing.T) {
	o := Object(M("a", Int(1)), M("b", Int(2)))
	if got := Dumps(o.With("a", String("x")).With("c", Null())); got != `{"a": "x", "b": 2, "c": null}` {
		t.Errorf("With: %s", got)
	}
	if got := Dumps(o); got != `{"a": 1, "b": 2}` {
		t.Errorf("With changed its receiver: %s", got)
	}
	a := Array(Int(1))
	if got := Dumps(a.Append(Bool(false))); got != `[1, false]` {
		t.Errorf("Append: %s", got)
	}
	if !Equal(a, Array(Int(1))) || Equal(Int(1), Float(1)) || !Equal(Float(math.NaN()), Float(math.NaN())) {
		t.Error("Equal")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5, "x", null, true]}`, `"\ud800"`, `1e400`, `-0`, `[NaN]`, `{"a":1,"a":2}`,
		"\xef\xbb\xbf{}", `"\u00e9\n"`, `[[[]]]`, `123456789012345678901234567890`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err != nil {
			var se *SyntaxError
			var pe *ParseError
			if !errors.As(err, &se) && !errors.As(err, &pe) {
				t.Fatalf("untyped error %T", err)
			}
			return
		}
		// Both output forms read back to the same value.
		d := Dumps(v)
		v2, err := Parse([]byte(d))
		if err != nil || !Equal(v, v2) {
			t.Fatalf("Dumps %s did not read back: %v", d, err)
		}
		if c, err := Compact(v); err == nil {
			v3, err := Parse(c)
			if err != nil || !Equal(v, v3) {
				t.Fatalf("Compact %s did not read back: %v", c, err)
			}
		}
	})
}
