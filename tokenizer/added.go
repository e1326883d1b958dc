package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	content    string
	id         int
	special    bool
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
}

// addedMatcher finds added tokens in text, leftmost first and longest among
// those starting at the same byte, like the Aho-Corasick automaton (match
// kind LeftmostLongest) Hugging Face builds.
type addedMatcher struct {
	tokens  []addedToken // by pattern
	byFirst [256][]int   // pattern indexes by first byte, longest first
	only    int          // the single first byte when all patterns share it, else -1
	first   [256]bool    // whether some pattern starts with the byte
	empty   bool         // no patterns
	maxLen  int          // the longest pattern's length in bytes
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{tokens: tokens, only: -1, empty: true}
	firsts := 0
	for i, t := range tokens {
		if t.content == "" {
			continue
		}
		m.empty = false
		m.maxLen = max(m.maxLen, len(t.content))
		b := t.content[0]
		if !m.first[b] {
			firsts++
			m.only = int(b)
		}
		m.first[b] = true
		m.byFirst[b] = append(m.byFirst[b], i)
	}
	if firsts != 1 {
		m.only = -1
	}
	for b := range m.byFirst {
		idx := m.byFirst[b]
		sort.SliceStable(idx, func(i, j int) bool {
			return len(tokens[idx[i]].content) > len(tokens[idx[j]].content)
		})
	}
	return m
}

// find returns the leftmost-longest raw match at or after from.
func (m *addedMatcher) find(s string, from int) (start, end, tok int) {
	for i := from; i < len(s); i++ {
		if m.only >= 0 {
			j := strings.IndexByte(s[i:], byte(m.only))
			if j < 0 {
				return -1, -1, -1
			}
			i += j
		} else if !m.first[s[i]] {
			continue
		}
		for _, k := range m.byFirst[s[i]] {
			if c := m.tokens[k].content; strings.HasPrefix(s[i:], c) {
				return i, i + len(c), k
			}
		}
	}
	return -1, -1, -1
}

// split calls piece for the text between added tokens and token for each
// added token, in order, with the single_word, lstrip and rstrip rules of
// Hugging Face's AddedVocabulary. Empty pieces are not reported.
func (m *addedMatcher) split(s string, piece func(string), token func(id int)) {
	if m.empty {
		if s != "" {
			piece(s)
		}
		return
	}
	offset := 0 // end of the last accepted token
	for from := 0; from < len(s); {
		start, stop, k := m.find(s, from)
		if k < 0 {
			break
		}
		from = stop
		t := &m.tokens[k]
		if t.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), offset)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
			from = stop
		}
		if offset < start {
			piece(s[offset:start])
		}
		token(t.id)
		offset = stop
	}
	if offset < len(s) {
		piece(s[offset:])
	}
}

// isWordRune is the \w of Rust's regex crate: Alphabetic, marks, decimal
// digits, connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}
