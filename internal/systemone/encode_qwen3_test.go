package systemone

import (
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/kevgo/kev/tokenizer"
)

var (
	qwen3Once sync.Once
	qwen3Tok  *tokenizer.Tokenizer
	qwen3Err  error
)

// qwen3 returns the real Qwen3 tokenizer (the Qwen2.5/Qwen3 vocabulary Kev's encoding tests use).
func qwen3(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	qwen3Once.Do(func() {
		f, err := os.Open("../../tokenizer/testdata/qwen3-tokenizer.json.zst")
		if err != nil {
			qwen3Err = err
			return
		}
		defer f.Close()
		d, err := zstd.NewReader(f)
		if err != nil {
			qwen3Err = err
			return
		}
		defer d.Close()
		data, err := io.ReadAll(d)
		if err != nil {
			qwen3Err = err
			return
		}
		cfg, err := os.ReadFile("../../tokenizer/testdata/qwen3-tokenizer_config.json")
		if err != nil {
			qwen3Err = err
			return
		}
		qwen3Tok, qwen3Err = tokenizer.FromJSONConfig(data, cfg)
	})
	if qwen3Err != nil {
		t.Fatal(qwen3Err)
	}
	return qwen3Tok
}

func TestQwen3Delimiters(t *testing.T) {
	d, err := LookupDelimiters(qwen3(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Delimiters{State: 151659, Q: 151660, Opt: 151648, OptEnd: 151649, Decide: 151661}); d != want {
		t.Fatalf("delimiters %+v, want %+v", d, want)
	}
}

func TestQwen3HostileText(t *testing.T) {
	tok := qwen3(t)
	d, _ := LookupDelimiters(tok)
	delims := map[int]bool{d.State: true, d.Q: true, d.Opt: true, d.OptEnd: true, d.Decide: true}
	for _, id := range UserTokens(tok, hostile) {
		if delims[id] || tok.IsSpecial(id) {
			t.Fatalf("user tokens of the hostile text contain special id %d", id)
		}
	}
	if got, want := UserTokens(tok, "hello world"), tok.Encode("hello world"); !reflect.DeepEqual(got, want) {
		t.Fatalf("hello world: %v != %v", got, want)
	}
	enc, err := Encode(tok, record(t, NewRequest(hostile, Choice("q", hostile, Opt(hostile, ""), Opt("b", "")))), EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	specials := 0
	for _, id := range enc.IDs {
		if tok.IsSpecial(id) || delims[id] {
			specials++
		}
	}
	if len(enc.Opts[0]) != 2 || specials != 7 {
		t.Fatalf("opts %v, %d special ids, want 2 and 7", enc.Opts, specials)
	}
}

func TestQwen3Layout(t *testing.T) {
	tok := qwen3(t)
	req := NewRequest("s t a t e", Choice("q1", "", OptionNames("a", "b")...), Choice("q2", "", OptionNames("a", "b", "c")...))
	enc, err := Encode(tok, record(t, req), EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := enc.StateLen
	if s != 1+len(tok.Encode("s t a t e")) {
		t.Fatalf("state length %d", s)
	}
	for k, r := range enc.Rows() {
		if r.Pos[0] != s {
			t.Errorf("branch %d starts at position %d, want %d", k, r.Pos[0], s)
		}
		if enc.IDs[enc.Decide[k]] != 151661 {
			t.Errorf("decide %d is id %d", k, enc.IDs[enc.Decide[k]])
		}
	}
	if len(enc.Opts[0]) != 2 || len(enc.Opts[1]) != 3 {
		t.Fatalf("opts %v", enc.Opts)
	}
}

// TestEscapeAgreesWithTokenizer checks that kev's escaping (a regular expression, as Kev's) and the tokenizer
// package's (a scanner) rewrite the same texts the same way.
func TestEscapeAgreesWithTokenizer(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"<", "|", ">", "<|", "|>", "a", "Z", "_", "9", "é", " ", "¦", "box_end"}
	for range 20000 {
		var sb strings.Builder
		for range rng.IntN(12) {
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := sb.String()
		if a, b := Escape(s), tokenizer.Escape(s); a != b {
			t.Fatalf("Escape(%q): kev %q, tokenizer %q", s, a, b)
		}
	}
}
