package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// edgeAlphabet holds pieces that exercise every stage's boundaries: letters
// of several scripts, combining marks and jamo that NFC composes, digits,
// contractions, spaces of every kind, newlines, punctuation, added tokens,
// invalid bytes and U+FFFD itself.
var edgeAlphabet = []string{
	"a", "Z", "é", "e", "\u0301", "\u0308", "ſ", "K", "ß", "中", "文", "に", "ᄀ", "ᅡ", "ᆨ", "한", "ا", "ب", "\u064b",
	"0", "7", "٣", "½", "Ⅻ", "'", "'s", "'LL", "'re", "'d", "’",
	" ", "  ", "\t", "\u00a0", "\u3000", "\u2000", "\u0085", "\r", "\n", "\r\n", "\v",
	".", ",", "!", "?", "-", "\"", "(", ")", "…", "—", "😀", "👩\u200d👩", "\u200d", "\ufeff", "$", "<", ">", "|",
	"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|box_start|>",
	"\xff", "\xe2\x82", "\xc3", "\ufffd", "x", "hello", "world", "DON'T",
	"<|", "|>", "<|box_end|>", "<|a1_b|>", "<|state|>", "¦", "_", "a1",
}

func randomEdgeText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(edgeAlphabet[rng.IntN(len(edgeAlphabet))])
	}
	return b.String()
}

// checkCuts encodes s in two pieces at every position cutOK accepts and
// requires the ids of the whole.
func checkCuts(t *testing.T, tk *Tokenizer, s string) (cuts int) {
	t.Helper()
	whole := tk.Encode(s)
	for c := 1; c < len(s); c++ {
		if !tk.cutOK(s, c) {
			continue
		}
		cuts++
		got := tk.AppendEncode(tk.Encode(s[:c]), s[c:])
		if !slices.Equal(got, whole) {
			t.Fatalf("cut at %d of %q | %q:\n got %v\nwant %v", c, s[:c], s[c:], got, whole)
		}
	}
	return cuts
}

// TestHardeningCutsExact: every place the chunked encoder may cut gives the
// ids of the whole text, on random edge-case text and on corpus text, with
// Qwen3's and Qwen3.5's split patterns.
func TestHardeningCutsExact(t *testing.T) {
	for _, tk := range []struct {
		name string
		tok  *Tokenizer
	}{{"qwen3", qwen3(t)}, {"qwen35split", qwen35Split(t)}} {
		t.Run(tk.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			random, fromCorpus := 0, 0
			for range 600 {
				random += checkCuts(t, tk.tok, randomEdgeText(rng, 10+rng.IntN(60)))
			}
			texts := corpus(t)
			for range 300 {
				s := texts[rng.IntN(len(texts))]
				if len(s) > 200 {
					lo := rng.IntN(len(s) - 200)
					s = s[lo : lo+200]
				}
				fromCorpus += checkCuts(t, tk.tok, s)
			}
			if random < 500 || fromCorpus < 1000 {
				t.Errorf("only %d + %d cuts checked", random, fromCorpus)
			}
			t.Logf("%d cuts checked in random text, %d in corpus text", random, fromCorpus)
		})
	}
}

// TestHardeningEncodeLimit: EncodeLimit returns exactly Encode's first ids
// and says whether there were more, at every limit around the chunk and
// pre-token boundaries, with the smallest chunks (a cut at every allowed
// place) and the real ones.
func TestHardeningEncodeLimit(t *testing.T) {
	tk := qwen3(t)
	rng := rand.New(rand.NewPCG(5, 6))
	texts := []string{"", "a", "hello world", strings.Repeat("a", 100), strings.Repeat(" ", 70), "<|im_start|>x"}
	for range 40 {
		texts = append(texts, randomEdgeText(rng, 50+rng.IntN(400)))
	}
	c := corpus(t)
	texts = append(texts, strings.Join(c[:min(len(c), 200)], "\n"))
	for _, s := range texts {
		whole := tk.Encode(s)
		if n := tk.Count(s); n != len(whole) || tk.count(s, 1, false) != len(whole) {
			t.Fatalf("Count(%.40q) = %d, %d; Encode gives %d ids", s, n, tk.count(s, 1, false), len(whole))
		}
		escaped := tk.EncodeEscaped(s)
		if n := tk.CountEscaped(s); n != len(escaped) || tk.count(s, 1, true) != len(escaped) {
			t.Fatalf("CountEscaped(%.40q) = %d, %d; EncodeEscaped gives %d ids", s, n, tk.count(s, 1, true), len(escaped))
		}
		limits := []int{0, 1, 2, len(whole) - 1, len(whole), len(whole) + 1, rng.IntN(len(whole) + 1)}
		for _, max := range limits {
			if max < 0 {
				continue
			}
			for _, chunk := range []int{1, 7, 64, chunkBytes} {
				ids, trunc := tk.encodeLimit(s, max, chunk, false)
				want := whole[:min(max, len(whole))]
				if !slices.Equal(ids, want) || trunc != (len(whole) > max) {
					t.Fatalf("encodeLimit(%.60q, %d, chunk %d) = %d ids (truncated %v), want %d (%v)",
						s, max, chunk, len(ids), trunc, len(want), len(whole) > max)
				}
				ids, trunc = tk.encodeLimit(s, max, chunk, true)
				want = escaped[:min(max, len(escaped))]
				if !slices.Equal(ids, want) || trunc != (len(escaped) > max) {
					t.Fatalf("escaped encodeLimit(%.60q, %d, chunk %d) = %d ids (truncated %v), want %d (%v)",
						s, max, chunk, len(ids), trunc, len(want), len(escaped) > max)
				}
			}
		}
	}
}

