package pyjson

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FormatFloat returns CPython's repr of f (float_repr_style "short"): the shortest digits that read back as f,
// positional with ".0" when integral ("1.0", "1000000000000000.0"), exponent form when the decimal exponent is
// below -4 or at least 16 ("1e-05", "1e+16", "1.2345678901234568e+17"), and "inf", "-inf", "nan".
func FormatFloat(f float64) string {
	return string(AppendFloat(nil, f))
}

// AppendFloat appends FormatFloat(f) to dst.
func AppendFloat(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "nan"...)
	case math.IsInf(f, 1):
		return append(dst, "inf"...)
	case math.IsInf(f, -1):
		return append(dst, "-inf"...)
	case f == 0:
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // [-]d[.ddd]e±dd
	if e[0] == '-' {
		dst = append(dst, '-')
		e = e[1:]
	}
	ePos := strings.IndexByte(string(e), 'e')
	mant, expText := e[:ePos], e[ePos+1:]
	exp, _ := strconv.Atoi(string(expText))
	var digits []byte
	digits = append(digits, mant[0])
	if len(mant) > 2 {
		digits = append(digits, mant[2:]...)
	}
	decpt := exp + 1 // value = 0.d1d2... × 10^decpt
	switch {
	case decpt <= -4 || decpt > 16:
		dst = append(dst, digits[0])
		if len(digits) > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if exp < 0 {
			dst = append(dst, '-')
			exp = -exp
		} else {
			dst = append(dst, '+')
		}
		if exp < 10 {
			dst = append(dst, '0')
		}
		return strconv.AppendInt(dst, int64(exp), 10)
	case decpt <= 0:
		dst = append(dst, "0."...)
		for range -decpt {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	case decpt >= len(digits):
		dst = append(dst, digits...)
		for range decpt - len(digits) {
			dst = append(dst, '0')
		}
		return append(dst, ".0"...)
	default:
		dst = append(dst, digits[:decpt]...)
		dst = append(dst, '.')
		return append(dst, digits[decpt:]...)
	}
}

// Round returns Python's round(x, ndigits) for a float: x rounded to ndigits decimal places by the exact decimal
// value of the double, half to even only on exact ties (round(2.675, 2) is 2.67 because 2.675 is stored as
// 2.67499999...; round(0.125, 2) is 0.12). NaN and the infinities come back unchanged, as in Python.
func Round(x float64, ndigits int) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	// CPython: more digits than a double can carry returns x; fewer than its range rounds to a zero of x's sign.
	if ndigits > 323 {
		return x
	}
	if ndigits < -308 {
		return 0 * x
	}
	if ndigits < 0 {
		return roundNegative(x, -ndigits)
	}
	// strconv's fixed formatting is correctly rounded, half to even on exact ties of the binary value.
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', ndigits, 64), 64)
	return r
}

// roundNegative rounds x to a multiple of 10^n (Python's round(x, -n)) on its exact decimal expansion, half to even
// on exact ties.
func roundNegative(x float64, n int) float64 {
	exact := strconv.FormatFloat(x, 'f', 1100, 64) // every double's expansion has at most 1074 fraction digits
	neg := exact[0] == '-'
	if neg {
		exact = exact[1:]
	}
	dot := strings.IndexByte(exact, '.')
	intPart, frac := exact[:dot], strings.TrimRight(exact[dot+1:], "0")
	if len(intPart) < n {
		intPart = strings.Repeat("0", n-len(intPart)) + intPart
	}
	keep, rest := intPart[:len(intPart)-n], intPart[len(intPart)-n:]
	// Compare rest.frac with half of 10^n.
	half := "5" + strings.Repeat("0", n-1)
	up := false
	switch c := strings.Compare(rest, half); {
	case c > 0:
		up = true
	case c == 0:
		if frac != "" {
			up = true
		} else {
			last := byte('0')
			if keep != "" {
				last = keep[len(keep)-1]
			}
			up = (last-'0')%2 == 1
		}
	}
	digits := []byte(keep)
	if len(digits) == 0 {
		digits = []byte{'0'}
	}
	if up {
		i := len(digits) - 1
		for ; i >= 0; i-- {
			if digits[i] == '9' {
				digits[i] = '0'
				continue
			}
			digits[i]++
			break
		}
		if i < 0 {
			digits = append([]byte{'1'}, digits...)
		}
	}
	text := string(digits) + strings.Repeat("0", n)
	if neg {
		text = "-" + text
	}
	r, _ := strconv.ParseFloat(text, 64)
	if r == 0 && neg {
		return math.Copysign(0, -1)
	}
	return r
}

