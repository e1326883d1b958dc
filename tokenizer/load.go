package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/kevgo/kev/internal/quote"
)

// Limits on what a tokenizer file may make the loader allocate: Qwen's
// tokenizer.json is 11 MB with ids below 152,000.
const (
	// MaxFileBytes bounds tokenizer.json and tokenizer_config.json.
	MaxFileBytes = 256 << 20
	// MaxTokenID bounds every token id (the vocabulary's and the added
	// tokens'): the id table is allocated up to the largest.
	MaxTokenID = 4<<20 - 1
)

// Load reads a tokenizer.json file.
func Load(path string) (*Tokenizer, error) {
	data, err := readFile(path, filepath.Base(path))
	if err != nil {
		return nil, err
	}
	return build(filepath.Base(path), data, "", nil)
}

// readFile reads at most MaxFileBytes of path; a larger file is refused with
// a *FormatError naming name.
func readFile(path, name string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, &FormatError{File: name, Offset: -1, Msg: fmt.Sprintf("larger than the %d-byte limit", MaxFileBytes)}
	}
	return data, nil
}

// LoadDir reads dir/tokenizer.json and, when present,
// dir/tokenizer_config.json (for the pad token).
func LoadDir(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := readFile(path, "tokenizer.json")
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := readFile(cfgPath, "tokenizer_config.json")
	if errors.Is(err, os.ErrNotExist) {
		cfg, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	return build("tokenizer.json", data, "tokenizer_config.json", cfg)
}

// FromJSON builds a Tokenizer from the contents of a tokenizer.json file.
func FromJSON(data []byte) (*Tokenizer, error) {
	return build("", data, "", nil)
}

// FromJSONConfig is FromJSON with the contents of tokenizer_config.json,
// which names the pad token.
func FromJSONConfig(data, config []byte) (*Tokenizer, error) {
	return build("", data, "", config)
}

type fileJSON struct {
	AddedTokens  []addedJSON     `json:"added_tokens"`
	Normalizer   json.RawMessage `json:"normalizer"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
	Decoder      json.RawMessage `json:"decoder"`
	Model        *modelJSON      `json:"model"`
}

type addedJSON struct {
	ID         *int    `json:"id"`
	Content    *string `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized *bool   `json:"normalized"`
	Special    bool    `json:"special"`
}

type modelJSON struct {
	Type                    string            `json:"type"`
	Dropout                 *float64          `json:"dropout"`
	UnkToken                *string           `json:"unk_token"`
	ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	FuseUnk                 bool              `json:"fuse_unk"`
	ByteFallback            bool              `json:"byte_fallback"`
	IgnoreMerges            bool              `json:"ignore_merges"`
	Vocab                   map[string]int    `json:"vocab"`
	Merges                  []json.RawMessage `json:"merges"`
}

type componentJSON struct {
	Type           string            `json:"type"`
	Normalizers    []json.RawMessage `json:"normalizers"`
	Pretokenizers  []json.RawMessage `json:"pretokenizers"`
	Decoders       []json.RawMessage `json:"decoders"`
	Pattern        *patternJSON      `json:"pattern"`
	Behavior       string            `json:"behavior"`
	Invert         bool              `json:"invert"`
	AddPrefixSpace bool              `json:"add_prefix_space"`
	UseRegex       *bool             `json:"use_regex"`
}

type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// loader carries the file name into every error.
type loader struct{ file string }

func (l loader) format(path, format string, args ...any) error {
	return &FormatError{File: l.file, Path: path, Offset: -1, Msg: fmt.Sprintf(format, args...)}
}

func (l loader) unsupported(path, format string, args ...any) error {
	return &UnsupportedError{File: l.file, Path: path, What: fmt.Sprintf(format, args...)}
}

// jsonError turns an encoding/json error into a FormatError.
func (l loader) jsonError(path string, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return &FormatError{File: l.file, Path: path, Offset: se.Offset, Msg: se.Error()}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		p := path
		if te.Field != "" {
			if p != "" {
				p += "."
			}
			p += te.Field
		}
		return &FormatError{File: l.file, Path: p, Offset: te.Offset,
			Msg: fmt.Sprintf("cannot use JSON %s as %s", quote.Cut(te.Value, quote.Max), te.Type)}
	}
	return &FormatError{File: l.file, Path: path, Offset: -1, Msg: quote.Error(err)}
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}

