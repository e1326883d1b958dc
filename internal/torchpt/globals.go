package torchpt

import (
	"strconv"
	"strings"

	"github.com/kevgo/kev/internal/quote"
)

// ForbiddenGlobalError reports a pickle that refers to a Python global
// outside the allowed set. Nothing is ever executed; loading stops.
type ForbiddenGlobalError struct {
	Module, Name string
}

// Error describes the failure and where it happened.
func (e *ForbiddenGlobalError) Error() string {
	return "torchpt: global " + globalName(e.Module, e.Name) + " is not allowed"
}

// globalName shows module.name from the pickle, quoted and cut when long or
// unusual.
func globalName(mod, name string) string {
	s := mod + "." + name
	if len(s) > quote.Max || strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) || r == '"' }) {
		return quote.String(s)
	}
	return s
}

// Callables the unpickler knows how to apply without running Python.
var (
	gOrderedDict      = Global{"collections", "OrderedDict"}
	gRebuildTensorV2  = Global{"torch._utils", "_rebuild_tensor_v2"}
	gRebuildTensor    = Global{"torch._utils", "_rebuild_tensor"}
	gRebuildParam     = Global{"torch._utils", "_rebuild_parameter"}
	gRebuildParamSt   = Global{"torch._utils", "_rebuild_parameter_with_state"}
	gRebuildFromType  = Global{"torch._tensor", "_rebuild_from_type_v2"}
	gCodecsEncode     = Global{"_codecs", "encode"}
	gTensorClass      = Global{"torch", "Tensor"}
	gParameterClass   = Global{"torch.nn.parameter", "Parameter"}
	gUntypedStorage   = Global{"torch", "UntypedStorage"}
	allowedCallables  = map[Global]bool{gOrderedDict: true, gRebuildTensorV2: true, gRebuildTensor: true, gRebuildParam: true, gRebuildParamSt: true, gRebuildFromType: true, gCodecsEncode: true}
	allowedTypeValues = map[Global]bool{gTensorClass: true, gParameterClass: true, gUntypedStorage: true}
)

// storageTypes maps torch's legacy typed storage classes to element types.
var storageTypes = map[string]DType{
	"FloatStorage": Float32, "DoubleStorage": Float64, "HalfStorage": Float16, "BFloat16Storage": BFloat16,
	"LongStorage": Int64, "IntStorage": Int32, "ShortStorage": Int16, "CharStorage": Int8,
	"ByteStorage": Uint8, "BoolStorage": Bool,
}

// dtypeNames maps torch dtype attribute names to element types.
var dtypeNames = map[string]DType{
	"float32": Float32, "float": Float32, "float64": Float64, "double": Float64,
	"float16": Float16, "half": Float16, "bfloat16": BFloat16,
	"int64": Int64, "long": Int64, "int32": Int32, "int": Int32, "int16": Int16, "short": Int16,
	"int8": Int8, "uint8": Uint8, "bool": Bool,
}

// global resolves a GLOBAL opcode against the allow list.
func (u *unpickler) global(mod, name string) (any, error) {
	g := Global{mod, name}
	if mod == "__builtin__" {
		g.Module = "builtins"
	}
	if allowedCallables[g] || allowedTypeValues[g] {
		return g, nil
	}
	if g.Module == "torch" {
		if _, ok := storageTypes[name]; ok {
			return g, nil
		}
		if _, ok := dtypeNames[name]; ok {
			return g, nil
		}
	}
	return nil, &opError{off: u.pos, reason: "global " + globalName(mod, name) + " is not allowed",
		err: &ForbiddenGlobalError{Module: mod, Name: name}}
}

