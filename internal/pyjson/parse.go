package pyjson

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is how deeply arrays and objects may nest. Python's decoder stops at its recursion limit (about 1,000)
// with a RecursionError; Parse returns a *ParseError instead.
const MaxDepth = 1000

// MaxIntDigits is the longest integer literal Python converts (sys.int_info.str_digits_check_threshold, 4,300
// digits); a longer one is a ValueError there and a *ParseError here.
const MaxIntDigits = 4300

// SyntaxError is malformed JSON, as Python's json.JSONDecodeError describes it: the message ("Expecting value",
// "Expecting ',' delimiter", "Unterminated string starting at", ...) and where. A server answers it with FastAPI's
// json_invalid 422, whose loc carries Pos.
type SyntaxError struct {
	Msg    string // Python's message, without the position
	Offset int    // byte offset into the input
	Pos    int    // Python's character index (code points) into the decoded text
	Line   int    // 1-based line of Pos
	Col    int    // 1-based column of Pos, in characters
}

// Error returns Python's str() of the JSONDecodeError: "<msg>: line L column C (char P)".
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s: line %d column %d (char %d)", e.Msg, e.Line, e.Col, e.Pos)
}

// ParseError is input Python's json module refuses with something other than a JSONDecodeError: bytes that are
// not UTF-8, nesting deeper than MaxDepth, an integer longer than MaxIntDigits. FastAPI answers these with a 400
// ("There was an error parsing the body"), not a 422.
type ParseError struct {
	Msg    string
	Offset int // byte offset into the input
}

// Error returns the message and the byte offset.
func (e *ParseError) Error() string {
	return fmt.Sprintf("pyjson: %s at byte %d", e.Msg, e.Offset)
}

// Parse reads one JSON document with the semantics of Python's json.loads on a bytes body:
//
//   - a leading UTF-8 byte order mark is skipped (Python decodes bytes as utf-8-sig); input in UTF-16 or UTF-32
//     is not supported and gives a *ParseError, as do bytes that are not UTF-8;
//   - whitespace is only space, tab, newline and carriage return;
//   - NaN, Infinity and -Infinity are accepted as floats;
//   - a number literal with a fraction or exponent is a float (correctly rounded, ±Inf past the double range),
//     one without is an integer of any size (up to MaxIntDigits digits);
//   - strings reject raw control characters (strict mode); a \u escape of a lone UTF-16 surrogate (one not part
//     of a high-low pair) decodes to U+FFFD, because a Go string holds UTF-8 and Kev's text all goes on to a
//     tokenizer (Python keeps the lone surrogate, which its tokenizer then cannot encode);
//   - a key repeated in an object keeps its first position and takes its last value.
//
// Errors are *SyntaxError (Python's JSONDecodeError, with its message) or *ParseError.
func Parse(data []byte) (Value, error) {
	if wideEncoding(data) {
		return Value{}, &ParseError{Msg: "UTF-16 and UTF-32 input are not supported", Offset: 0}
	}
	start := 0
	if bytes.HasPrefix(data, []byte{0xEF, 0xBB, 0xBF}) {
		start = 3
	}
	if !utf8.Valid(data[start:]) {
		off := start
		for off < len(data) {
			r, size := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			off += size
		}
		return Value{}, &ParseError{Msg: "invalid UTF-8", Offset: off}
	}
	p := &parser{data: data, start: start, i: start}
	p.skipWS()
	v, err := p.value(0)
	if err != nil {
		return Value{}, err
	}
	p.skipWS()
	if p.i != len(p.data) {
		return Value{}, p.syntax("Extra data", p.i)
	}
	return v, nil
}

// wideEncoding reports whether Python's json.detect_encoding would read data as UTF-16 or UTF-32: a BOM of either,
// or (without a UTF-8 BOM) a zero byte among the first two of a 2-byte or at least 4-byte input.
func wideEncoding(b []byte) bool {
	switch {
	case bytes.HasPrefix(b, []byte{0xFF, 0xFE}), bytes.HasPrefix(b, []byte{0xFE, 0xFF}), bytes.HasPrefix(b, []byte{0, 0, 0xFE, 0xFF}):
		return true
	case bytes.HasPrefix(b, []byte{0xEF, 0xBB, 0xBF}):
		return false
	case len(b) >= 4 || len(b) == 2:
		return b[0] == 0 || b[1] == 0
	}
	return false
}