func build(file string, data []byte, cfgFile string, cfg []byte) (*Tokenizer, error) {
	l := loader{file}
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, l.jsonError("", err)
	}
	bmpOnce.Do(buildBMP)
	t := &Tokenizer{padID: -1}
	err := l.model(t, f.Model)
	if err != nil {
		return nil, err
	}
	if t.normalize, err = l.normalizer("normalizer", f.Normalizer); err != nil {
		return nil, err
	}
	t.form, t.oneForm = singleForm(f.Normalizer)
	if err = l.preTokenizer(t, "pre_tokenizer", f.PreTokenizer); err != nil {
		return nil, err
	}
	if err = l.decoder(t, "decoder", f.Decoder); err != nil {
		return nil, err
	}
	if err = l.added(t, f.AddedTokens); err != nil {
		return nil, err
	}
	if cfg != nil {
		if err = (loader{cfgFile}).config(t, cfg); err != nil {
			return nil, err
		}
	} else if id, ok := t.added["<|endoftext|>"]; ok {
		t.padID = id
	}
	return t, nil
}

// normalizer returns the normalization function, nil for none.
func (l loader) normalizer(path string, raw json.RawMessage) (func(string) string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, l.jsonError(path, err)
	}
	form := func(f norm.Form) func(string) string {
		return func(s string) string { return f.String(s) }
	}
	switch c.Type {
	case "NFC":
		return form(norm.NFC), nil
	case "NFD":
		return form(norm.NFD), nil
	case "NFKC":
		return form(norm.NFKC), nil
	case "NFKD":
		return form(norm.NFKD), nil
	case "Sequence":
		var fs []func(string) string
		for i, r := range c.Normalizers {
			fn, err := l.normalizer(fmt.Sprintf("%s.normalizers[%d]", path, i), r)
			if err != nil {
				return nil, err
			}
			if fn != nil {
				fs = append(fs, fn)
			}
		}
		switch len(fs) {
		case 0:
			return nil, nil
		case 1:
			return fs[0], nil
		}
		return func(s string) string {
			for _, fn := range fs {
				s = fn(s)
			}
			return s
		}, nil
	case "":
		return nil, l.format(path, "missing normalizer type")
	}
	return nil, l.unsupported(path, "normalizer type %s", quote.String(c.Type))
}

// singleForm reports the Unicode normalization form of a normalizer that is
// exactly one form (nil for none), and false for any other normalizer.
func singleForm(raw json.RawMessage) (*norm.Form, bool) {
	if isNull(raw) {
		return nil, true
	}
	var c componentJSON
	if json.Unmarshal(raw, &c) != nil {
		return nil, false
	}
	forms := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}
	if f, ok := forms[c.Type]; ok {
		return &f, true
	}
	if c.Type != "Sequence" {
		return nil, false
	}
	var one *norm.Form
	for _, r := range c.Normalizers {
		f, ok := singleForm(r)
		if !ok || f != nil && one != nil {
			return nil, false
		}
		if f != nil {
			one = f
		}
	}
	return one, true
}

// preTokenizer fills t.steps (and t.fast for Qwen's pipeline).
func (l loader) preTokenizer(t *Tokenizer, path string, raw json.RawMessage) error {
	if isNull(raw) {
		return l.unsupported(path, "pipeline without a ByteLevel pre-tokenizer")
	}
	if err := l.addStep(t, path, raw); err != nil {
		return err
	}
	if !t.byteLevel {
		return l.unsupported(path, "pipeline without a ByteLevel pre-tokenizer")
	}
	// Drop no-op ByteLevel steps; a single Qwen scanner step is the fast path.
	var steps []step
	for _, s := range t.steps {
		if b, ok := s.(byteLevelStep); ok && !b.prefixSpace && b.re == nil {
			continue
		}
		steps = append(steps, s)
	}
	t.steps = steps
	if len(steps) == 1 {
		if s, ok := steps[0].(scanStep); ok {
			t.fast = s.q
		}
	}
	return nil
}

