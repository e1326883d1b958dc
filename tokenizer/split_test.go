package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// scanSplit and regexSplit return the pieces of s under one of Qwen's
// patterns, by the scanner and by Go's regexp with the lookahead emulated.
func scanSplit(q *qwenScanner, s string) []string {
	var out []string
	scanStep{q}.split(s, func(p string) { out = append(out, p) })
	return out
}

func regexSplit(t testing.TB, pattern, s string) []string {
	t.Helper()
	re, err := compileOniguruma(pattern)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	regexStep{re: re}.split(s, func(p string) { out = append(out, p) })
	return out
}

func TestSplitCases(t *testing.T) {
	q2, q35 := newQwenScanner(false), newQwenScanner(true)
	cases := []struct {
		in     string
		qwen2  []string
		qwen35 []string // nil: same as qwen2
	}{
		{"  hello", []string{" ", " hello"}, nil},
		{"hello  ", []string{"hello", "  "}, nil},
		{"a   b", []string{"a", "  ", " b"}, nil},
		{"a \n\n b", []string{"a", " \n\n", " b"}, nil},
		{"x\t\ty", []string{"x", "\t", "\ty"}, nil},
		{"DON'T we'LL", []string{"DON", "'T", " we", "'LL"}, nil},
		{"'ſ 're 'rE", []string{"'ſ", " '", "re", " '", "rE"}, nil},
		{"x's's", []string{"x", "'s", "'s"}, nil},
		{"2026", []string{"2", "0", "2", "6"}, nil},
		{"();\n", []string{"();\n"}, nil},
		{" (hello)", []string{" (", "hello", ")"}, nil},
		{"(hello", []string{"(hello"}, nil},
		{"a\u3000b", []string{"a", "\u3000b"}, nil},
		{"e\u0301t\u0301", []string{"e", "\u0301t", "\u0301"}, []string{"e\u0301t\u0301"}},
		{" \u0301x", []string{" \u0301", "x"}, []string{" \u0301x"}},
		{"hi\r\n\r\n", []string{"hi", "\r\n\r\n"}, nil},
		{"\u00a0\u00a0x", []string{"\u00a0", "\u00a0x"}, nil},
		{"a\u0085b", []string{"a", "\u0085b"}, nil},
		{"  ", []string{"  "}, nil},
		{"", nil, nil},
	}
	for _, c := range cases {
		want35 := c.qwen35
		if want35 == nil {
			want35 = c.qwen2
		}
		if got := scanSplit(q2, c.in); !slices.Equal(got, c.qwen2) {
			t.Errorf("Qwen2 scan %q = %q, want %q", c.in, got, c.qwen2)
		}
		if got := regexSplit(t, patternQwen2, c.in); !slices.Equal(got, c.qwen2) {
			t.Errorf("Qwen2 regexp %q = %q, want %q", c.in, got, c.qwen2)
		}
		if got := scanSplit(q35, c.in); !slices.Equal(got, want35) {
			t.Errorf("Qwen3.5 scan %q = %q, want %q", c.in, got, want35)
		}
		if got := regexSplit(t, patternQwen35, c.in); !slices.Equal(got, want35) {
			t.Errorf("Qwen3.5 regexp %q = %q, want %q", c.in, got, want35)
		}
	}
}

// TestScannerMatchesRegexp runs both split implementations over the corpus.
func TestScannerMatchesRegexp(t *testing.T) {
	texts := corpus(t)
	for _, p := range []struct {
		pattern string
		marks   bool
	}{{patternQwen2, false}, {patternQwen35, true}} {
		q := newQwenScanner(p.marks)
		re, err := compileOniguruma(p.pattern)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for _, s := range texts {
			var want []string
			regexStep{re: re}.split(s, func(x string) { want = append(want, x) })
			if got := scanSplit(q, s); !slices.Equal(got, want) && bad < 5 {
				bad++
				t.Errorf("marks=%v %q:\n scan %q\n  re  %q", p.marks, s, got, want)
			}
		}
	}
}

// FuzzScannerMatchesRegexp checks the scanner against the regexp on
// arbitrary text.
func FuzzScannerMatchesRegexp(f *testing.F) {
	for _, s := range []string{"  hello", "a \n\n b", "DON'T", "'ſ", "x\u3000\u00a0 y", "e\u0301\u0301",
		" ();\r\n\r\n", "12 34", "\u0085\u2028 ", "<|im_start|>", "中文 日本語", "👩\u200d💻 ok"} {
		f.Add(s)
	}
	q2, q35 := newQwenScanner(false), newQwenScanner(true)
	re2, _ := compileOniguruma(patternQwen2)
	re35, _ := compileOniguruma(patternQwen35)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			s = replaceInvalid(s)
		}
		for _, c := range []struct {
			q  *qwenScanner
			re *regexSplitter
		}{{q2, re2}, {q35, re35}} {
			var want []string
			regexStep{re: c.re}.split(s, func(x string) { want = append(want, x) })
			got := scanSplit(c.q, s)
			if !slices.Equal(got, want) {
				t.Fatalf("%q:\n scan %q\n  re  %q", s, got, want)
			}
			if strings.Join(got, "") != s {
				t.Fatalf("%q: pieces do not tile the text", s)
			}
		}
	})
}
