package tokenizer

import (
	"slices"
	"testing"
)

func TestQwen3Basics(t *testing.T) {
	tk := qwen3(t)
	if got := tk.VocabSize(); got != 151669 {
		t.Errorf("VocabSize = %d, want 151669", got)
	}
	if got := tk.PadID(); got != 151643 {
		t.Errorf("PadID = %d, want 151643 (<|endoftext|>)", got)
	}
	for tok, want := range map[string]int{
		"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
		"<|box_start|>": 151648, "<|box_end|>": 151649, "<|fim_prefix|>": 151659,
		"<|fim_middle|>": 151660, "<|fim_suffix|>": 151661, "<think>": 151667, "Ġ": 220,
	} {
		if got, ok := tk.TokenID(tok); !ok || got != want {
			t.Errorf("TokenID(%q) = %d, %v, want %d", tok, got, ok, want)
		}
	}
	if _, ok := tk.TokenID("<|no_such|>"); ok {
		t.Error("TokenID of an unknown token reported ok")
	}
}

// Hand-checked cases: each pins one rule of the pipeline.
func TestQwen3Cases(t *testing.T) {
	tk := qwen3(t)
	id := func(s string) int {
		v, ok := tk.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return v
	}
	cases := []struct {
		name, text string
		want       []int
	}{
		{"space before word", "  hello", []int{220, 23811}},
		{"digits one per token", "2026", []int{id("2"), id("0"), id("2"), id("6")}},
		{"seven spaces one token", "       ", []int{id("ĠĠĠĠĠĠĠ")}},
		{"spaces then word", "       x", []int{id("ĠĠĠĠĠĠ"), id("Ġx")}},
		{"special tokens in text", "x <|box_start|>(10,20)<|box_end|>",
			[]int{id("x"), id("Ġ"), 151648, id("("), id("1"), id("0"), id(","), id("2"), id("0"), id(")"), 151649}},
		{"adjacent specials", "<|im_end|><|im_start|>", []int{151645, 151644}},
		{"non-special added token", "<think>", []int{151667}},
		{"contraction upper", "DON'T", []int{id("DON"), id("'T")}},
		{"newline run", "a\n\n\nb", []int{id("a"), id("ĊĊĊ"), id("b")}},
		{"empty", "", []int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := tk.Encode(c.text)
			if !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
			}
		})
	}
}
