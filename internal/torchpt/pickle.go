package torchpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kevgo/kev/internal/quote"
)

// Dict is a Python dict or collections.OrderedDict with its insertion order
// kept. Keys are scalars: string, int64, float64, bool or nil.
type Dict struct {
	keys   []any
	values []any
	index  map[any]int
	// Class is "collections.OrderedDict" for an OrderedDict, "" for a dict.
	Class string
	// Attrs holds instance attributes set by the pickle (BUILD), such as a
	// state_dict's "_metadata"; nil when none.
	Attrs *Dict
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{index: map[any]int{}} }

// Len is the number of entries.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []any { return append([]any(nil), d.keys...) }

// Get returns the value for key and whether it is present.
func (d *Dict) Get(key any) (any, bool) {
	i, ok := d.index[key]
	if !ok {
		return nil, false
	}
	return d.values[i], true
}

// Set inserts or replaces key's value; a new key goes last, as in Python.
func (d *Dict) Set(key, value any) error {
	switch key.(type) {
	case string, int64, float64, bool, nil:
	default:
		return fmt.Errorf("unsupported dict key type %s", typeName(key))
	}
	if i, ok := d.index[key]; ok {
		d.values[i] = value
		return nil
	}
	d.index[key] = len(d.keys)
	d.keys = append(d.keys, key)
	d.values = append(d.values, value)
	return nil
}

// List is a Python list.
type List struct{ Items []any }

// Tuple is a Python tuple.
type Tuple []any

// Global names a Python object by module and qualified name, as a pickle's
// GLOBAL opcode does. Only allowed globals ever become values.
type Global struct{ Module, Name string }

// String returns the global as "module.name".
func (g Global) String() string { return g.Module + "." + g.Name }

// storage is a resolved persistent id: one tensor storage of the archive.
type storage struct {
	dtype DType
	key   string
	numel int64
	data  []byte
}

// opError is an unpickling failure at a byte offset of data.pkl.
type opError struct {
	off    int
	reason string
	err    error
}

// unpickler runs the restricted pickle machine.
type unpickler struct {
	data   []byte
	pos    int
	stack  []any
	marks  []int
	memo   map[uint32]any
	load   func(pid Tuple) (any, error) // persistent load
	limits Limits

	// built estimates the bytes of the objects the pickle has built so far
	// (strings, containers, memo entries, the stack's high-water mark,
	// shapes): the machine stops once it passes maxBuilt (see Limits).
	built, maxBuilt int64
	stackHigh       int
}

// Estimated sizes of what the machine builds, for the objects budget.
const (
	slotBytes   = 16  // a value in a slice (an interface)
	dictEntry   = 64  // a dict entry: key, value, index
	memoEntry   = 48  // a memo entry
	objectBytes = 128 // a container, tensor or global header
	tupleBytes  = 24  // a tuple's slice header, boxed
)

// charge adds n bytes to the objects built and fails once they pass the
// budget: called before anything large is allocated, and after small
// objects (the machine checks the budget before every opcode too).
func (u *unpickler) charge(n int) error {
	u.built += int64(n)
	if u.built > u.maxBuilt {
		return u.failLimit("objects built exceed %d bytes (estimated), over the limit for a %d-byte pickle", u.maxBuilt, len(u.data))
	}
	return nil
}

func (u *unpickler) fail(format string, args ...any) error {
	return &opError{off: u.pos, reason: fmt.Sprintf(format, args...)}
}

// failLimit is fail for a value over one of the Limits.
func (u *unpickler) failLimit(format string, args ...any) error {
	return &opError{off: u.pos, reason: fmt.Sprintf(format, args...), err: ErrLimit}
}

func (e *opError) Error() string { return fmt.Sprintf("offset %d: %s", e.off, e.reason) }

func (e *opError) Unwrap() error { return e.err }

func (u *unpickler) need(n int) ([]byte, error) {
	if n < 0 || n > len(u.data)-u.pos {
		return nil, u.fail("truncated: need %d bytes, %d left", n, len(u.data)-u.pos)
	}
	b := u.data[u.pos : u.pos+n]
	u.pos += n
	return b, nil
}

// maxLine bounds the text argument of an opcode (GLOBAL, INT, LONG, FLOAT,
// PUT, GET): a longer one is refused before it is copied or parsed.
const maxLine = 4096

