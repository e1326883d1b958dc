package tokenizer

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// corpus returns the texts of testdata/qwen3-corpus.jsonl.zst.
func corpus(t testing.TB) []string {
	t.Helper()
	var texts []string
	for i, line := range jsonLines(t, readZstd(t, "testdata/qwen3-corpus.jsonl.zst")) {
		var c struct {
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(line, &c); err != nil || c.Text == nil {
			t.Fatalf("corpus line %d: %v", i+1, err)
		}
		texts = append(texts, *c.Text)
	}
	return texts
}

func jsonLines(t testing.TB, b []byte) [][]byte {
	t.Helper()
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<26)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) > 0 {
			lines = append(lines, slices.Clone(sc.Bytes()))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// readIDs reads a JSON lines file of {"ids": [...]}, zstd or gzip by name.
func readIDs(t testing.TB, path string) [][]int {
	t.Helper()
	var b []byte
	if strings.HasSuffix(path, ".gz") {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		z, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if b, err = io.ReadAll(z); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	} else {
		b = readZstd(t, path)
	}
	var out [][]int
	for i, line := range jsonLines(t, b) {
		var r struct {
			IDs []int `json:"ids"`
		}
		if err := json.Unmarshal(line, &r); err != nil || r.IDs == nil {
			t.Fatalf("%s line %d: %v", path, i+1, err)
		}
		out = append(out, r.IDs)
	}
	return out
}

// compareCorpus encodes the corpus and returns the indexes of the chunks
// whose ids differ from want.
func compareCorpus(t *testing.T, tk *Tokenizer, texts []string, want [][]int) (diff []int, tokens int) {
	if len(want) != len(texts) {
		t.Fatalf("%d id lists for %d corpus chunks", len(want), len(texts))
	}
	for i, text := range texts {
		got := tk.Encode(text)
		tokens += len(want[i])
		if !slices.Equal(got, want[i]) {
			diff = append(diff, i)
		}
	}
	return diff, tokens
}

// TestTransformersJS compares with transformers.js (@lenml/tokenizers
// 3.7.2) on the corpus, with Qwen3's split pattern and with Qwen3.5's.
// JavaScript's \s lacks U+0085 (NEXT LINE), which Oniguruma's \s, and so
// Hugging Face's, includes: chunks holding U+0085 may differ; every other
// chunk must match.
func TestTransformersJS(t *testing.T) {
	t.Run("qwen3", func(t *testing.T) {
		checkTransformersJS(t, qwen3(t), "testdata/qwen3-tjs-ids.jsonl.zst")
	})
	t.Run("qwen35split", func(t *testing.T) {
		checkTransformersJS(t, qwen35Split(t), "testdata/qwen3-tjs-ids-qwen35split.jsonl.zst")
	})
}

func checkTransformersJS(t *testing.T, tk *Tokenizer, path string) {
	texts := corpus(t)
	want := readIDs(t, path)
	diff, tokens := compareCorpus(t, tk, texts, want)
	nel := 0
	for _, i := range diff {
		if strings.ContainsRune(texts[i], 0x85) {
			nel++
			continue
		}
		t.Errorf("chunk %d %q:\n got %v\nwant %v", i, texts[i], tk.Encode(texts[i]), want[i])
	}
	t.Logf("%d chunks, %d tokens; %d differ, all with U+0085", len(texts), tokens, nel)
}

// qwen35Split returns the Qwen3 tokenizer with Qwen3.5's split pattern.
func qwen35Split(t testing.TB) *Tokenizer {
	t.Helper()
	qwen3(t)
	q2, _ := json.Marshal(patternQwen2)
	q35, _ := json.Marshal(patternQwen35)
	data := bytes.Replace(qwen3JSON, q2, q35, 1)
	if bytes.Equal(data, qwen3JSON) {
		t.Fatal("Qwen3 split pattern not found in tokenizer.json")
	}
	tk, err := FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if tk.fast == nil || tk.fast.letter&clM == 0 {
		t.Fatal("Qwen3.5 pattern did not select the marks scanner")
	}
	return tk
}

// The ids Hugging Face tokenizers gives for the corpus
// (scripts/golden/tokenizer_golden.py), with Qwen3's split pattern and
// with Qwen3.5's.
const (
	goldenPath   = "testdata/qwen3-golden-ids.jsonl.gz"
	golden35Path = "testdata/qwen3-golden-ids-qwen35split.jsonl.gz"
)

// TestHuggingFaceParity requires every corpus chunk to encode exactly as
// Hugging Face tokenizers encodes it.
func TestHuggingFaceParity(t *testing.T) {
	t.Run("qwen3", func(t *testing.T) { checkGolden(t, qwen3, goldenPath) })
	t.Run("qwen35split", func(t *testing.T) { checkGolden(t, qwen35Split, golden35Path) })
}

func checkGolden(t *testing.T, load func(testing.TB) *Tokenizer, path string) {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		t.Skip(path + " not present")
	}
	tk := load(t)
	texts := corpus(t)
	want := readIDs(t, path)
	diff, tokens := compareCorpus(t, tk, texts, want)
	for n, i := range diff {
		if n == 20 {
			t.Errorf("... %d chunks differ in all", len(diff))
			break
		}
		t.Errorf("chunk %d %q:\n got %v\nwant %v", i, texts[i], tk.Encode(texts[i]), want[i])
	}
	t.Logf("%d chunks, %d tokens, %d differ", len(texts), tokens, len(diff))
}
