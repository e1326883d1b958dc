package tokenizer

import "strings"

// Escape rewrites every delimiter-shaped token in caller text, "<|" then
// one or more ASCII letters, digits or underscores then "|>", to the same
// name between "<¦" and "¦>" (U+00A6 BROKEN BAR), as Kev does before
// tokenising a state, instruction or option, so that caller text cannot
// forge Kev's delimiters. Matches are found left to right and do not
// overlap, as Python's re.sub finds them.
func Escape(text string) string {
	i := strings.Index(text, "<|")
	if i < 0 {
		return text
	}
	var b strings.Builder
	b.Grow(len(text) + 8)
	last := 0
	for i >= 0 {
		j := i + 2
		for j < len(text) && isNameByte(text[j]) {
			j++
		}
		if j > i+2 && strings.HasPrefix(text[j:], "|>") {
			b.WriteString(text[last:i])
			b.WriteString("<¦")
			b.WriteString(text[i+2 : j])
			b.WriteString("¦>")
			last = j + 2
			i = last
		} else {
			i++
		}
		k := strings.Index(text[i:], "<|")
		if k < 0 {
			break
		}
		i += k
	}
	b.WriteString(text[last:])
	return b.String()
}

func isNameByte(c byte) bool {
	return c == '_' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

// EncodeEscaped is Encode(Escape(text)): the ids of caller-supplied text in
// a Kev record.
func (t *Tokenizer) EncodeEscaped(text string) []int {
	return t.Encode(Escape(text))
}