func (u *unpickler) line() (string, error) {
	window := u.data[u.pos:]
	if len(window) > maxLine+1 {
		window = window[:maxLine+1]
	}
	i := bytes.IndexByte(window, '\n')
	if i < 0 {
		if len(window) > maxLine {
			return "", u.failLimit("text argument longer than %d bytes", maxLine)
		}
		return "", u.fail("unterminated line")
	}
	s := string(u.data[u.pos : u.pos+i])
	u.pos += i + 1
	return s, nil
}

func (u *unpickler) push(v any) {
	u.stack = append(u.stack, v)
	if len(u.stack) > u.stackHigh {
		u.stackHigh = len(u.stack)
		u.built += slotBytes
	}
}

func (u *unpickler) pop() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, u.fail("stack underflow")
	}
	v := u.stack[len(u.stack)-1]
	u.stack = u.stack[:len(u.stack)-1]
	return v, nil
}

func (u *unpickler) top() (any, error) {
	if len(u.stack) == 0 || (len(u.marks) > 0 && len(u.stack) <= u.marks[len(u.marks)-1]) {
		return nil, u.fail("stack underflow")
	}
	return u.stack[len(u.stack)-1], nil
}

// popMark pops everything above the last MARK.
func (u *unpickler) popMark() ([]any, error) {
	if len(u.marks) == 0 {
		return nil, u.fail("no MARK on the stack")
	}
	m := u.marks[len(u.marks)-1]
	u.marks = u.marks[:len(u.marks)-1]
	if err := u.charge(slotBytes * (len(u.stack) - m)); err != nil {
		return nil, err
	}
	items := append([]any(nil), u.stack[m:]...)
	u.stack = u.stack[:m]
	return items, nil
}

func (u *unpickler) memoPut(i uint32) error {
	v, err := u.top()
	if err != nil {
		return err
	}
	if _, ok := u.memo[i]; !ok {
		if len(u.memo) >= u.limits.MaxMemo {
			return u.fail("memo exceeds %d entries", u.limits.MaxMemo)
		}
		if err := u.charge(memoEntry); err != nil {
			return err
		}
	}
	u.memo[i] = v
	return nil
}

func (u *unpickler) memoGet(i uint32) error {
	v, ok := u.memo[i]
	if !ok {
		return u.fail("memo key %d not defined", i)
	}
	u.push(v)
	return nil
}

