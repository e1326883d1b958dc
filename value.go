package kev

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"

	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/systemone"
)

// Value is content as Kev reads it: a state, instructions, a description or a level. It is null, a string, a
// number (an integer and a float are told apart, as in Python: 100 renders "100", 100.0 renders "100.0"), a
// boolean, an array or an object whose keys keep their order. The zero Value is null.
//
// Build one with Text or ValueOf. ValueOf(json.RawMessage(b)) reads JSON text with Python's json rules (NaN and
// Infinity are read; a repeated key keeps its first place and its last value), as Kev's server reads a body.
type Value struct{ v pyjson.Value }

// Text returns s as content, with "" as null (the two render alike).
func Text(s string) Value {
	return Value{systemone.Text(s)}
}

// Object is content whose members keep the order given. Kev renders an object's members in order, so use an
// Object where the order matters (a Go map's keys are sorted).
type Object []Member

// Member is one key and value of an Object. The value is anything ValueOf takes.
type Member struct {
	Key   string
	Value any
}

// ValueOf converts a Go value into content:
//
//   - nil (and a nil pointer, map or slice) is null; a Value is itself;
//   - bool, string, every integer type and *big.Int are booleans, strings and integers;
//   - float32 and float64 are floats (a float32 by its shortest decimal form); NaN and infinities are an error;
//   - json.Number and json.RawMessage are read as JSON with Python's rules;
//   - an Object keeps its order; a map with string keys has its keys sorted;
//   - slices and arrays are arrays;
//   - anything else (a struct, a json.Marshaler) goes through encoding/json and is read back, so a float field
//     with an integral value there reads as an integer.
func ValueOf(v any) (Value, error) {
	pv, err := valueOf(reflect.ValueOf(v), 0)
	if err != nil {
		return Value{}, fmt.Errorf("kev: ValueOf: %w", err)
	}
	return Value{pv}, nil
}

var (
	valueType   = reflect.TypeFor[Value]()
	objectType  = reflect.TypeFor[Object]()
	numberType  = reflect.TypeFor[json.Number]()
	rawType     = reflect.TypeFor[json.RawMessage]()
	bigIntType  = reflect.TypeFor[*big.Int]()
	marshalType = reflect.TypeFor[json.Marshaler]()
)

func valueOf(rv reflect.Value, depth int) (pyjson.Value, error) {
	if depth > pyjson.MaxDepth {
		return pyjson.Value{}, errors.New("nested too deep (a cycle?)")
	}
	if !rv.IsValid() {
		return pyjson.Null(), nil
	}
	switch rv.Type() {
	case valueType:
		return rv.Interface().(Value).v, nil
	case objectType:
		obj := rv.Interface().(Object)
		ms := make([]pyjson.Member, len(obj))
		for i, m := range obj {
			mv, err := valueOf(reflect.ValueOf(m.Value), depth+1)
			if err != nil {
				return pyjson.Value{}, fmt.Errorf("%q: %w", m.Key, err)
			}
			ms[i] = pyjson.M(m.Key, mv)
		}
		return pyjson.Object(ms...), nil
	case numberType:
		return parseJSON([]byte(rv.String()))
	case rawType:
		return parseJSON(rv.Bytes())
	case bigIntType:
		if rv.IsNil() {
			return pyjson.Null(), nil
		}
		return pyjson.BigInt(rv.Interface().(*big.Int)), nil
	}
	if rv.Type().Implements(marshalType) && rv.Kind() != reflect.Interface {
		if rv.Kind() == reflect.Pointer && rv.IsNil() {
			return pyjson.Null(), nil
		}
		return viaJSON(rv)
	}
	switch rv.Kind() {
	case reflect.Interface, reflect.Pointer:
		if rv.IsNil() {
			return pyjson.Null(), nil
		}
		return valueOf(rv.Elem(), depth+1)
	case reflect.Bool:
		return pyjson.Bool(rv.Bool()), nil
	case reflect.String:
		return pyjson.String(rv.String()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return pyjson.Int(rv.Int()), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		u := rv.Uint()
		if u > math.MaxInt64 {
			return pyjson.BigInt(new(big.Int).SetUint64(u)), nil
		}
		return pyjson.Int(int64(u)), nil
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return pyjson.Value{}, fmt.Errorf("%v is not a JSON number", f)
		}
		if rv.Kind() == reflect.Float32 {
			f, _ = strconv.ParseFloat(strconv.FormatFloat(f, 'g', -1, 32), 64)
		}
		return pyjson.Float(f), nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return viaJSON(rv)
		}
		if rv.IsNil() {
			return pyjson.Null(), nil
		}
		keys := rv.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int {
			switch {
			case a.String() < b.String():
				return -1
			case a.String() > b.String():
				return 1
			}
			return 0
		})
		ms := make([]pyjson.Member, len(keys))
		for i, k := range keys {
			mv, err := valueOf(rv.MapIndex(k), depth+1)
			if err != nil {
				return pyjson.Value{}, fmt.Errorf("%q: %w", k.String(), err)
			}
			ms[i] = pyjson.M(k.String(), mv)
		}
		return pyjson.Object(ms...), nil
	case reflect.Slice, reflect.Array:
		if rv.Type().Elem().Kind() == reflect.Uint8 {
			return viaJSON(rv) // []byte: a base64 string, as encoding/json writes it
		}
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return pyjson.Null(), nil
		}
		elems := make([]pyjson.Value, rv.Len())
		for i := range elems {
			ev, err := valueOf(rv.Index(i), depth+1)
			if err != nil {
				return pyjson.Value{}, fmt.Errorf("[%d]: %w", i, err)
			}
			elems[i] = ev
		}
		return pyjson.Array(elems...), nil
	}
	return viaJSON(rv)
}

func viaJSON(rv reflect.Value) (pyjson.Value, error) {
	b, err := json.Marshal(rv.Interface())
	if err != nil {
		return pyjson.Value{}, err
	}
	return parseJSON(b)
}

func parseJSON(b []byte) (pyjson.Value, error) {
	v, err := pyjson.Parse(b)
	if err != nil {
		return pyjson.Value{}, err
	}
	return v, nil
}

// String returns the text the model reads for the content, exactly as Kev renders it: null is ""; a string is
// itself; numbers and booleans are Python's str() ("1.5", "100.0", "True"); an array is one "- item" line per
// element; an object is one "key: value" line per member, nested content indented two spaces per level.
func (v Value) String() string { return systemone.Render(v.v) }

// MarshalJSON returns the content as compact JSON (Python's float repr, key order kept).
func (v Value) MarshalJSON() ([]byte, error) { return pyjson.Compact(v.v) }

// UnmarshalJSON reads JSON with Python's json rules.
func (v *Value) UnmarshalJSON(data []byte) error {
	pv, err := pyjson.Parse(data)
	if err != nil {
		return fmt.Errorf("kev: %w", err)
	}
	v.v = pv
	return nil
}
