package tokenizer

import (
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/kevgo/kev/internal/quote"
)

// Tokenizer encodes and decodes text with one tokenizer.json. It is
// immutable after loading and safe for concurrent use.
type Tokenizer struct {
	normalize   func(string) string // nil: no normalizer
	form        *norm.Form          // the normalizer's one Unicode form, nil for none; with oneForm
	oneForm     bool                // the normalizer is no more than one Unicode form
	steps       []step              // pre-tokenizers, byte mapping implicit
	fast        *qwenScanner        // set when steps is one Qwen split
	byteLevel   bool
	byteDecoder bool
	model       *bpe
	rawAdded    *addedMatcher // added tokens matched on the raw text
	normAdded   *addedMatcher // added tokens matched on normalized text, or nil
	vocab       map[string]int
	added       map[string]int
	special     map[int]bool
	idToken     []string
	padID       int
}

// Encode returns the ids of text, with no special tokens added and added
// tokens recognised wherever they occur (Hugging Face's
// encode(text, add_special_tokens=False)). Invalid UTF-8 bytes are each
// read as U+FFFD.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(make([]int, 0, len(text)/3+4), text)
}

// AppendEncode appends the ids of text to ids and returns the result.
func (t *Tokenizer) AppendEncode(ids []int, text string) []int {
	if !utf8.ValidString(text) {
		text = replaceInvalid(text)
	}
	t.rawAdded.split(text,
		func(s string) { ids = t.appendSegment(ids, s) },
		func(id int) { ids = append(ids, id) })
	return ids
}

// appendSegment encodes text that holds no raw-matched added token.
func (t *Tokenizer) appendSegment(ids []int, s string) []int {
	if t.normalize != nil {
		s = t.normalize(s)
	}
	if t.normAdded == nil {
		return t.appendPreTokenized(ids, s)
	}
	t.normAdded.split(s,
		func(s string) { ids = t.appendPreTokenized(ids, s) },
		func(id int) { ids = append(ids, id) })
	return ids
}

func (t *Tokenizer) appendPreTokenized(ids []int, s string) []int {
	if q := t.fast; q != nil {
		for i := 0; i < len(s); {
			e := q.next(s, i)
			ids = t.model.appendWord(ids, s[i:e])
			i = e
		}
		return ids
	}
	t.pretokenize(s, 0, func(w string) { ids = t.model.appendWord(ids, w) })
	return ids
}

func (t *Tokenizer) pretokenize(s string, level int, emit func(string)) {
	if level == len(t.steps) {
		if s != "" {
			emit(s)
		}
		return
	}
	t.steps[level].split(s, func(p string) { t.pretokenize(p, level+1, emit) })
}

// TokenID returns the id of a token given as its vocabulary string: an
// added token's content ("<|box_start|>") or a byte-level BPE token
// ("Ġhello"). Added tokens are looked up first.
func (t *Tokenizer) TokenID(token string) (int, bool) {
	if id, ok := t.added[token]; ok {
		return id, true
	}
	id, ok := t.vocab[token]
	return id, ok
}

// Token returns the vocabulary string of id, or false if id is unknown.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.idToken) {
		return "", false
	}
	s := t.idToken[id]
	return s, s != ""
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool { return t.special[id] }

// VocabSize returns one more than the largest id the tokenizer knows, BPE
// vocabulary and added tokens together (151,669 for Qwen3).
func (t *Tokenizer) VocabSize() int { return len(t.idToken) }

// CheckIDs returns an *IDRangeError for the token of the highest id when some
// id is vocab or more (the size of a model's embedding table), else nil. A
// loader calls it with the model's vocab_size, so that a tokenizer whose
// ids the model cannot embed is refused at load and not at the first text
// that uses them.
func (t *Tokenizer) CheckIDs(vocab int) error {
	for id := len(t.idToken) - 1; id >= vocab && id >= 0; id-- {
		if tok := t.idToken[id]; tok != "" {
			return &IDRangeError{Token: quote.Name(tok), ID: id, Limit: vocab}
		}
	}
	return nil
}

// PadID returns the id of the pad token: tokenizer_config.json's pad_token
// when a config was given, otherwise "<|endoftext|>" when it is an added
// token, otherwise 0.
func (t *Tokenizer) PadID() int {
	if t.padID < 0 {
		return 0
	}
	return t.padID
}

// Decode returns the text of ids, special tokens included, as Hugging
// Face's decode(ids, skip_special_tokens=False): byte-level tokens are
// turned back into bytes, and byte sequences that are not valid UTF-8 are
// replaced by U+FFFD, one per maximal invalid subpart. Unknown ids are
// skipped.
func (t *Tokenizer) Decode(ids []int) string {
	if !t.byteDecoder {
		parts := make([]string, 0, len(ids))
		for _, id := range ids {
			if s, ok := t.Token(id); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, " ")
	}
	var b []byte
	for _, id := range ids {
		s, ok := t.Token(id)
		if !ok {
			continue
		}
		if raw, ok := byteLevelDecode(s); ok {
			b = append(b, raw...)
		} else {
			b = append(b, s...)
		}
	}
	return lossyUTF8(b)
}