// run executes opcodes until STOP and returns the result.
func (u *unpickler) run() (any, error) {
	for ops := 0; ; ops++ {
		if u.pos >= len(u.data) {
			return nil, u.fail("no STOP opcode")
		}
		if len(u.stack) > u.limits.MaxStack {
			return nil, u.fail("stack exceeds %d entries", u.limits.MaxStack)
		}
		if err := u.charge(0); err != nil {
			return nil, err
		}
		op := u.data[u.pos]
		u.pos++
		switch op {
		case 0x80: // PROTO
			b, err := u.need(1)
			if err != nil {
				return nil, err
			}
			if b[0] < 2 || b[0] > 5 {
				return nil, u.fail("unsupported pickle protocol %d", b[0])
			}
		case 0x95: // FRAME: 8-byte length, frames are advisory
			if _, err := u.need(8); err != nil {
				return nil, err
			}
		case '.': // STOP
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			return v, nil
		case '(': // MARK
			u.marks = append(u.marks, len(u.stack))
			if len(u.marks) > u.limits.MaxStack {
				return nil, u.fail("too many MARKs")
			}
		case '0': // POP
			if len(u.marks) > 0 && len(u.stack) == u.marks[len(u.marks)-1] {
				u.marks = u.marks[:len(u.marks)-1] // popping a mark
			} else if _, err := u.pop(); err != nil {
				return nil, err
			}
		case '1': // POP_MARK
			if _, err := u.popMark(); err != nil {
				return nil, err
			}
		case '2': // DUP
			v, err := u.top()
			if err != nil {
				return nil, err
			}
			u.push(v)
		case 'N':
			u.push(nil)
		case 0x88: // NEWTRUE
			u.push(true)
		case 0x89: // NEWFALSE
			u.push(false)
		case 'J': // BININT
			b, err := u.need(4)
			if err != nil {
				return nil, err
			}
			u.push(int64(int32(binary.LittleEndian.Uint32(b))))
		case 'K': // BININT1
			b, err := u.need(1)
			if err != nil {
				return nil, err
			}
			u.push(int64(b[0]))
		case 'M': // BININT2
			b, err := u.need(2)
			if err != nil {
				return nil, err
			}
			u.push(int64(binary.LittleEndian.Uint16(b)))
		case 0x8a, 0x8b: // LONG1, LONG4
			var n int
			if op == 0x8a {
				b, err := u.need(1)
				if err != nil {
					return nil, err
				}
				n = int(b[0])
				if n > u.limits.MaxLongBytes {
					return nil, u.failLimit("LONG1 of %d bytes, over the %d-byte limit", n, u.limits.MaxLongBytes)
				}
			} else {
				b, err := u.need(4)
				if err != nil {
					return nil, err
				}
				n32 := int32(binary.LittleEndian.Uint32(b))
				if n32 < 0 {
					return nil, u.fail("LONG4 of %d bytes", n32)
				}
				if int(n32) > u.limits.MaxLongBytes {
					return nil, u.failLimit("LONG4 of %d bytes, over the %d-byte limit", n32, u.limits.MaxLongBytes)
				}
				n = int(n32)
			}
			b, err := u.need(n)
			if err != nil {
				return nil, err
			}
			u.built += int64(n)
			u.push(decodeLong(b))
		case 'I': // INT (text): also encodes bools as 00/01
			s, err := u.line()
			if err != nil {
				return nil, err
			}
			switch s {
			case "00":
				u.push(false)
			case "01":
				u.push(true)
			default:
				v, err := strconv.ParseInt(s, 10, 64)
				if err != nil {
					return nil, u.fail("bad INT %s", quote.String(s))
				}
				u.push(v)
			}
		case 'L': // LONG (text)
			s, err := u.line()
			if err != nil {
				return nil, err
			}
			s = strings.TrimSuffix(s, "L")
			if len(s) > u.limits.MaxLongBytes { // before parsing: SetString is quadratic
				return nil, u.failLimit("LONG of %d digits, over the %d-byte limit", len(s), u.limits.MaxLongBytes)
			}
			bi, ok := new(big.Int).SetString(s, 10)
			if !ok {
				return nil, u.fail("bad LONG %s", quote.String(s))
			}
			u.push(normInt(bi))
		case 'G': // BINFLOAT, big-endian
			b, err := u.need(8)
			if err != nil {
				return nil, err
			}
			u.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
		case 'F': // FLOAT (text)
			s, err := u.line()
			if err != nil {
				return nil, err
			}
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, u.fail("bad FLOAT %s", quote.String(s))
			}
			u.push(v)
		case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
			n, err := u.length(op)
			if err != nil {
				return nil, err
			}
			b, err := u.need(n)
			if err != nil {
				return nil, err
			}
			if !utf8.Valid(b) {
				return nil, u.fail("string is not valid UTF-8")
			}
			if err := u.charge(n + slotBytes); err != nil {
				return nil, err
			}
			u.push(string(b))
		case 'T', 'U': // BINSTRING, SHORT_BINSTRING (Python 2 str): kept as a string
			n, err := u.length(op)
			if err != nil {
				return nil, err
			}
			b, err := u.need(n)
			if err != nil {
				return nil, err
			}
			if err := u.charge(n + slotBytes); err != nil {
				return nil, err
			}
			u.push(string(b))
		case 'B', 'C', 0x8e, 0x96: // BINBYTES, SHORT_BINBYTES, BINBYTES8, BYTEARRAY8
			n, err := u.length(op)
			if err != nil {
				return nil, err
			}
			b, err := u.need(n)
			if err != nil {
				return nil, err
			}
			if err := u.charge(n + slotBytes); err != nil {
				return nil, err
			}
			u.push(append([]byte(nil), b...))
		case '}':
			u.built += objectBytes
			u.push(NewDict())
		case ']':
			u.built += objectBytes
			u.push(&List{})
		case ')':
			u.built += tupleBytes
			u.push(Tuple{})
		case 'l': // LIST
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			u.push(&List{Items: items})
		case 't': // TUPLE
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			u.built += tupleBytes
			u.push(Tuple(items))
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			n := int(op-0x85) + 1
			u.built += int64(tupleBytes + slotBytes*n)
			items := make(Tuple, n)
			for i := n - 1; i >= 0; i-- {
				v, err := u.pop()
				if err != nil {
					return nil, err
				}
				items[i] = v
			}
			u.push(items)
		case 'd': // DICT
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			d := NewDict()
			if err := u.setItems(d, items); err != nil {
				return nil, err
			}
			u.push(d)
		case 's': // SETITEM
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			k, err := u.pop()
			if err != nil {
				return nil, err
			}
			if err := u.setItems(nil, []any{k, v}); err != nil {
				return nil, err
			}
		case 'u': // SETITEMS
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			if err := u.setItems(nil, items); err != nil {
				return nil, err
			}
		case 'a': // APPEND
			v, err := u.pop()
			if err != nil {
				return nil, err
			}
			if err := u.appendItems([]any{v}); err != nil {
				return nil, err
			}
		case 'e': // APPENDS
			items, err := u.popMark()
			if err != nil {
				return nil, err
			}
			if err := u.appendItems(items); err != nil {
				return nil, err
			}
		case 'q': // BINPUT
			b, err := u.need(1)
			if err != nil {
				return nil, err
			}
			if err := u.memoPut(uint32(b[0])); err != nil {
				return nil, err
			}
		case 'r': // LONG_BINPUT
			b, err := u.need(4)
			if err != nil {
				return nil, err
			}
			if err := u.memoPut(binary.LittleEndian.Uint32(b)); err != nil {
				return nil, err
			}
		case 'p': // PUT (text)
			s, err := u.line()
			if err != nil {
				return nil, err
			}
			i, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return nil, u.fail("bad PUT %s", quote.String(s))
			}
			if err := u.memoPut(uint32(i)); err != nil {
				return nil, err
			}
		case 0x94: // MEMOIZE
			if err := u.memoPut(uint32(len(u.memo))); err != nil {
				return nil, err
			}
		case 'h': // BINGET
			b, err := u.need(1)
			if err != nil {
				return nil, err
			}
			if err := u.memoGet(uint32(b[0])); err != nil {
				return nil, err
			}
		case 'j': // LONG_BINGET
			b, err := u.need(4)
			if err != nil {
				return nil, err
			}
			if err := u.memoGet(binary.LittleEndian.Uint32(b)); err != nil {
				return nil, err
			}
		case 'g': // GET (text)
			s, err := u.line()
			if err != nil {
				return nil, err
			}
			i, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return nil, u.fail("bad GET %s", quote.String(s))
			}
			if err := u.memoGet(uint32(i)); err != nil {
				return nil, err
			}
		case 'c': // GLOBAL "module\nname\n"
			mod, err := u.line()
			if err != nil {
				return nil, err
			}
			name, err := u.line()
			if err != nil {
				return nil, err
			}
			g, err := u.global(mod, name)
			if err != nil {
				return nil, err
			}
			u.push(g)
		case 0x93: // STACK_GLOBAL
			nv, err := u.pop()
			if err != nil {
				return nil, err
			}
			mv, err := u.pop()
			if err != nil {
				return nil, err
			}
			mod, ok1 := mv.(string)
			name, ok2 := nv.(string)
			if !ok1 || !ok2 {
				return nil, u.fail("STACK_GLOBAL needs two strings")
			}
			g, err := u.global(mod, name)
			if err != nil {
				return nil, err
			}
			u.push(g)
		case 'Q': // BINPERSID
			pid, err := u.pop()
			if err != nil {
				return nil, err
			}
			t, ok := pid.(Tuple)
			if !ok {
				return nil, u.fail("persistent id is a %s, want a tuple", typeName(pid))
			}
			v, err := u.load(t)
			if err != nil {
				return nil, &opError{off: u.pos, reason: "persistent id: " + err.Error(), err: err}
			}
			u.push(v)
		case 'R': // REDUCE
			args, err := u.pop()
			if err != nil {
				return nil, err
			}
			fn, err := u.pop()
			if err != nil {
				return nil, err
			}
			at, ok := args.(Tuple)
			if !ok {
				return nil, u.fail("REDUCE arguments are a %s, want a tuple", typeName(args))
			}
			v, err := u.call(fn, at)
			if err != nil {
				return nil, err
			}
			u.push(v)
		case 0x81: // NEWOBJ
			args, err := u.pop()
			if err != nil {
				return nil, err
			}
			cls, err := u.pop()
			if err != nil {
				return nil, err
			}
			at, ok := args.(Tuple)
			if !ok {
				return nil, u.fail("NEWOBJ arguments are a %s, want a tuple", typeName(args))
			}
			v, err := u.call(cls, at)
			if err != nil {
				return nil, err
			}
			u.push(v)
		case 'b': // BUILD
			state, err := u.pop()
			if err != nil {
				return nil, err
			}
			obj, err := u.top()
			if err != nil {
				return nil, err
			}
			if err := u.build(obj, state); err != nil {
				return nil, err
			}
		default:
			return nil, u.fail("unsupported pickle opcode 0x%02x", op)
		}
	}
}