type parser struct {
	data  []byte
	start int // first byte after a BOM
	i     int
}

// syntax builds a *SyntaxError at byte offset off, with Python's character position, line and column.
func (p *parser) syntax(msg string, off int) *SyntaxError {
	text := p.data[p.start:off]
	pos := utf8.RuneCount(text)
	line := bytes.Count(text, []byte{'\n'}) + 1
	col := pos + 1
	if nl := bytes.LastIndexByte(text, '\n'); nl >= 0 {
		col = utf8.RuneCount(text[nl+1:]) + 1
	}
	return &SyntaxError{Msg: msg, Offset: off - p.start, Pos: pos, Line: line, Col: col}
}

func (p *parser) skipWS() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) hasPrefix(s string) bool {
	return strings.HasPrefix(string(p.data[p.i:min(len(p.data), p.i+len(s))]), s)
}

func (p *parser) value(depth int) (Value, error) {
	if p.i >= len(p.data) {
		return Value{}, p.syntax("Expecting value", p.i)
	}
	switch c := p.data[p.i]; c {
	case '"':
		s, err := p.str()
		if err != nil {
			return Value{}, err
		}
		return String(s), nil
	case '{':
		return p.object(depth + 1)
	case '[':
		return p.array(depth + 1)
	case 'n':
		if p.hasPrefix("null") {
			p.i += 4
			return Null(), nil
		}
	case 't':
		if p.hasPrefix("true") {
			p.i += 4
			return Bool(true), nil
		}
	case 'f':
		if p.hasPrefix("false") {
			p.i += 5
			return Bool(false), nil
		}
	case 'N':
		if p.hasPrefix("NaN") {
			p.i += 3
			return Float(math.NaN()), nil
		}
	case 'I':
		if p.hasPrefix("Infinity") {
			p.i += 8
			return Float(math.Inf(1)), nil
		}
	case '-':
		if p.hasPrefix("-Infinity") {
			p.i += 9
			return Float(math.Inf(-1)), nil
		}
		return p.number()
	default:
		if c >= '0' && c <= '9' {
			return p.number()
		}
	}
	return Value{}, p.syntax("Expecting value", p.i)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number matches -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? as Python's scanner does, backing off a '.' or
// an 'e' that no digit follows.
func (p *parser) number() (Value, error) {
	d, start, i := p.data, p.i, p.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return Value{}, p.syntax("Expecting value", start)
	}
	intEnd, isFloat := i, false
	if i+1 < len(d) && d[i] == '.' && isDigit(d[i+1]) {
		i += 2
		for i < len(d) && isDigit(d[i]) {
			i++
		}
		isFloat = true
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		j := i + 1
		if j < len(d) && (d[j] == '+' || d[j] == '-') {
			j++
		}
		if j < len(d) && isDigit(d[j]) {
			for j < len(d) && isDigit(d[j]) {
				j++
			}
			i, isFloat = j, true
		}
	}
	p.i = i
	lit := string(d[start:i])
	if !isFloat {
		digits := intEnd - start
		if d[start] == '-' {
			digits--
		}
		if digits > MaxIntDigits {
			return Value{}, &ParseError{Msg: fmt.Sprintf("integer literal of %d digits exceeds the limit of %d", digits, MaxIntDigits), Offset: start - p.start}
		}
		return Value{kind: KindInt, s: canonicalInt(lit)}, nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !math.IsInf(f, 0) {
		// Well-formed literals only fail by range, which Python turns into ±inf or 0 as ParseFloat does.
		return Value{}, p.syntax("Expecting value", start)
	}
	return Float(f), nil
}

func (p *parser) str() (string, error) {
	d, quote := p.data, p.i
	i := quote + 1
	var sb []byte
	for {
		// Copy the run of plain characters.
		j := i
		for j < len(d) && d[j] != '"' && d[j] != '\\' && d[j] >= 0x20 {
			j++
		}
		sb = append(sb, d[i:j]...)
		i = j
		if i >= len(d) {
			return "", p.syntax("Unterminated string starting at", quote)
		}
		switch c := d[i]; {
		case c == '"':
			p.i = i + 1
			return string(sb), nil
		case c < 0x20:
			return "", p.syntax("Invalid control character at", i)
		}
		// A backslash escape.
		if i+1 >= len(d) {
			return "", p.syntax("Unterminated string starting at", quote)
		}
		esc := d[i+1]
		switch esc {
		case '"', '\\', '/':
			sb = append(sb, esc)
		case 'b':
			sb = append(sb, '\b')
		case 'f':
			sb = append(sb, '\f')
		case 'n':
			sb = append(sb, '\n')
		case 'r':
			sb = append(sb, '\r')
		case 't':
			sb = append(sb, '\t')
		case 'u':
			r, ok := hex4(d, i+2)
			if !ok {
				return "", p.syntax("Invalid \\uXXXX escape", i+1)
			}
			next := i + 6
			if utf16.IsSurrogate(r) {
				if r < 0xDC00 && next+1 < len(d) && d[next] == '\\' && d[next+1] == 'u' {
					r2, ok := hex4(d, next+2)
					if !ok {
						return "", p.syntax("Invalid \\uXXXX escape", next+1)
					}
					if r2 >= 0xDC00 && r2 <= 0xDFFF {
						sb = utf8.AppendRune(sb, utf16.DecodeRune(r, r2))
						i = next + 6
						continue
					}
				}
				r = utf8.RuneError
			}
			sb = utf8.AppendRune(sb, r)
			i = next
			continue
		default:
			return "", p.syntax("Invalid \\escape", i)
		}
		i += 2
	}
}

func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (p *parser) object(depth int) (Value, error) {
	if depth > MaxDepth {
		return Value{}, &ParseError{Msg: "maximum nesting depth exceeded while decoding a JSON object", Offset: p.i - p.start}
	}
	p.i++ // '{'
	p.skipWS()
	var members []Member
	var index map[string]int
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		return Value{kind: KindObject, obj: []Member{}}, nil
	}
	for {
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			return Value{}, p.syntax("Expecting property name enclosed in double quotes", p.i)
		}
		key, err := p.str()
		if err != nil {
			return Value{}, err
		}
		p.skipWS()
		if p.i >= len(p.data) || p.data[p.i] != ':' {
			return Value{}, p.syntax("Expecting ':' delimiter", p.i)
		}
		p.i++
		p.skipWS()
		val, err := p.value(depth)
		if err != nil {
			return Value{}, err
		}
		if k, dup := index[key]; dup {
			members[k].Value = val
		} else {
			if index == nil {
				index = make(map[string]int)
			}
			index[key] = len(members)
			members = append(members, Member{Key: key, Value: val})
		}
		p.skipWS()
		if p.i < len(p.data) && p.data[p.i] == '}' {
			p.i++
			return Value{kind: KindObject, obj: members}, nil
		}
		if p.i >= len(p.data) || p.data[p.i] != ',' {
			return Value{}, p.syntax("Expecting ',' delimiter", p.i)
		}
		p.i++
		p.skipWS()
	}
}

func (p *parser) array(depth int) (Value, error) {
	if depth > MaxDepth {
		return Value{}, &ParseError{Msg: "maximum nesting depth exceeded while decoding a JSON array", Offset: p.i - p.start}
	}
	p.i++ // '['
	p.skipWS()
	elems := []Value{}
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return Value{kind: KindArray, arr: elems}, nil
	}
	for {
		val, err := p.value(depth)
		if err != nil {
			return Value{}, err
		}
		elems = append(elems, val)
		p.skipWS()
		if p.i < len(p.data) && p.data[p.i] == ']' {
			p.i++
			return Value{kind: KindArray, arr: elems}, nil
		}
		if p.i >= len(p.data) || p.data[p.i] != ',' {
			return Value{}, p.syntax("Expecting ',' delimiter", p.i)
		}
		p.i++
		p.skipWS()
	}
}
