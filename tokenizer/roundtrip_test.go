package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func TestEscape(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"<|box_end|>", "<¦box_end¦>"},
		{"a<|im_start|>b<|im_end|>c", "a<¦im_start¦>b<¦im_end¦>c"},
		{"<|A_1|><|b|>", "<¦A_1¦><¦b¦>"},
		{"<||>", "<||>"},
		{"<|a b|>", "<|a b|>"},
		{"<|a|b|>", "<|a|b|>"},
		{"<|<|x|>|>", "<|<¦x¦>|>"},
		{"<|é|>", "<|é|>"},
		{"<|x|", "<|x|"},
		{"<¦x¦>", "<¦x¦>"},
		{"<think>", "<think>"},
	}
	for _, c := range cases {
		if got := Escape(c.in); got != c.want {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEncodeEscaped(t *testing.T) {
	tk := qwen3(t)
	got := tk.EncodeEscaped("x<|box_end|>y")
	if slices.Contains(got, 151649) {
		t.Errorf("EncodeEscaped kept <|box_end|>: %v", got)
	}
	if d := tk.Decode(got); d != "x<¦box_end¦>y" {
		t.Errorf("Decode = %q", d)
	}
}

func TestDecode(t *testing.T) {
	tk := qwen3(t)
	for _, s := range []string{"hello world", "<|im_start|>user\n中文 👩\u200d💻<|im_end|>", "  \t\r\n", "<think>x</think>"} {
		if got := tk.Decode(tk.Encode(s)); got != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, got)
		}
	}
	// Half of a multi-byte character: one U+FFFD per maximal invalid subpart.
	ids := tk.Encode("中")
	if len(ids) != 1 {
		t.Fatalf("中 is %d tokens", len(ids))
	}
	e2, _ := tk.TokenID("ä") // byte E4
	b8, _ := tk.TokenID("¸") // byte B8
	x, _ := tk.TokenID("x")
	cases := []struct {
		ids  []int
		want string
	}{
		{[]int{e2, b8}, "\ufffd"},        // E4 B8: truncated, one subpart
		{[]int{e2, b8, x}, "\ufffdx"},    // then a valid byte
		{[]int{b8, b8}, "\ufffd\ufffd"},  // lone continuation bytes
		{[]int{x, -1, 1 << 30, x}, "xx"}, // unknown ids are skipped
	}
	for _, c := range cases {
		if got := tk.Decode(c.ids); got != c.want {
			t.Errorf("Decode(%v) = %q, want %q", c.ids, got, c.want)
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	tk := qwen3(t)
	// Each invalid byte reads as U+FFFD.
	for _, c := range []struct{ in, as string }{
		{"a\xffb", "a\ufffdb"},
		{"\xe4\xb8x", "\ufffd\ufffdx"},
		{"ok\xc3", "ok\ufffd"},
	} {
		if got, want := tk.Encode(c.in), tk.Encode(c.as); !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want Encode(%q) = %v", c.in, got, c.as, want)
		}
	}
}

// TestConcurrent encodes from many goroutines at once, with the word cache
// under contention, and checks every result.
func TestConcurrent(t *testing.T) {
	tk := qwen3(t)
	texts := corpus(t)[:400]
	want := make([][]int, len(texts))
	for i, s := range texts {
		want[i] = tk.Encode(s)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 300 {
				i := rng.IntN(len(texts))
				if got := tk.Encode(texts[i]); !slices.Equal(got, want[i]) {
					t.Errorf("goroutine %d, chunk %d differs", g, i)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestRoundTripRandom checks Decode(Encode(s)) == NFC(s) on random text
// built from a wide mix of characters.
func TestRoundTripRandom(t *testing.T) {
	tk := qwen3(t)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("aZ09 \t\n\r'’.,;(<|>)_\u00a0\u3000\u0085\u2028éñÅ\u0301\u0308中文日本한국ไทยب👩\u200d💻🇯🇵ſ")
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(40) {
			if rng.IntN(8) == 0 {
				b.WriteRune(rune(rng.IntN(0x30000)))
			} else {
				b.WriteRune(alphabet[rng.IntN(len(alphabet))])
			}
		}
		s := strings.ToValidUTF8(b.String(), "")
		if hasAdded(tk, s) {
			continue
		}
		if got, want := tk.Decode(tk.Encode(s)), norm.NFC.String(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	}
}

func hasAdded(tk *Tokenizer, s string) bool {
	for c := range tk.added {
		if strings.Contains(s, c) {
			return true
		}
	}
	return false
}

// FuzzEncode: no panics; for valid UTF-8 without added tokens,
// Decode(Encode(s)) == NFC(s); the fast path equals the general one.
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"  hello", "DON'T we'LL", "<|im_start|>x<|im_end|>", "a\xffb", "\u3000\u00a0 x",
		"e\u0301", "👩\u200d👩\u200d👧", "12345", "\r\n\r\n  ", "中文"} {
		f.Add(s)
	}
	tk := qwen3(f)
	slow := *tk
	re, err := compileOniguruma(patternQwen2)
	if err != nil {
		f.Fatal(err)
	}
	slow.fast, slow.steps = nil, []step{regexStep{re: re}}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s)
		if want := slow.Encode(s); !slices.Equal(ids, want) {
			t.Fatalf("%q: scanner %v, regexp %v", s, ids, want)
		}
		if !utf8.ValidString(s) || hasAdded(tk, s) {
			return
		}
		if got, want := tk.Decode(ids), norm.NFC.String(s); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	})
}