// call applies an allowed callable (REDUCE or NEWOBJ).
func (u *unpickler) call(fn any, args Tuple) (any, error) {
	g, ok := fn.(Global)
	if !ok || !allowedCallables[g] {
		return nil, u.fail("cannot call a %s", typeName(fn))
	}
	switch g {
	case gOrderedDict:
		d := NewDict()
		d.Class = "collections.OrderedDict"
		if len(args) == 0 {
			return d, nil
		}
		if len(args) != 1 {
			return nil, u.fail("OrderedDict takes at most one argument")
		}
		var pairs []any
		switch a := args[0].(type) {
		case *List:
			pairs = a.Items
		case Tuple:
			pairs = a
		default:
			return nil, u.fail("OrderedDict argument is a %s", typeName(args[0]))
		}
		if err := u.charge(dictEntry * len(pairs)); err != nil {
			return nil, err
		}
		for _, p := range pairs {
			kv, ok := p.(Tuple)
			if !ok || len(kv) != 2 {
				return nil, u.fail("OrderedDict item is not a pair")
			}
			if err := d.Set(kv[0], kv[1]); err != nil {
				return nil, u.fail("%v", err)
			}
		}
		return d, nil
	case gCodecsEncode:
		// Protocol 2 writes bytes as _codecs.encode(str, "latin1").
		if len(args) != 2 {
			return nil, u.fail("_codecs.encode takes 2 arguments")
		}
		s, ok1 := args[0].(string)
		enc, ok2 := args[1].(string)
		if !ok1 || !ok2 || (enc != "latin1" && enc != "latin-1") {
			return nil, u.fail("_codecs.encode supports only (str, \"latin1\")")
		}
		if err := u.charge(len(s) + slotBytes); err != nil {
			return nil, err
		}
		b := make([]byte, 0, len(s))
		for _, r := range s {
			if r > 0xff {
				return nil, u.fail("_codecs.encode: character %U outside latin1", r)
			}
			b = append(b, byte(r))
		}
		return b, nil
	case gRebuildTensorV2, gRebuildTensor:
		want := 6
		if g == gRebuildTensor {
			want = 4
		}
		if len(args) < want || len(args) > want+1 {
			return nil, u.fail("%s takes %d arguments, got %d", g, want, len(args))
		}
		t, err := u.rebuildTensor(args[0], args[1], args[2], args[3])
		if err != nil {
			return nil, err
		}
		if g == gRebuildTensorV2 {
			rg, ok := args[4].(bool)
			if !ok {
				return nil, u.fail("requires_grad is a %s", typeName(args[4]))
			}
			t.RequiresGrad = rg
		}
		return t, nil
	case gRebuildParam, gRebuildParamSt:
		want := 3
		if g == gRebuildParamSt {
			want = 4
		}
		if len(args) != want {
			return nil, u.fail("%s takes %d arguments, got %d", g, want, len(args))
		}
		t, ok := args[0].(*Tensor)
		if !ok {
			return nil, u.fail("parameter data is a %s", typeName(args[0]))
		}
		rg, ok := args[1].(bool)
		if !ok {
			return nil, u.fail("requires_grad is a %s", typeName(args[1]))
		}
		if err := u.charge(objectBytes); err != nil {
			return nil, err
		}
		c := *t
		c.RequiresGrad = rg
		c.Parameter = true
		return &c, nil
	case gRebuildFromType:
		// _rebuild_from_type_v2(func, type, args, state)
		if len(args) != 4 {
			return nil, u.fail("%s takes 4 arguments, got %d", g, len(args))
		}
		typ, ok := args[1].(Global)
		if !ok || (typ != gTensorClass && typ != gParameterClass) {
			return nil, u.fail("%s of type %s is not supported", g, typeName(args[1]))
		}
		inner, ok := args[2].(Tuple)
		if !ok {
			return nil, u.fail("%s arguments are a %s", g, typeName(args[2]))
		}
		v, err := u.call(args[0], inner)
		if err != nil {
			return nil, err
		}
		if _, ok := v.(*Tensor); !ok {
			return nil, u.fail("%s did not build a tensor", g)
		}
		return v, nil
	}
	return nil, u.fail("cannot call %s", g)
}

