// Package pyjson holds JSON values the way Python's json module and pydantic see them: object key order is kept,
// integer literals stay integers of any size and float literals stay floats, and text output follows CPython
// (str() of scalars, float repr, json.dumps with its default and compact separators).
//
// Kev renders caller JSON into the text the model reads (the field names are labels), so the rendering must agree
// with Python byte for byte: `1.50` reads as `1.5`, `1e2` as `100.0`, `true` as `True`, a 30-digit integer in full.
package pyjson

import (
	"math"
	"math/big"
	"strconv"
)

// Kind says which of the seven JSON shapes a Value holds.
type Kind uint8

// The kinds of Value. Int and Float are told apart by the number literal, as Python's json module does.
const (
	KindNull Kind = iota
	KindBool
	KindInt
	KindFloat
	KindString
	KindArray
	KindObject
)

var kindNames = [...]string{"null", "bool", "int", "float", "string", "array", "object"}

// String returns the kind's name: null, bool, int, float, string, array or object.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one JSON value. The zero Value is null. Values are immutable once built: the slices returned by Elems and
// Members must not be modified.
type Value struct {
	kind Kind
	b    bool
	s    string // KindString: the text; KindInt: the canonical decimal digits ("-12", never "-0")
	f    float64
	arr  []Value
	obj  []Member
}

// Member is one key/value pair of an object.
type Member struct {
	Key   string
	Value Value
}

// Null returns the JSON null (Python None).
func Null() Value { return Value{} }

// Bool returns a JSON boolean.
func Bool(b bool) Value { return Value{kind: KindBool, b: b} }

// Int returns a JSON integer.
func Int(i int64) Value { return Value{kind: KindInt, s: strconv.FormatInt(i, 10)} }

// BigInt returns a JSON integer of any size. A nil x is 0.
func BigInt(x *big.Int) Value {
	if x == nil {
		return Int(0)
	}
	return Value{kind: KindInt, s: x.String()}
}

// Float returns a JSON float. NaN and the infinities are allowed, as Python's json module allows them; the compact
// encoder refuses them as Starlette's does.
func Float(f float64) Value { return Value{kind: KindFloat, f: f} }

// String returns a JSON string.
func String(s string) Value { return Value{kind: KindString, s: s} }

// Array returns a JSON array of the given elements.
func Array(elems ...Value) Value {
	if elems == nil {
		elems = []Value{}
	}
	return Value{kind: KindArray, arr: elems}
}

// Object returns a JSON object with the given members in order. A key given twice keeps its first position and its
// last value, as a Python dict built from the pairs does.
func Object(members ...Member) Value {
	out := make([]Member, 0, len(members))
	index := make(map[string]int, len(members))
	for _, m := range members {
		if i, ok := index[m.Key]; ok {
			out[i].Value = m.Value
			continue
		}
		index[m.Key] = len(out)
		out = append(out, m)
	}
	return Value{kind: KindObject, obj: out}
}

// M is shorthand for a Member.
func M(key string, v Value) Member { return Member{Key: key, Value: v} }

// Kind returns the kind of v.
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether v is null.
func (v Value) IsNull() bool { return v.kind == KindNull }

// IsContainer reports whether v is an array or an object.
func (v Value) IsContainer() bool { return v.kind == KindArray || v.kind == KindObject }

// AsBool returns the boolean of a KindBool value, and false for any other kind.
func (v Value) AsBool() bool { return v.kind == KindBool && v.b }

// AsString returns the text of a KindString value, and "" for any other kind.
func (v Value) AsString() string {
	if v.kind != KindString {
		return ""
	}
	return v.s
}

// IntText returns the decimal digits of a KindInt value (Python's str of the int), and "" for any other kind.
func (v Value) IntText() string {
	if v.kind != KindInt {
		return ""
	}
	return v.s
}

// AsInt64 returns the integer of a KindInt value when it fits in an int64.
func (v Value) AsInt64() (int64, bool) {
	if v.kind != KindInt {
		return 0, false
	}
	i, err := strconv.ParseInt(v.s, 10, 64)
	return i, err == nil
}