// length reads the length prefix of a string/bytes opcode.
func (u *unpickler) length(op byte) (int, error) {
	var n uint64
	switch op {
	case 0x8c, 'C', 'U': // 1-byte length
		b, err := u.need(1)
		if err != nil {
			return 0, err
		}
		n = uint64(b[0])
	case 'X', 'B', 'T': // 4-byte length
		b, err := u.need(4)
		if err != nil {
			return 0, err
		}
		n = uint64(binary.LittleEndian.Uint32(b))
		if op == 'T' && int32(n) < 0 {
			return 0, u.fail("negative BINSTRING length")
		}
	default: // 8-byte length
		b, err := u.need(8)
		if err != nil {
			return 0, err
		}
		n = binary.LittleEndian.Uint64(b)
	}
	if n > uint64(len(u.data)-u.pos) {
		return 0, u.fail("length %d runs past the end of the pickle", n)
	}
	return int(n), nil
}

func (u *unpickler) setItems(d *Dict, items []any) error {
	if d == nil {
		top, err := u.top()
		if err != nil {
			return err
		}
		var ok bool
		if d, ok = top.(*Dict); !ok {
			return u.fail("SETITEM(S) on a %s", typeName(top))
		}
	}
	if len(items)%2 != 0 {
		return u.fail("odd number of items for a dict")
	}
	if err := u.charge(dictEntry * len(items) / 2); err != nil {
		return err
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.Set(items[i], items[i+1]); err != nil {
			return u.fail("%v", err)
		}
	}
	return nil
}

