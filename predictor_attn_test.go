package kev

import (
	"testing"
)

// TestAttentionOnlyPrefixMin loads the Qwen3 and Qwen2.5 fixtures: their prefix cache starts at Kev's
// prefix_min_tokens for attention-only bases (384) unless the options say otherwise, while a hybrid base caches
// every state.
func TestAttentionOnlyPrefixMin(t *testing.T) {
	want := map[string]int{"tiny-a": 0, "tiny-b": 0, "tiny-qwen3": attentionOnlyPrefixMinTokens, "tiny-qwen2": attentionOnlyPrefixMinTokens}
	seen := 0
	for _, s := range goldenSets(t) {
		w, ok := want[s.name]
		if !ok {
			continue
		}
		seen++
		if got := loadGolden(t, s, Options{}).Stats().PrefixCache.MinStateTokens; got != w {
			t.Errorf("%s: min_state_tokens %d, want %d", s.name, got, w)
		}
		if got := loadGolden(t, s, Options{PrefixMinTokens: 7}).Stats().PrefixCache.MinStateTokens; got != 7 {
			t.Errorf("%s with PrefixMinTokens 7: min_state_tokens %d", s.name, got)
		}
	}
	if seen != len(want) {
		t.Skipf("%d of %d fixtures present", seen, len(want))
	}
}