// AsFloat returns the number of a KindFloat or KindInt value as a float64 (an integer rounds to the nearest double,
// as Python's float(int) does, and is ±Inf past the double range), and NaN for any other kind.
func (v Value) AsFloat() float64 {
	switch v.kind {
	case KindFloat:
		return v.f
	case KindInt:
		f, _ := strconv.ParseFloat(v.s, 64)
		return f
	}
	return math.NaN()
}

// Len returns the number of elements of an array or members of an object, and 0 for any other kind.
func (v Value) Len() int {
	switch v.kind {
	case KindArray:
		return len(v.arr)
	case KindObject:
		return len(v.obj)
	}
	return 0
}

// Elems returns the elements of an array, and nil for any other kind.
func (v Value) Elems() []Value {
	if v.kind != KindArray {
		return nil
	}
	return v.arr
}

// Members returns the members of an object in order, and nil for any other kind.
func (v Value) Members() []Member {
	if v.kind != KindObject {
		return nil
	}
	return v.obj
}

// Get returns the value of key in an object, and false when v is not an object or has no such key.
func (v Value) Get(key string) (Value, bool) {
	if v.kind != KindObject {
		return Value{}, false
	}
	for _, m := range v.obj {
		if m.Key == key {
			return m.Value, true
		}
	}
	return Value{}, false
}

// With returns a copy of the object v with key set to val: an existing key keeps its position, a new one goes last
// (Python's {**d, key: val}). A v that is not an object is returned unchanged.
func (v Value) With(key string, val Value) Value {
	if v.kind != KindObject {
		return v
	}
	out := make([]Member, len(v.obj), len(v.obj)+1)
	copy(out, v.obj)
	for i := range out {
		if out[i].Key == key {
			out[i].Value = val
			return Value{kind: KindObject, obj: out}
		}
	}
	return Value{kind: KindObject, obj: append(out, M(key, val))}
}

// Append returns a copy of the array v with elems added at the end (Python's list + [..]). A v that is not an array
// is returned unchanged.
func (v Value) Append(elems ...Value) Value {
	if v.kind != KindArray {
		return v
	}
	out := make([]Value, 0, len(v.arr)+len(elems))
	out = append(append(out, v.arr...), elems...)
	return Value{kind: KindArray, arr: out}
}

// Equal reports whether a and b are the same JSON value: same kinds (an int never equals a float), same text,
// same members in the same order. Floats are equal when their bits are, or when both are NaN.
func Equal(a, b Value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case KindNull:
		return true
	case KindBool:
		return a.b == b.b
	case KindInt, KindString:
		return a.s == b.s
	case KindFloat:
		return math.Float64bits(a.f) == math.Float64bits(b.f) || (math.IsNaN(a.f) && math.IsNaN(b.f))
	case KindArray:
		if len(a.arr) != len(b.arr) {
			return false
		}
		for i := range a.arr {
			if !Equal(a.arr[i], b.arr[i]) {
				return false
			}
		}
		return true
	case KindObject:
		if len(a.obj) != len(b.obj) {
			return false
		}
		for i := range a.obj {
			if a.obj[i].Key != b.obj[i].Key || !Equal(a.obj[i].Value, b.obj[i].Value) {
				return false
			}
		}
		return true
	}
	return false
}

// Str returns Python's str() of a scalar: the string itself, "True"/"False", the integer's digits, the float's repr
// ("1.0", "1e+16", "inf", "nan"), and "None" for null. Arrays and objects have no str() in Kev's rendering; for them
// Str returns their json.dumps text.
func (v Value) Str() string {
	switch v.kind {
	case KindNull:
		return "None"
	case KindBool:
		if v.b {
			return "True"
		}
		return "False"
	case KindInt, KindString:
		return v.s
	case KindFloat:
		return FormatFloat(v.f)
	}
	return Dumps(v)
}

// canonicalInt turns the digits of a JSON integer literal ("-?(0|[1-9][0-9]*)") into Python's str of the int.
func canonicalInt(lit string) string {
	if lit == "-0" {
		return "0"
	}
	return lit
}