func (u *unpickler) appendItems(items []any) error {
	top, err := u.top()
	if err != nil {
		return err
	}
	l, ok := top.(*List)
	if !ok {
		return u.fail("APPEND(S) on a %s", typeName(top))
	}
	if len(l.Items)+len(items) > u.limits.MaxStack {
		return u.fail("list exceeds %d items", u.limits.MaxStack)
	}
	if err := u.charge(2 * slotBytes * len(items)); err != nil { // the list's growth included
		return err
	}
	l.Items = append(l.Items, items...)
	return nil
}

// decodeLong decodes a little-endian two's complement integer.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		shift := 64 - 8*uint(len(b))
		return int64(v<<shift) >> shift
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	bi := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		bi.Sub(bi, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return normInt(bi)
}

// normInt returns an int64 when bi fits, else bi.
func normInt(bi *big.Int) any {
	if bi.IsInt64() {
		return bi.Int64()
	}
	return bi
}

// describe shows a value taken from the pickle in an error message: scalars
// as themselves (strings and bytes quoted and cut), anything else by type.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case string:
		return quote.String(v)
	case []byte:
		return "b" + quote.Bytes(v)
	case int64, float64, bool:
		return fmt.Sprint(v)
	case *big.Int:
		return fmt.Sprintf("an int of %d bits", v.BitLen())
	}
	return "a " + typeName(v)
}

// dims shows a shape or stride from the pickle, at most 8 entries.
func dims(d []int) string {
	if len(d) <= 8 {
		return fmt.Sprint(d)
	}
	return fmt.Sprintf("%v…(%d dims)", d[:8], len(d))
}

func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case bool:
		return "bool"
	case *Dict:
		return "dict"
	case *List:
		return "list"
	case Tuple:
		return "tuple"
	case Global:
		return "global " + v.String()
	case *Tensor:
		return "tensor"
	case *storage:
		return "storage"
	}
	return fmt.Sprintf("%T", v)
}
