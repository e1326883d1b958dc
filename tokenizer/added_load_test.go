package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// withAddedTokens returns the tiny Qwen3 fixture's tokenizer.json with n more
// added tokens "<extra_i>", ids from base on.
func withAddedTokens(t testing.TB, n, base int) []byte {
	t.Helper()
	data, err := os.ReadFile("../testdata/golden/tiny-qwen3/base/tokenizer.json")
	if err != nil {
		t.Skip(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	var added []map[string]any
	if err := json.Unmarshal(top["added_tokens"], &added); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		added = append(added, map[string]any{"id": base + i, "content": fmt.Sprintf("<extra_%d>", i),
			"single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true})
	}
	top["added_tokens"], _ = json.Marshal(added)
	out, _ := json.Marshal(top)
	return out
}

// TestAddedTokensLoadLinear (tokenizer.json added tokens): loading grows the
// id table once, not a token at a time: 100,000 added tokens allocate a
// small multiple of what 25,000 do (the old growth copied the table once a
// token, 80 GB for 100,000), and every one of them encodes to its id.
func TestAddedTokensLoadLinear(t *testing.T) {
	alloc := func(n int) (uint64, *Tokenizer) {
		data := withAddedTokens(t, n, 1000)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tk, err := FromJSON(data)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		return after.TotalAlloc - before.TotalAlloc, tk
	}
	small, _ := alloc(25_000)
	large, tk := alloc(100_000)
	t.Logf("25,000 added tokens: %d KiB allocated; 100,000: %d KiB", small>>10, large>>10)
	if large > 6*small || large > 512<<20 {
		t.Errorf("100,000 added tokens allocated %d bytes, 25,000 %d: not linear", large, small)
	}
	if tk.VocabSize() != 101_000 {
		t.Errorf("VocabSize = %d, want 101000", tk.VocabSize())
	}
	for _, i := range []int{0, 4_321, 99_999} {
		if ids := tk.Encode(fmt.Sprintf("a<extra_%d>b", i)); len(ids) != 3 || ids[1] != 1000+i {
			t.Errorf("<extra_%d> encodes to %v", i, ids)
		}
	}
}

// TestCheckIDs: a tokenizer with an id past the model's embedding table is
// refused by CheckIDs with the token named; one within it passes.
func TestCheckIDs(t *testing.T) {
	tk, err := FromJSON(withAddedTokens(t, 3, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.CheckIDs(1003); err != nil {
		t.Fatalf("CheckIDs(1003): %v", err)
	}
	err = tk.CheckIDs(1002)
	var re *IDRangeError
	if !errors.As(err, &re) || re.ID != 1002 || re.Limit != 1002 ||
		!strings.Contains(err.Error(), `token "<extra_2>" has id 1002, past the model's 1002-entry embedding table`) {
		t.Fatalf("CheckIDs(1002) = %v", err)
	}
}

// BenchmarkAddedTokensLoad loads the tiny fixture with 25,000 and 100,000
// more added tokens (3.6 s and 45.3 s before the table was sized once).
func BenchmarkAddedTokensLoad(b *testing.B) {
	for _, n := range []int{25_000, 100_000} {
		data := withAddedTokens(b, n, 1000)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := FromJSON(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
