package systemone

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

// plainTokenizer hides a tokenizer's limit methods, so Encode takes the path that tokenises whole texts: the
// reference the limited path must agree with.
type plainTokenizer struct{ Tokenizer }

// randomText returns n bytes or so of words, digits, punctuation, accents, delimiter-shaped tokens and newlines.
func randomText(rng *rand.Rand, n int) string {
	words := []string{"the", "state", "of", "Kev", " ", "  ", "\n", "12345", "é", "naïve", "<|box_end|>", "<|fim_prefix|>",
		"<think>", "—", "日本語", ",", ".", "!!", "\t", "x_y", "<¦q¦>", "👍🏽"}
	var sb strings.Builder
	for sb.Len() < n {
		sb.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(3) == 0 {
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}

// TestHardeningEncodeLimitAgrees: the limited encoding (state and branches tokenised only up to their limits, the
// rest counted) gives exactly the encoding, or exactly the error message, of tokenising everything, in strict and
// truncate mode, at limits on both sides of the texts' lengths.
func TestHardeningEncodeLimitAgrees(t *testing.T) {
	tok := qwen3(t)
	rng := rand.New(rand.NewPCG(13, 4))
	for i := range 60 {
		state := randomText(rng, rng.IntN(40000))
		instr := randomText(rng, rng.IntN(3000))
		opt := randomText(rng, rng.IntN(3000))
		rec := &Record{State: state, Questions: []RecordQuestion{
			{ID: "a", Type: TypeChoice, Instr: instr, Options: []string{opt, "no"}, Keys: []string{"x", "y"}},
			{ID: "b", Type: TypeChoice, Instr: "short", Options: []string{"yes", opt}, Keys: []string{"x", "y"}},
		}}
		n := len(UserTokens(tok, state)) + 1
		opts := EncodeOptions{Truncate: i%2 == 1, MaxState: max(2, n+rng.IntN(400)-200), MaxRow: max(2, n+rng.IntN(3000)-500)}
		got, gerr := Encode(tok, rec, opts)
		want, werr := Encode(plainTokenizer{tok}, rec, opts)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("case %d %+v: limited %v, whole %v", i, opts, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d %+v: encodings differ (state %d/%d tokens)", i, opts, got.StateLen, got.StateTokens)
		}
	}
}

// TestHardeningStateOverLimitBoundedMemory (finding 4): a state far over the limit used to be tokenised whole
// before the check (a 28.6 MiB state, 18 M tokens, cost ~0.5 GB for its 422). Now the 422 carries Kev's exact
// message and count while the encoder holds no more than the limit's ids: the heap's peak while encoding an
// 8 MiB state stays far under what its ids alone would take (8 bytes each).
func TestHardeningStateOverLimitBoundedMemory(t *testing.T) {
	tok := qwen3(t)
	rng := rand.New(rand.NewPCG(5, 6))
	chunk := randomText(rng, 1<<16)
	state := strings.Repeat(chunk, 128) // 8 MiB
	rec := &Record{State: state, Questions: []RecordQuestion{{ID: "q", Type: TypeNoul, Options: []string{"true", "false"}, Keys: []string{"true", "false"}}}}
	wantTokens := 128*len(UserTokens(tok, chunk)) + 1 // the chunk ends at a cut: its ids repeat exactly

	// Collect garbage early, so that the heap's peak is what the encoder holds, not what it has dropped.
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	growth := func(tok Tokenizer) (uint64, time.Duration, error) {
		var before runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		peak := watchHeap()
		start := time.Now()
		_, err := Encode(tok, rec, EncodeOptions{})
		took := time.Since(start)
		return peak() - before.HeapAlloc, took, err
	}
	whole, _, _ := growth(plainTokenizer{tok})
	high, took, err := growth(tok)
	var se *StateTooLongError
	if !errors.As(err, &se) || se.Tokens != wantTokens || se.Limit != MaxStateTokens {
		t.Fatalf("err %v, want a StateTooLongError for %d tokens", err, wantTokens)
	}
	want := "state is " + commaInt(wantTokens) + " tokens, over the 65,536-token limit (the <state> token included): shorten the document or split it across requests; or start the server with KEV_TRUNCATE_STATES=1 to read only its first 65,536 tokens (responses then say truncated: true)"
	if se.Detail() != want {
		t.Errorf("detail %q\nwant   %q", se.Detail(), want)
	}
	idsBytes := uint64(wantTokens) * 8
	t.Logf("%d-byte state, %d tokens: heap peak +%d KiB while encoding, %v (tokenised whole: +%d KiB; its ids alone: %d KiB)",
		len(state), wantTokens, high>>10, took, whole>>10, idsBytes>>10)
	if high > idsBytes/4 {
		t.Errorf("heap grew %d KiB while encoding, want under %d KiB", high>>10, idsBytes/4>>10)
	}
}

// watchHeap samples the live heap until the returned func is called, which returns the highest sample.
func watchHeap() func() uint64 {
	stop := make(chan struct{})
	done := make(chan uint64)
	go func() {
		var hi uint64
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			hi = max(hi, m.HeapAlloc)
			select {
			case <-stop:
				done <- hi
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(stop); return <-done }
}

// FuzzEncodeLimit checks that the limited encoding agrees with tokenising everything for any texts and limits.
func FuzzEncodeLimit(f *testing.F) {
	f.Add("a state", "an instruction", "an option", uint16(3), uint16(8), false)
	f.Add(strings.Repeat("word ", 50), "<|box_end|> q", "opt", uint16(20), uint16(40), true)
	f.Add("naïve café 12345 !!", "", "日本語👍🏽", uint16(1), uint16(2), false)
	f.Add(strings.Repeat("x", 300)+"<|fim_prefix|>", "i", "o", uint16(64), uint16(65), true)
	f.Fuzz(func(t *testing.T, state, instr, opt string, maxState, maxRow uint16, truncate bool) {
		tok := qwen3(t)
		rec := &Record{State: state, Questions: []RecordQuestion{
			{ID: "a", Type: TypeChoice, Instr: instr, Options: []string{opt, opt + opt}, Keys: []string{"x", "y"}},
		}}
		opts := EncodeOptions{Truncate: truncate, MaxState: int(maxState%512) + 1, MaxRow: int(maxRow%1024) + 1}
		got, gerr := Encode(tok, rec, opts)
		want, werr := Encode(plainTokenizer{tok}, rec, opts)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("%+v: limited %v, whole %v", opts, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v: encodings differ", opts)
		}
	})
}
