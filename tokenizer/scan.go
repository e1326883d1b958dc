package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Qwen's split patterns. The scanner below matches them exactly; any other
// pattern runs on Go's regexp (regex.go).
const (
	// patternQwen2 is the Split regex of Qwen2, Qwen2.5 and Qwen3.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternQwen35 is the Split regex of Qwen3.5: combining marks join letters.
	patternQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// qwenScanner finds the next match of patternQwen2 (marks=false) or
// patternQwen35 (marks=true) with the semantics of a backtracking engine
// (Oniguruma): alternatives are tried in order at each position. Both
// patterns match every character, so matches tile the text.
type qwenScanner struct {
	letter uint8 // class bits of the "letter" alternative: L, or L and M
	punct  uint8 // classes excluded from the punctuation run: \s L N (M)
}

func newQwenScanner(marks bool) *qwenScanner {
	bmpOnce.Do(buildBMP)
	q := &qwenScanner{letter: clL, punct: clWS | clL | clN}
	if marks {
		q.letter |= clM
		q.punct |= clM
	}
	return q
}

// asciiClass holds classOf for ASCII, to keep the common case branch-light.
var asciiClass [128]uint8

// foldLetter maps every rune that case-folds to one of the letters of
// Qwen's contractions (s t r e v m l d) to that lowercase letter; this
// includes U+017F LATIN SMALL LETTER LONG S, which folds to s.
var foldLetter = map[rune]byte{}

func init() {
	for r := rune(0); r < 128; r++ {
		asciiClass[r] = classOfSlow(r)
	}
	for _, c := range "strevmld" {
		for r := unicode.SimpleFold(c); ; r = unicode.SimpleFold(r) {
			foldLetter[r] = byte(c)
			if r == c {
				break
			}
		}
	}
}

// at decodes the rune at s[i] and returns its size and class bits.
func at(s string, i int) (rune, int, uint8) {
	if b := s[i]; b < utf8.RuneSelf {
		return rune(b), 1, asciiClass[b]
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return r, n, classOf(r)
}

// fold returns the contraction letter r folds to, or 0.
func fold(s string, i int) (byte, int) {
	if i >= len(s) {
		return 0, 0
	}
	if b := s[i]; b < utf8.RuneSelf {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		switch b {
		case 's', 't', 'r', 'e', 'v', 'm', 'l', 'd':
			return b, 1
		}
		return 0, 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return foldLetter[r], n
}

// contraction returns the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) when s[i]
// is the apostrophe, or -1.
func contraction(s string, i int) int {
	c, n := fold(s, i+1)
	j := i + 1 + n
	switch c {
	case 's', 't', 'm', 'd':
		return j
	case 'r', 'v':
		if c2, n2 := fold(s, j); c2 == 'e' {
			return j + n2
		}
	case 'l':
		if c2, n2 := fold(s, j); c2 == 'l' {
			return j + n2
		}
	}
	return -1
}

// run returns the end of the run of runes from i whose class has any bit
// of want.
func run(s string, i int, want uint8) int {
	for i < len(s) {
		_, n, c := at(s, i)
		if c&want == 0 {
			break
		}
		i += n
	}
	return i
}

// runNot returns the end of the run of runes from i whose class has no bit
// of avoid.
func runNot(s string, i int, avoid uint8) int {
	for i < len(s) {
		_, n, c := at(s, i)
		if c&avoid != 0 {
			break
		}
		i += n
	}
	return i
}

// next returns the end of the match that starts at s[i]; i < len(s).
func (q *qwenScanner) next(s string, i int) int {
	r, n, c := at(s, i)
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if r == '\'' {
		if j := contraction(s, i); j > 0 {
			return j
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+  (or [\p{L}\p{M}]+)
	if c&q.letter != 0 {
		return run(s, i+n, q.letter)
	}
	if c&(clNL|clL|clN) == 0 && i+n < len(s) {
		if _, n2, c2 := at(s, i+n); c2&q.letter != 0 {
			return run(s, i+n+n2, q.letter)
		}
	}
	// \p{N}
	if c&clN != 0 {
		return i + n
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if r == ' ' && i+1 < len(s) {
		if _, _, c2 := at(s, i+1); c2&q.punct == 0 {
			return run(s, runNot(s, i+1, q.punct), clNL)
		}
	}
	if c&q.punct == 0 {
		return run(s, runNot(s, i, q.punct), clNL)
	}
	if c&clWS == 0 {
		return i + n // unreachable: every rune is \s, a letter, a number or punctuation
	}
	// Here s[i] is whitespace. W is the whitespace run [i, e).
	// \s*[\r\n]+ : up to and including W's last \r or \n.
	e, lastNL, last := i, -1, i
	for e < len(s) {
		_, m, ce := at(s, e)
		if ce&clWS == 0 {
			break
		}
		if ce&clNL != 0 {
			lastNL = e
		}
		last = e
		e += m
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	// \s+(?!\S) : all of W at the end of the text, else W less its last rune.
	if e == len(s) || last == i {
		return e // the second case is \s+ with W one rune long
	}
	return last
}
