package tokenizer

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// synth builds a small byte-level BPE tokenizer.json: the 256 byte
// characters (ids 0..255), then the merged tokens of merges in order, then
// the added tokens. edit may change the decoded JSON before encoding.
func synth(t testing.TB, merges [][2]string, added []map[string]any, edit func(map[string]any)) []byte {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteRune[b])] = b
	}
	var ms []any
	for _, m := range merges {
		if _, ok := vocab[m[0]+m[1]]; !ok {
			vocab[m[0]+m[1]] = len(vocab)
		}
		ms = append(ms, m[0]+" "+m[1])
	}
	next := len(vocab)
	for _, a := range added {
		if _, ok := a["id"]; !ok {
			a["id"] = next
			next++
		}
	}
	doc := map[string]any{
		"version":      "1.0",
		"added_tokens": added,
		"normalizer":   map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patternQwen2}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "",
			"end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": ms},
	}
	if edit != nil {
		edit(doc)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustLoad(t testing.TB, data []byte) *Tokenizer {
	t.Helper()
	tk, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// pieces returns the token strings of ids.
func pieces(t testing.TB, tk *Tokenizer, ids []int) []string {
	var out []string
	for _, id := range ids {
		s, ok := tk.Token(id)
		if !ok {
			t.Fatalf("unknown id %d", id)
		}
		out = append(out, s)
	}
	return out
}

func TestBPEMergeOrder(t *testing.T) {
	cases := []struct {
		name   string
		merges [][2]string
		text   string
		want   []string
	}{
		// Equal ranks: the leftmost pair merges first.
		{"leftmost among equal ranks", [][2]string{{"a", "a"}}, "aaa", []string{"aa", "a"}},
		// Lower rank wins regardless of position.
		{"rank before position", [][2]string{{"b", "c"}, {"a", "b"}}, "abc", []string{"a", "bc"}},
		{"chained merges", [][2]string{{"a", "b"}, {"ab", "c"}, {"abc", "d"}}, "abcd", []string{"abcd"}},
		// Spaces: ĠĠ then ĠĠĠĠ, then ĠĠĠĠĠĠ and ĠĠĠĠĠĠĠ.
		{"space runs", [][2]string{{"Ġ", "Ġ"}, {"ĠĠ", "ĠĠ"}, {"ĠĠĠĠ", "ĠĠ"}, {"ĠĠĠĠĠĠ", "Ġ"}}, "       ",
			[]string{"ĠĠĠĠĠĠĠ"}},
		{"no merges", nil, "héllo", []string{"h", "Ã", "©", "l", "l", "o"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tk := mustLoad(t, synth(t, c.merges, nil, nil))
			if got := pieces(t, tk, tk.Encode(c.text)); !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

func TestMergesAsPairs(t *testing.T) {
	merges := [][2]string{{"a", "b"}, {"ab", "c"}}
	pairs := synth(t, merges, nil, func(d map[string]any) {
		d["model"].(map[string]any)["merges"] = []any{[]string{"a", "b"}, []string{"ab", "c"}}
	})
	a, b := mustLoad(t, synth(t, merges, nil, nil)), mustLoad(t, pairs)
	for _, s := range []string{"abc", "ababc cab"} {
		if x, y := a.Encode(s), b.Encode(s); !slices.Equal(x, y) {
			t.Errorf("%q: strings give %v, pairs give %v", s, x, y)
		}
	}
}

func TestAddedTokenOptions(t *testing.T) {
	tok := func(content string, opts ...string) map[string]any {
		m := map[string]any{"content": content, "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": true}
		for _, o := range opts {
			m[o] = true
		}
		return m
	}
	tk := mustLoad(t, synth(t, nil, []map[string]any{
		tok("<a>"), tok("<ab>"), tok("[L]", "lstrip"), tok("[R]", "rstrip"), tok("cat", "single_word"),
		tok("café", "normalized"),
	}, nil))
	cases := []struct {
		text string
		want []string
	}{
		{"x<ab>y", []string{"x", "<ab>", "y"}},             // longest at the leftmost start
		{"<a><ab>", []string{"<a>", "<ab>"}},               // adjacent
		{"x  [L]y", []string{"x", "[L]", "y"}},             // lstrip takes the spaces before
		{"x[R]  y", []string{"x", "[R]", "y"}},             // rstrip takes the spaces after
		{"a cat b", []string{"a", "Ġ", "cat", "Ġ", "b"}},   // single word
		{"concat", []string{"c", "o", "n", "c", "a", "t"}}, // inside a word: not matched
		{"cafe\u0301!", []string{"café", "!"}},             // normalized: matched after NFC
	}
	for _, c := range cases {
		got := pieces(t, tk, tk.Encode(c.text))
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestSplitBehaviors(t *testing.T) {
	cases := []struct {
		behavior string
		invert   bool
		want     []string
	}{
		{"Isolated", false, []string{"a", "-", "b", "-", "-", "c"}},
		{"Removed", false, []string{"a", "b", "c"}},
		{"MergedWithPrevious", false, []string{"a-", "b-", "-", "c"}},
		{"MergedWithNext", false, []string{"a", "-b", "-", "-c"}},
		{"Contiguous", false, []string{"a", "-", "b", "--", "c"}},
		{"Removed", true, []string{"-", "-", "-"}},
	}
	for _, c := range cases {
		data := synth(t, nil, nil, func(d map[string]any) {
			d["pre_tokenizer"] = map[string]any{"type": "Sequence", "pretokenizers": []any{
				map[string]any{"type": "Split", "pattern": map[string]any{"String": "-"}, "behavior": c.behavior, "invert": c.invert},
				map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
			}}
			// A merge for every two-byte piece the cases produce, so each piece is one token.
			m := d["model"].(map[string]any)
			v := m["vocab"].(map[string]int)
			var ms []any
			for _, p := range []string{"a-", "b-", "-b", "-c", "--"} {
				v[p] = len(v)
				ms = append(ms, p[:1]+" "+p[1:])
			}
			m["merges"] = ms
		})
		tk := mustLoad(t, data)
		if got := pieces(t, tk, tk.Encode("a-b--c")); !slices.Equal(got, c.want) {
			t.Errorf("%s invert=%v: %q, want %q", c.behavior, c.invert, got, c.want)
		}
	}
}

func TestByteLevelRegexAndPrefix(t *testing.T) {
	data := synth(t, [][2]string{{"Ġ", "a"}}, nil, func(d map[string]any) {
		d["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true}
	})
	tk := mustLoad(t, data)
	// GPT-2 split with a space added in front: "Ġa" "Ġ" "Ġa".
	if got := pieces(t, tk, tk.Encode("a  a")); !slices.Equal(got, []string{"Ġa", "Ġ", "Ġa"}) {
		t.Errorf("got %q", got)
	}
}

func TestUnknownBytes(t *testing.T) {
	drop := func(d map[string]any) {
		v := d["model"].(map[string]any)["vocab"].(map[string]int)
		delete(v, "x")
		delete(v, "y")
	}
	tk := mustLoad(t, synth(t, nil, nil, drop))
	if got := pieces(t, tk, tk.Encode("axyb")); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("no unk_token: %q, want unknown bytes dropped", got)
	}
	for _, fuse := range []bool{false, true} {
		tk := mustLoad(t, synth(t, nil, nil, func(d map[string]any) {
			drop(d)
			m := d["model"].(map[string]any)
			m["vocab"].(map[string]int)["<unk>"] = 999
			m["unk_token"] = "<unk>"
			m["fuse_unk"] = fuse
		}))
		want := []string{"a", "<unk>", "<unk>", "b"}
		if fuse {
			want = []string{"a", "<unk>", "b"}
		}
		if got := pieces(t, tk, tk.Encode("axyb")); !slices.Equal(got, want) {
			t.Errorf("fuse_unk=%v: %q, want %q", fuse, got, want)
		}
	}
}

func TestIgnoreMerges(t *testing.T) {
	// "abc" is in the vocabulary, but the merges alone would give "ab" "c".
	tk := mustLoad(t, synth(t, [][2]string{{"a", "b"}}, nil, func(d map[string]any) {
		m := d["model"].(map[string]any)
		m["vocab"].(map[string]int)["abc"] = 500
		m["ignore_merges"] = true
	}))
	if got := pieces(t, tk, tk.Encode("abc abd")); !slices.Equal(got, []string{"abc", "Ġ", "ab", "d"}) {
		t.Errorf("got %q", got)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		data []byte
		path string // want in the error
		kind any
	}{
		{"syntax", []byte(`{"model": {`), "", &FormatError{}},
		{"type", []byte(`{"model": {"type": "BPE", "vocab": [1]}}`), "model.vocab", &FormatError{}},
		{"wordpiece", synth(t, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["type"] = "WordPiece" }),
			"model.type", &UnsupportedError{}},
		{"normalizer", synth(t, nil, nil, func(d map[string]any) { d["normalizer"] = map[string]any{"type": "Lowercase"} }),
			"normalizer", &UnsupportedError{}},
		{"nested normalizer", synth(t, nil, nil, func(d map[string]any) {
			d["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Strip"}}}
		}), "normalizer.normalizers[1]", &UnsupportedError{}},
		{"pre-tokenizer", synth(t, nil, nil, func(d map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0] = map[string]any{"type": "Whitespace"}
		}), "pre_tokenizer.pretokenizers[0]", &UnsupportedError{}},
		{"no byte level", synth(t, nil, nil, func(d map[string]any) { d["pre_tokenizer"] = nil }), "pre_tokenizer", &UnsupportedError{}},
		{"lookbehind", synth(t, nil, nil, func(d map[string]any) {
			d["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `(?<=a)b`}
		}), "pre_tokenizer.pretokenizers[0].pattern.Regex", &UnsupportedError{}},
		{"merge out of vocabulary", synth(t, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["merges"] = []any{"a zz"} }),
			"model.merges[0]", &FormatError{}},
		{"bad merge", synth(t, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["merges"] = []any{"abc"} }),
			"model.merges[0]", &FormatError{}},
		{"merge type", synth(t, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["merges"] = []any{7} }),
			"model.merges[0]", &FormatError{}},
		{"added without id", synth(t, nil, []map[string]any{{"content": "<x>", "id": nil}}, nil), "added_tokens[0].id", &FormatError{}},
		{"decoder", synth(t, nil, nil, func(d map[string]any) { d["decoder"] = map[string]any{"type": "WordPiece"} }),
			"decoder", &UnsupportedError{}},
		{"dropout", synth(t, nil, nil, func(d map[string]any) { d["model"].(map[string]any)["dropout"] = 0.1 }),
			"model.dropout", &UnsupportedError{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromJSON(c.data)
			if err == nil {
				t.Fatal("no error")
			}
			switch c.kind.(type) {
			case *FormatError:
				var fe *FormatError
				if !errors.As(err, &fe) || fe.Path != c.path {
					t.Fatalf("err = %v (%T), want a FormatError at %q", err, err, c.path)
				}
			case *UnsupportedError:
				var ue *UnsupportedError
				if !errors.As(err, &ue) || ue.Path != c.path {
					t.Fatalf("err = %v (%T), want an UnsupportedError at %q", err, err, c.path)
				}
			}
			if !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Errorf("message %q lacks the package prefix", err)
			}
		})
	}
}

// FuzzFromJSON loads arbitrary bytes: an error or a working tokenizer,
// never a panic.
func FuzzFromJSON(f *testing.F) {
	f.Add(synth(f, [][2]string{{"a", "b"}, {"Ġ", "Ġ"}}, []map[string]any{{"content": "<|x|>", "special": true}}, nil))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"ByteLevel"}}`))
	f.Add([]byte(`{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"]]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"\\s+"},"behavior":"Removed"}}`))
	f.Add([]byte(`{"added_tokens":[{"id":1,"content":"x"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tk, err := FromJSON(data)
		if err != nil {
			return
		}
		ids := tk.Encode("ab  a<|x|>b\n")
		tk.Decode(ids)
		tk.Decode([]int{-1, 0, 1 << 20})
	})
}

// FuzzPlainMerge: whenever the fast merge parser accepts an input,
// encoding/json reads the same pair from it.
func FuzzPlainMerge(f *testing.F) {
	for _, s := range []string{`"a b"`, `["a","b"]`, `[ "Ġ" , "t" ]`, `"a  b"`, `["a,b","c"]`, `"\u0120 a"`, `["a"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, r []byte) {
		if !json.Valid(r) {
			return // merges come out of a validated document
		}
		a, b, ok := plainMerge(r)
		if !ok {
			return
		}
		var s string
		if json.Unmarshal(r, &s) == nil {
			x, y, cut := strings.Cut(s, " ")
			if !cut || x != a || y != b {
				t.Fatalf("%s: plain %q %q, json %q", r, a, b, s)
			}
			return
		}
		var p [2]string
		if err := json.Unmarshal(r, &p); err != nil || p != [2]string{a, b} {
			t.Fatalf("%s: plain %q %q, json %q (%v)", r, a, b, p, err)
		}
	})
}