func (l loader) addStep(t *Tokenizer, path string, raw json.RawMessage) error {
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return l.jsonError(path, err)
	}
	switch c.Type {
	case "Sequence":
		for i, r := range c.Pretokenizers {
			if err := l.addStep(t, fmt.Sprintf("%s.pretokenizers[%d]", path, i), r); err != nil {
				return err
			}
		}
		return nil
	case "Split":
		if t.byteLevel {
			return l.unsupported(path, "Split after ByteLevel")
		}
		if c.Pattern == nil || (c.Pattern.Regex == nil) == (c.Pattern.String == nil) {
			return l.format(path+".pattern", "want {\"Regex\": ...} or {\"String\": ...}")
		}
		b, ok := behaviors[c.Behavior]
		if !ok {
			return l.unsupported(path+".behavior", "split behavior %s", quote.String(c.Behavior))
		}
		if c.Pattern.Regex != nil {
			p := *c.Pattern.Regex
			if (p == patternQwen2 || p == patternQwen35) && b == isolated && !c.Invert {
				t.steps = append(t.steps, scanStep{newQwenScanner(p == patternQwen35)})
				return nil
			}
			re, err := compileOniguruma(p)
			if err != nil {
				return l.unsupported(path+".pattern.Regex", "pattern %s: %s", quote.String(p), quote.Error(err))
			}
			t.steps = append(t.steps, regexStep{re: re, behavior: b, invert: c.Invert})
			return nil
		}
		re, err := compileOniguruma(quoteOniguruma(*c.Pattern.String))
		if err != nil {
			return l.format(path+".pattern.String", "%s", quote.Error(err))
		}
		t.steps = append(t.steps, regexStep{re: re, behavior: b, invert: c.Invert})
		return nil
	case "ByteLevel":
		st := byteLevelStep{prefixSpace: c.AddPrefixSpace}
		if c.UseRegex == nil || *c.UseRegex {
			re, err := compileOniguruma(gpt2Pattern)
			if err != nil {
				return err
			}
			st.re = re
		}
		t.byteLevel = true
		t.steps = append(t.steps, st)
		return nil
	case "":
		return l.format(path, "missing pre-tokenizer type")
	}
	return l.unsupported(path, "pre-tokenizer type %s", quote.String(c.Type))
}

// quoteOniguruma escapes a literal for compileOniguruma.
func quoteOniguruma(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (l loader) decoder(t *Tokenizer, path string, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c componentJSON
	if err := json.Unmarshal(raw, &c); err != nil {
		return l.jsonError(path, err)
	}
	switch c.Type {
	case "ByteLevel":
		t.byteDecoder = true
		return nil
	case "":
		return l.format(path, "missing decoder type")
	}
	return l.unsupported(path, "decoder type %s", quote.String(c.Type))
}

func (l loader) model(t *Tokenizer, mj *modelJSON) error {
	if mj == nil {
		return l.format("model", "missing")
	}
	if mj.Type != "BPE" && (mj.Type != "" || mj.Merges == nil) {
		return l.unsupported("model.type", "model type %s (only BPE)", quote.String(mj.Type))
	}
	if mj.Vocab == nil {
		return l.format("model.vocab", "missing")
	}
	if mj.Dropout != nil && *mj.Dropout != 0 {
		return l.unsupported("model.dropout", "BPE dropout %v", *mj.Dropout)
	}
	if mj.ByteFallback {
		return l.unsupported("model.byte_fallback", "byte_fallback")
	}
	if p := mj.ContinuingSubwordPrefix; p != nil && *p != "" {
		return l.unsupported("model.continuing_subword_prefix", "continuing_subword_prefix %s", quote.String(*p))
	}
	if p := mj.EndOfWordSuffix; p != nil && *p != "" {
		return l.unsupported("model.end_of_word_suffix", "end_of_word_suffix %s", quote.String(*p))
	}
	m := &bpe{unk: -1, fuseUnk: mj.FuseUnk, ignoreMerges: mj.IgnoreMerges}
	maxID := -1
	for tok, id := range mj.Vocab {
		if id < 0 || id > MaxTokenID {
			return l.format("model.vocab["+quote.Name(tok)+"]", "id %d out of range [0, %d]", id, MaxTokenID)
		}
		maxID = max(maxID, id)
	}
	t.vocab = mj.Vocab
	t.idToken = make([]string, maxID+1)
	for tok, id := range mj.Vocab {
		t.idToken[id] = tok
	}
	if mj.UnkToken != nil {
		id, ok := mj.Vocab[*mj.UnkToken]
		if !ok {
			return l.format("model.unk_token", "token %s not in the vocabulary", quote.Name(*mj.UnkToken))
		}
		m.unk = int32(id)
	}
	for b := range m.byteID {
		if id, ok := mj.Vocab[string(byteRune[b])]; ok {
			m.byteID[b] = int32(id)
		} else {
			m.byteID[b] = -1
		}
	}
	if m.ignoreMerges {
		m.rawVocab = make(map[string]int32, len(mj.Vocab))
		for tok, id := range mj.Vocab {
			if b, ok := byteLevelDecode(tok); ok {
				m.rawVocab[string(b)] = int32(id)
			}
		}
	}
	m.merges = make(map[uint64]merge, len(mj.Merges))
	var pair [2]string
	for i, r := range mj.Merges {
		path := fmt.Sprintf("model.merges[%d]", i)
		r = bytes.TrimSpace(r)
		if a, b, ok := plainMerge(r); ok {
			pair = [2]string{a, b}
		} else if len(r) > 0 && r[0] == '"' {
			var s string
			if err := json.Unmarshal(r, &s); err != nil {
				return l.jsonError(path, err)
			}
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return l.format(path, "merge %s is not two tokens separated by one space", quote.Name(s))
			}
			pair = [2]string{a, b}
		} else if err := json.Unmarshal(r, &pair); err != nil {
			return l.jsonError(path, err)
		}
		a, ok := mj.Vocab[pair[0]]
		if !ok {
			return l.format(path, "token %s not in the vocabulary", quote.Name(pair[0]))
		}
		b, ok := mj.Vocab[pair[1]]
		if !ok {
			return l.format(path, "token %s not in the vocabulary", quote.Name(pair[1]))
		}
		c, ok := mj.Vocab[pair[0]+pair[1]]
		if !ok {
			return l.format(path, "merged token %s not in the vocabulary", quote.Name(pair[0]+pair[1]))
		}
		m.merges[pairKey(int32(a), int32(b))] = merge{rank: int32(i), id: int32(c)}
	}
	m.cache.init()
	t.model = m
	return nil
}

