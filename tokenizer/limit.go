package tokenizer

import (
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// chunkBytes is how much text EncodeLimit and Count encode at a time.
const chunkBytes = 16 << 10

// EncodeLimit encodes text as Encode does but stops once it has more than
// max ids: ids is Encode(text)[:min(n, max)] for the n ids of the whole text,
// and truncated reports n > max. Memory is proportional to max (plus one
// chunk of a few thousand ids), not to len(text), for Qwen's tokenizers;
// other tokenizers encode the whole text first. A single pre-token (a run of
// letters, of punctuation or of spaces) is always merged whole, as BPE needs.
func (t *Tokenizer) EncodeLimit(text string, max int) (ids []int, truncated bool) {
	return t.encodeLimit(text, max, chunkBytes, false)
}

// EncodeEscapedLimit is EncodeLimit for EncodeEscaped: its ids are
// EncodeEscaped(text)[:min(n, max)], and text is escaped chunk by chunk, never
// copied whole.
func (t *Tokenizer) EncodeEscapedLimit(text string, max int) (ids []int, truncated bool) {
	return t.encodeLimit(text, max, chunkBytes, true)
}

func (t *Tokenizer) encodeLimit(text string, max, chunk int, escape bool) (ids []int, truncated bool) {
	if max < 0 {
		max = 0
	}
	ids = make([]int, 0, min(max+1, len(text)/3+4))
	t.chunks(text, chunk, escape, func(part string) bool {
		if escape {
			part = Escape(part)
		}
		ids = t.AppendEncode(ids, part)
		return len(ids) <= max
	})
	if len(ids) > max {
		return ids[:max:max], true
	}
	return ids, false
}

// Count returns len(t.Encode(text)) with the memory of one chunk of ids (for
// Qwen's tokenizers; see EncodeLimit).
func (t *Tokenizer) Count(text string) int {
	return t.count(text, chunkBytes, false)
}

// CountEscaped returns len(t.EncodeEscaped(text)) as Count does.
func (t *Tokenizer) CountEscaped(text string) int {
	return t.count(text, chunkBytes, true)
}

func (t *Tokenizer) count(text string, chunk int, escape bool) int {
	var buf []int
	n := 0
	t.chunks(text, chunk, escape, func(part string) bool {
		if escape {
			part = Escape(part)
		}
		buf = t.AppendEncode(buf[:0], part)
		n += len(buf)
		return true
	})
	return n
}

// chunks calls yield with consecutive pieces of text, of about size bytes
// and more, cut only where encoding the pieces one by one (escaping each
// first, with escape) gives exactly the ids of the whole (see cutOK and
// escapeOK); it stops when yield returns false. Without such cuts (a
// tokenizer other than Qwen's), text is one piece.
func (t *Tokenizer) chunks(text string, size int, escape bool, yield func(string) bool) {
	if t.fast == nil || !t.oneForm {
		if text != "" {
			yield(text)
		}
		return
	}
	for start := 0; start < len(text); {
		end := len(text)
		for c := start + max(size, 1); c < len(text); c++ {
			if t.cutOK(text, c) && (!escape || t.escapeOK(text, c)) {
				end = c
				break
			}
		}
		if !yield(text[start:end]) {
			return
		}
		start = end
	}
}

// escapeOK reports whether Escape leaves the text around c alone: with no
// '<' or '|' within the widest window cutOK looks at, no delimiter-shaped
// token spans c or changes the bytes cutOK judged, so escaping the pieces
// gives the pieces of the escaped text and c is a cut there too.
func (t *Tokenizer) escapeOK(s string, c int) bool {
	w := normWindow
	for _, m := range []*addedMatcher{t.rawAdded, t.normAdded} {
		if m != nil {
			w = max(w, m.maxLen+1)
		}
	}
	for i := max(0, c-w-1); i < min(len(s), c+w+1); i++ {
		if s[i] == '<' || s[i] == '|' {
			return false
		}
	}
	return true
}

// cutOK reports whether Encode(s[:c]) followed by Encode(s[c:]) is exactly
// Encode(s). Every stage must split there on its own:
//
//   - UTF-8: the runes x before c and y at c are valid, so replacing
//     invalid bytes is the same in pieces;
//   - added tokens: none can start within its longest length before c, or
//     at c, so none spans c and none's lstrip, rstrip or single_word rule
//     looks across (x is never a space, see below);
//   - normalization: c is a boundary of the normalization form (y cannot
//     combine with what precedes it), so the normalized pieces concatenate;
//     tokens added after normalization need the same margin, in ASCII text
//     (which every form leaves alone);
//   - the Qwen split: with x and y the normalized runes on either side, one
//     of: x is a letter and y is not (the letter run, or contraction, that
//     holds x ends at c); x is a digit (always a pre-token of its own); x is
//     not a space and y is a digit; x is punctuation and y a space other
//     than \r and \n (the punctuation run and its trailing newlines end at
//     c). In each case the pre-token holding x ends at c whatever follows,
//     nothing before it looked past y, and the split restarts at c exactly
//     as it does on s[c:].
func (t *Tokenizer) cutOK(s string, c int) bool {
	if c <= 0 || c >= len(s) || !utf8.RuneStart(s[c]) {
		return false
	}
	x, nx := utf8.DecodeLastRuneInString(s[:c])
	y, ny := utf8.DecodeRuneInString(s[c:])
	if x == utf8.RuneError && nx <= 1 || y == utf8.RuneError && ny <= 1 {
		return false
	}
	if m := t.rawAdded; m != nil && !m.empty {
		for i := max(0, c-m.maxLen); i <= c; i++ {
			if m.first[s[i]] {
				return false
			}
		}
	}
	if m := t.normAdded; m != nil && !m.empty {
		for i := max(0, c-m.maxLen-1); i <= c; i++ {
			if s[i] >= utf8.RuneSelf || m.first[s[i]] {
				return false
			}
		}
	}
	if f := t.form; f != nil && (x >= utf8.RuneSelf || y >= utf8.RuneSelf) {
		var ok bool
		if x, y, ok = normalizedAround(*f, s, c); !ok {
			return false
		}
	}
	q := t.fast
	cx, cy := classOf(x), classOf(y)
	switch {
	case cx&q.letter != 0 && cy&q.letter == 0:
		return true
	case cx&clN != 0:
		return true
	case cx&clWS == 0 && cy&clN != 0:
		return true
	case cx&q.punct == 0 && cy&clWS != 0 && cy&clNL == 0:
		return true
	}
	return false
}

// normWindow bounds the normalization segments cutOK looks at.
const normWindow = 64

// normalizedAround returns, when c is a boundary of form f in s, the last
// rune of f(s[:c]) and the first rune of f(s[c:]), computed on the segments
// (a rune that starts one and what may combine with it) either side of c;
// ok is false when c is not a boundary, or a segment is unusually long or
// holds invalid UTF-8.
func normalizedAround(f norm.Form, s string, c int) (x, y rune, ok bool) {
	const window = normWindow
	if !f.PropertiesString(s[c:]).BoundaryBefore() {
		return 0, 0, false
	}
	p := c // the start of the segment that ends at c
	for {
		_, n := utf8.DecodeLastRuneInString(s[:p])
		p -= n
		if n == 0 || c-p > window {
			return 0, 0, false
		}
		if f.PropertiesString(s[p:]).BoundaryBefore() {
			break
		}
	}
	hi := min(len(s), c+window)
	e := f.NextBoundaryInString(s[c:hi], hi == len(s))
	if e <= 0 || !utf8.ValidString(s[p:c]) || !utf8.ValidString(s[c:c+e]) {
		return 0, 0, false
	}
	x, _ = utf8.DecodeLastRuneInString(f.String(s[p:c]))
	y, _ = utf8.DecodeRuneInString(f.String(s[c : c+e]))
	return x, y, true
}