// TestHardeningEncodeLimitMemory: stopping at 65,536 tokens of a 28 MiB text
// allocates memory for the limit, not for the text, and takes milliseconds;
// Count walks the whole text with little memory.
func TestHardeningEncodeLimitMemory(t *testing.T) {
	tk := qwen3(t)
	c := corpus(t)
	var b strings.Builder
	for i := 0; b.Len() < 28<<20; i++ {
		b.WriteString(c[i%len(c)])
		b.WriteByte('\n')
	}
	text := b.String()
	measure := func(f func()) (uint64, time.Duration) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		f()
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc, d
	}
	var ids []int
	var trunc bool
	alloc, d := measure(func() { ids, trunc = tk.EncodeLimit(text, 65536) })
	if !trunc || len(ids) != 65536 {
		t.Fatalf("EncodeLimit: %d ids, truncated %v", len(ids), trunc)
	}
	if want := tk.Encode(text[:400_000]); !slices.Equal(ids, want[:65536]) {
		t.Fatal("EncodeLimit's ids are not Encode's")
	}
	t.Logf("EncodeLimit(28 MiB, 65536): %d KiB allocated in %v", alloc>>10, d)
	if alloc > 8<<20 {
		t.Errorf("EncodeLimit allocated %d bytes", alloc)
	}
	if testing.Short() {
		return
	}
	var n int
	alloc, d = measure(func() { n = tk.Count(text) })
	t.Logf("Count(28 MiB) = %d: %d KiB allocated in %v", n, alloc>>10, d)
	if alloc > 64<<20 {
		t.Errorf("Count allocated %d bytes", alloc)
	}
}

// A state is read up to Kev's limit and no further: the ids are exactly the
// first ones of EncodeEscaped, and truncated says there were more.
func ExampleTokenizer_EncodeEscapedLimit() {
	tk, err := FromJSON([]byte(exampleTokenizer))
	if err != nil {
		fmt.Println(err)
		return
	}
	ids, truncated := tk.EncodeEscapedLimit("ab ab ab ab", 3)
	fmt.Println(ids, truncated, tk.CountEscaped("ab ab ab ab"))
	// Output: [2 3 3] true 4
}

// exampleTokenizer is a byte-level BPE with Qwen's split and NFC: "ab" and
// " ab" are single tokens.
const exampleTokenizer = `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġab": 3, "Ġ": 4, "Ġa": 5},
 "merges": ["Ġ a", "Ġa b", "a b"]},
 "normalizer": {"type": "NFC"},
 "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
  {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
  {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
 "decoder": {"type": "ByteLevel"}}`

// FuzzEncodeLimit: every cut the chunked encoder may make gives the ids of
// the whole, and EncodeLimit and EncodeEscapedLimit at any limit are
// prefixes of Encode and EncodeEscaped.
func FuzzEncodeLimit(f *testing.F) {
	for _, s := range []string{"hello world", "\t…'s\xc3$̈Ⅻ\xe2\x82( \u0085\r\n.\u3000DON'T½", "a\u0301 b'LL 12.5",
		"x<|im_start|>y z", "中文，日本語。", "  \n\n  x", "é\u0308!  ", "\xff\xfe a", "a1 <|box_end|> b_2 |> <|"} {
		f.Add(s, uint16(3))
	}
	tk := qwen3(f)
	f.Fuzz(func(t *testing.T, s string, max uint16) {
		if len(s) > 512 {
			return
		}
		checkCuts(t, tk, s)
		whole := tk.Encode(s)
		ids, trunc := tk.encodeLimit(s, int(max), 1, false)
		if !slices.Equal(ids, whole[:min(int(max), len(whole))]) || trunc != (len(whole) > int(max)) {
			t.Fatalf("encodeLimit(%q, %d) = %v, %v; Encode = %v", s, max, ids, trunc, whole)
		}
		escaped := tk.EncodeEscaped(s)
		ids, trunc = tk.encodeLimit(s, int(max), 1, true)
		if !slices.Equal(ids, escaped[:min(int(max), len(escaped))]) || trunc != (len(escaped) > int(max)) {
			t.Fatalf("escaped encodeLimit(%q, %d) = %v, %v; EncodeEscaped = %v", s, max, ids, trunc, escaped)
		}
	})
}
