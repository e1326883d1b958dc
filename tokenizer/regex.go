package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Oniguruma's Unicode classes, spelled for Go's regexp. \s is White_Space:
// U+0009-U+000D, U+0085 and the separators (Zs, Zl, Zp).
const (
	wsClassBody   = `\t\n\v\f\r\x{85}\p{Z}`
	wordClassBody = `\p{L}\p{M}\p{Nd}\p{Pc}`
)

// lookaheadWS is the one lookahead Hugging Face patterns use. It is
// emulated: the alternative becomes a plain \s+ group, and a match of that
// group followed by more text gives back its last rune.
const lookaheadWS = `\s+(?!\S)|\s+`

// regexSplitter finds matches of a tokenizer.json Split pattern with Go's
// regexp, after translating Oniguruma's escapes. It is the general path and
// the reference the hand-written scanner is tested against.
type regexSplitter struct {
	re      *regexp.Regexp
	wsGroup int // index of the emulated \s+(?!\S)|\s+ group, or 0
}

// compileOniguruma translates an Oniguruma pattern as Hugging Face writes
// it into Go syntax and compiles it.
func compileOniguruma(pattern string) (*regexSplitter, error) {
	var b strings.Builder
	wsGroup := 0
	groups := 0
	inClass := false
	for i := 0; i < len(pattern); {
		if !inClass && strings.HasPrefix(pattern[i:], lookaheadWS) {
			groups++
			wsGroup = groups
			b.WriteString(`([` + wsClassBody + `]+)`)
			i += len(lookaheadWS)
			continue
		}
		c := pattern[i]
		switch {
		case c == '\\' && i+1 < len(pattern):
			e := pattern[i+1]
			switch e {
			case 's':
				if inClass {
					b.WriteString(wsClassBody)
				} else {
					b.WriteString(`[` + wsClassBody + `]`)
				}
			case 'S':
				if inClass {
					return nil, fmt.Errorf(`\S inside a character class`)
				}
				b.WriteString(`[^` + wsClassBody + `]`)
			case 'w':
				if inClass {
					b.WriteString(wordClassBody)
				} else {
					b.WriteString(`[` + wordClassBody + `]`)
				}
			case 'W':
				if inClass {
					return nil, fmt.Errorf(`\W inside a character class`)
				}
				b.WriteString(`[^` + wordClassBody + `]`)
			case 'd':
				b.WriteString(`\p{Nd}`)
			case 'D':
				if inClass {
					return nil, fmt.Errorf(`\D inside a character class`)
				}
				b.WriteString(`\P{Nd}`)
			case 'h', 'H', 'R', 'X', 'K', 'G', 'A', 'z', 'Z', 'b', 'B':
				return nil, fmt.Errorf(`escape \%c`, e)
			default:
				b.WriteByte(c)
				b.WriteByte(e)
			}
			i += 2
			continue
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			i++
			// A ']' right after '[' or '[^' is a literal.
			if i < len(pattern) && pattern[i] == '^' {
				b.WriteByte('^')
				i++
			}
			if i < len(pattern) && pattern[i] == ']' {
				b.WriteString(`\]`)
				i++
			}
			continue
		case c == ']' && inClass:
			inClass = false
		case c == '(' && !inClass:
			if strings.HasPrefix(pattern[i:], "(?=") || strings.HasPrefix(pattern[i:], "(?!") ||
				strings.HasPrefix(pattern[i:], "(?<") || strings.HasPrefix(pattern[i:], "(?>") {
				return nil, fmt.Errorf("lookaround or atomic group at byte %d", i)
			}
			if !strings.HasPrefix(pattern[i:], "(?") {
				groups++
			} else if strings.HasPrefix(pattern[i:], "(?P<") {
				groups++
			}
		}
		b.WriteByte(c)
		i++
	}
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, err
	}
	return &regexSplitter{re: re, wsGroup: wsGroup}, nil
}

// find calls fn with the start and end of every match, left to right,
// matching as Oniguruma's find_iter does (empty matches are skipped).
func (r *regexSplitter) find(s string, fn func(start, end int)) {
	for pos := 0; pos <= len(s); {
		m := r.re.FindStringSubmatchIndex(s[pos:])
		if m == nil {
			return
		}
		start, end := pos+m[0], pos+m[1]
		if g := r.wsGroup; g > 0 && m[2*g] >= 0 && end < len(s) {
			// \s+(?!\S): the run is followed by a non-space; give back one rune.
			_, n := utf8.DecodeLastRuneInString(s[start:end])
			if end-n > start {
				end -= n
			}
		}
		if end == start {
			if start >= len(s) {
				return
			}
			_, n := utf8.DecodeRuneInString(s[start:])
			pos = start + n
			continue
		}
		fn(start, end)
		pos = end
	}
}