// ErrNonFinite is returned by the compact encoder for NaN and infinite floats, which Starlette's JSONResponse
// refuses (allow_nan=False).
var ErrNonFinite = errors.New("pyjson: out of range float values are not JSON compliant")

// Dumps returns Python's json.dumps(v) with its defaults: separators ", " and ": ", ensure_ascii (every non-ASCII
// character as a lowercase \uXXXX escape, a surrogate pair above U+FFFF), NaN and the infinities as NaN, Infinity
// and -Infinity, floats in repr form.
func Dumps(v Value) string {
	b, _ := appendJSON(nil, v, true)
	return string(b)
}

// Compact returns the bytes Starlette's JSONResponse sends for v: json.dumps with separators "," and ":",
// ensure_ascii off (UTF-8, only '"', '\\' and control characters escaped), and an error for NaN or infinite floats.
func Compact(v Value) ([]byte, error) {
	return AppendCompact(nil, v)
}

// AppendCompact appends Compact(v) to dst.
func AppendCompact(dst []byte, v Value) ([]byte, error) {
	return appendJSON(dst, v, false)
}

// MarshalJSON returns Compact(v), so a Value inside a Go struct encodes as Kev's response bytes.
func (v Value) MarshalJSON() ([]byte, error) { return Compact(v) }

// UnmarshalJSON parses data with Python json semantics (see Parse).
func (v *Value) UnmarshalJSON(data []byte) error {
	p, err := Parse(data)
	if err != nil {
		return err
	}
	*v = p
	return nil
}

func appendJSON(dst []byte, v Value, ascii bool) ([]byte, error) {
	var err error
	switch v.kind {
	case KindNull:
		return append(dst, "null"...), nil
	case KindBool:
		if v.b {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case KindInt:
		return append(dst, v.s...), nil
	case KindFloat:
		switch {
		case math.IsNaN(v.f):
			if !ascii {
				return dst, ErrNonFinite
			}
			return append(dst, "NaN"...), nil
		case math.IsInf(v.f, 0):
			if !ascii {
				return dst, ErrNonFinite
			}
			if v.f > 0 {
				return append(dst, "Infinity"...), nil
			}
			return append(dst, "-Infinity"...), nil
		}
		return AppendFloat(dst, v.f), nil
	case KindString:
		return AppendQuoted(dst, v.s, ascii), nil
	case KindArray:
		dst = append(dst, '[')
		for i, e := range v.arr {
			if i > 0 {
				dst = appendSep(dst, ',', ascii)
			}
			if dst, err = appendJSON(dst, e, ascii); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case KindObject:
		dst = append(dst, '{')
		for i, m := range v.obj {
			if i > 0 {
				dst = appendSep(dst, ',', ascii)
			}
			dst = AppendQuoted(dst, m.Key, ascii)
			dst = appendSep(dst, ':', ascii)
			if dst, err = appendJSON(dst, m.Value, ascii); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, nil
}

// appendSep writes Python's default separator (", " / ": ") in ensure_ascii mode, the compact one otherwise: the two
// go together in both of Kev's encoders.
func appendSep(dst []byte, c byte, spaced bool) []byte {
	dst = append(dst, c)
	if spaced {
		dst = append(dst, ' ')
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// AppendQuoted appends s as a JSON string the way Python's json module writes it. With ascii (ensure_ascii=True)
// every character outside printable ASCII becomes \uXXXX (lowercase hex; a surrogate pair above U+FFFF; DEL too);
// without it only '"',
// '\\' and the control characters below U+0020 are escaped. \n, \r, \t, \b and \f use their short forms. Bytes of s
// that are not valid UTF-8 are written as U+FFFD.
func AppendQuoted(dst []byte, s string, ascii bool) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			i++
			switch c {
			case '"':
				dst = append(dst, '\\', '"')
			case '\\':
				dst = append(dst, '\\', '\\')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				if c < 0x20 || c == 0x7f && ascii {
					dst = appendU(dst, rune(c))
				} else {
					dst = append(dst, c)
				}
			}
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if !ascii {
			dst = utf8.AppendRune(dst, r) // RuneError for invalid bytes: U+FFFD
			continue
		}
		if r > 0xFFFF {
			r -= 0x10000
			dst = appendU(dst, 0xD800+(r>>10))
			dst = appendU(dst, 0xDC00+(r&0x3FF))
			continue
		}
		dst = appendU(dst, r)
	}
	return append(dst, '"')
}

func appendU(dst []byte, r rune) []byte {
	return append(dst, '\\', 'u', hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
}