// build applies BUILD: instance state on a dict (kept as Attrs) or an empty
// state on a tensor.
func (u *unpickler) build(obj, state any) error {
	switch o := obj.(type) {
	case *Dict:
		var st any = state
		if t, ok := state.(Tuple); ok && len(t) == 2 { // (dict state, slot state)
			st = t[0]
			if t[1] != nil {
				if _, ok := t[1].(*Dict); !ok {
					return u.fail("BUILD slot state is a %s", typeName(t[1]))
				}
				if err := mergeAttrs(o, t[1].(*Dict)); err != nil {
					return u.fail("%v", err)
				}
			}
		}
		if st == nil {
			return nil
		}
		sd, ok := st.(*Dict)
		if !ok {
			return u.fail("BUILD state for a dict is a %s", typeName(st))
		}
		if err := mergeAttrs(o, sd); err != nil {
			return u.fail("%v", err)
		}
		return nil
	case *Tensor:
		if d, ok := state.(*Dict); ok && d.Len() == 0 || state == nil {
			return nil
		}
		return u.fail("BUILD with state on a tensor is not supported")
	}
	return u.fail("BUILD on a %s", typeName(obj))
}

func mergeAttrs(o *Dict, st *Dict) error {
	if o.Attrs == nil {
		o.Attrs = NewDict()
	}
	for i, k := range st.keys {
		if err := o.Attrs.Set(k, st.values[i]); err != nil {
			return err
		}
	}
	return nil
}

// maxExpand is the most elements a view may have beyond its storage's (a
// stride-0 expansion, as torch's expand saves): reading the view copies
// every element, so a few bytes of storage could otherwise stand for
// gigabytes.
const maxExpand = 4096

// rebuildTensor validates the view (storage, offset, size, stride).
func (u *unpickler) rebuildTensor(st, off, size, stride any) (*Tensor, error) {
	s, ok := st.(*storage)
	if !ok {
		return nil, u.fail("tensor storage is a %s", typeName(st))
	}
	o, ok := off.(int64)
	if !ok || o < 0 {
		return nil, u.fail("storage offset %s is not a non-negative int", describe(off))
	}
	shape, err := u.ints(size, "size")
	if err != nil {
		return nil, err
	}
	strides, err := u.ints(stride, "stride")
	if err != nil {
		return nil, err
	}
	if len(shape) != len(strides) {
		return nil, u.fail("size %s and stride %s differ in length", dims(shape), dims(strides))
	}
	numel := int64(1)
	last := o // highest element index touched
	for _, n := range shape {
		if n != 0 && numel > u.limits.MaxElements/int64(n) {
			return nil, u.failLimit("tensor of shape %s exceeds %d elements", dims(shape), u.limits.MaxElements)
		}
		numel *= int64(n)
	}
	if numel > s.numel && numel > maxExpand {
		return nil, u.fail("view of shape %s expands a %d-element storage to %d elements", dims(shape), s.numel, numel)
	}
	if numel > 0 {
		for i, n := range shape {
			span := int64(n-1) * int64(strides[i])
			if strides[i] != 0 && int64(n-1) > (s.numel)/int64(strides[i]) {
				return nil, u.fail("view of shape %s, stride %s runs past the %d-element storage", dims(shape), dims(strides), s.numel)
			}
			last += span
		}
		if last >= s.numel {
			return nil, u.fail("view of shape %s, stride %s at offset %d runs past the %d-element storage", dims(shape), dims(strides), o, s.numel)
		}
	}
	return &Tensor{DType: s.dtype, Shape: shape, Stride: strides, Offset: int(o), Storage: s.data, StorageKey: s.key}, nil
}

func (u *unpickler) ints(v any, what string) ([]int, error) {
	t, ok := v.(Tuple)
	if !ok {
		if l, isList := v.(*List); isList {
			t = l.Items
		} else {
			return nil, u.fail("tensor %s is a %s", what, typeName(v))
		}
	}
	if err := u.charge(8*len(t) + objectBytes); err != nil {
		return nil, err
	}
	out := make([]int, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok || n < 0 || n > 1<<40 {
			return nil, u.fail("tensor %s[%d] = %s is not a valid dimension", what, i, describe(x))
		}
		out[i] = int(n)
	}
	return out, nil
}
