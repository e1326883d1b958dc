package tokenizer

import (
	"encoding/json"
	"os"
	"sync"
	"testing"
)

// BenchmarkEncodeCorpus encodes the whole corpus (1.28 MB) per iteration on
// one goroutine and reports tokens per second.
func BenchmarkEncodeCorpus(b *testing.B) {
	tk := qwen3(b)
	texts := corpus(b)
	tokens, size := 0, 0
	for _, s := range texts {
		tokens += len(tk.Encode(s))
		size += len(s)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for b.Loop() {
		for _, s := range texts {
			tk.Encode(s)
		}
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkEncodeCorpusCold is BenchmarkEncodeCorpus with the word cache
// emptied before every pass.
func BenchmarkEncodeCorpusCold(b *testing.B) {
	tk := qwen3(b)
	texts := corpus(b)
	tokens := 0
	for _, s := range texts {
		tokens += len(tk.Encode(s))
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		tk.model.cache.init()
		b.StartTimer()
		for _, s := range texts {
			tk.Encode(s)
		}
	}
	b.ReportMetric(float64(tokens)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// benchState returns the 2,200-token state of the serving benchmark.
func benchState(b *testing.B) string {
	data, err := os.ReadFile("../scripts/golden/bench-cases.json")
	if err != nil {
		b.Skip("bench-cases.json not available: ", err)
	}
	var c struct {
		Cases map[string]struct {
			State string `json:"state"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		b.Fatal(err)
	}
	return c.Cases["5 questions, 2,200-token state"].State
}

// BenchmarkEncode2200 encodes the serving benchmark's 2,200-token state.
func BenchmarkEncode2200(b *testing.B) {
	tk := qwen3(b)
	s := benchState(b)
	n := 0
	for b.Loop() {
		n = len(tk.EncodeEscaped(s))
	}
	b.ReportMetric(float64(n), "tokens")
}

// BenchmarkEncodeParallel encodes corpus chunks from all goroutines at once.
func BenchmarkEncodeParallel(b *testing.B) {
	tk := qwen3(b)
	texts := corpus(b)
	var mu sync.Mutex
	tokens := 0
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n, i := 0, 0
		for pb.Next() {
			n += len(tk.Encode(texts[i%len(texts)]))
			i++
		}
		mu.Lock()
		tokens += n
		mu.Unlock()
	})
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkLoad parses the Qwen3 tokenizer.json (11.4 MB).
func BenchmarkLoad(b *testing.B) {
	qwen3(b)
	for b.Loop() {
		if _, err := FromJSON(qwen3JSON); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncode2200Cold is BenchmarkEncode2200 with the word cache
// emptied before every call.
func BenchmarkEncode2200Cold(b *testing.B) {
	tk := qwen3(b)
	s := benchState(b)
	for b.Loop() {
		b.StopTimer()
		tk.model.cache.init()
		b.StartTimer()
		tk.EncodeEscaped(s)
	}
}