func (l loader) added(t *Tokenizer, list []addedJSON) error {
	t.added = make(map[string]int, len(list))
	t.special = make(map[int]bool)
	var raw, normalized []addedToken
	// Size the id table once for the largest id, so that loading is linear
	// in the added tokens (growing it a token at a time was quadratic: 200k
	// tokens took minutes).
	top := len(t.idToken) - 1
	for _, a := range list {
		if a.ID != nil && *a.ID >= 0 && *a.ID <= MaxTokenID {
			top = max(top, *a.ID)
		}
	}
	if top >= len(t.idToken) {
		grown := make([]string, top+1)
		copy(grown, t.idToken)
		t.idToken = grown
	}
	for i, a := range list {
		path := fmt.Sprintf("added_tokens[%d]", i)
		if a.ID == nil || *a.ID < 0 || *a.ID > MaxTokenID {
			return l.format(path+".id", "missing or out of range [0, %d]", MaxTokenID)
		}
		if a.Content == nil || *a.Content == "" {
			return l.format(path+".content", "missing or empty")
		}
		tok := addedToken{content: *a.Content, id: *a.ID, special: a.Special, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: !a.Special}
		if a.Normalized != nil {
			tok.normalized = *a.Normalized
		}
		if _, dup := t.added[tok.content]; dup {
			continue
		}
		t.added[tok.content] = tok.id
		if tok.special {
			t.special[tok.id] = true
		}
		t.idToken[tok.id] = tok.content
		if tok.normalized {
			if t.normalize != nil {
				tok.content = t.normalize(tok.content)
			}
			normalized = append(normalized, tok)
		} else {
			raw = append(raw, tok)
		}
	}
	t.rawAdded = newAddedMatcher(raw)
	if len(normalized) > 0 {
		t.normAdded = newAddedMatcher(normalized)
	}
	return nil
}

type configJSON struct {
	PadToken json.RawMessage `json:"pad_token"`
}

func (l loader) config(t *Tokenizer, data []byte) error {
	var c configJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return l.jsonError("", err)
	}
	if isNull(c.PadToken) {
		return nil
	}
	var name string
	if err := json.Unmarshal(c.PadToken, &name); err != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(c.PadToken, &obj); err != nil {
			return l.format("pad_token", "want a string or {\"content\": ...}")
		}
		name = obj.Content
	}
	id, ok := t.TokenID(name)
	if !ok {
		return l.format("pad_token", "token %s not in the vocabulary", quote.Name(name))
	}
	t.padID = id
	return nil
}

// plainMerge parses the common forms of a merge, "a b" and ["a","b"], when
// they hold no escapes; other forms go through encoding/json.
func plainMerge(r []byte) (a, b string, ok bool) {
	if bytes.IndexByte(r, '\\') >= 0 || len(r) < 2 || !utf8.Valid(r) {
		return "", "", false
	}
	if r[0] == '"' && r[len(r)-1] == '"' {
		s := r[1 : len(r)-1]
		i := bytes.IndexByte(s, ' ')
		if i < 0 || bytes.IndexByte(s[i+1:], ' ') >= 0 || bytes.IndexByte(s, '"') >= 0 {
			return "", "", false
		}
		return string(s[:i]), string(s[i+1:]), true
	}
	if r[0] != '[' || r[len(r)-1] != ']' {
		return "", "", false
	}
	// ["a","b"] with optional spaces around the comma.
	parts := bytes.Split(r[1:len(r)-1], []byte{','})
	if len(parts) != 2 {
		return "", "", false
	}
	var out [2]string
	for k, p := range parts {
		p = bytes.TrimSpace(p)
		if len(p) < 2 || p[0] != '"' || p[len(p)-1] != '"' || bytes.IndexByte(p[1:len(p)-1], '"') >= 0 {
			return "", "", false
		}
		out[k] = string(p[1 : len(p)-1])
	}
	return out[0], out[1], true
}
