package tokenizer

import (
	"io"
	"os"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// readZstd returns the decompressed contents of a testdata file.
func readZstd(t testing.TB, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b, err := io.ReadAll(d)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return b
}

var (
	qwen3Once sync.Once
	qwen3JSON []byte
	qwen3Tok  *Tokenizer
	qwen3Err  error
)

// qwen3 returns the real Qwen3 tokenizer (151,669 tokens), loaded once.
func qwen3(t testing.TB) *Tokenizer {
	t.Helper()
	qwen3Once.Do(func() {
		qwen3JSON = readZstd(t, "testdata/qwen3-tokenizer.json.zst")
		cfg, err := os.ReadFile("testdata/qwen3-tokenizer_config.json")
		if err != nil {
			qwen3Err = err
			return
		}
		qwen3Tok, qwen3Err = FromJSONConfig(qwen3JSON, cfg)
	})
	if qwen3Err != nil {
		t.Fatal(qwen3Err)
	}
	return qwen3Tok
}
