package layers

import (
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/tensor/cpu"
)

// BenchmarkPass08B runs whole passes of a random Qwen3.5-0.8B-shaped model
// (bf16 weights, 24 layers; 4 with -short) on the CPU backend: a new
// 2,200-token state with 6 questions of 40 rows, the same questions on that
// state cached, and 6 questions on a new 40-token state (280 rows).
func BenchmarkPass08B(b *testing.B) {
	c := config08B()
	if testing.Short() {
		c.NumLayers, c.LayerTypes = 4, c.LayerTypes[:4]
	}
	m, err := New(cpu.New(), bf16Weights(c, 1))
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 6))
	questions := func(cached *State) []Row {
		var rows []Row
		for range 6 {
			rows = append(rows, Row{IDs: randomIDs(r, 40, c.VocabSize), Cached: cached})
		}
		return rows
	}
	long := randomIDs(r, 2200, c.VocabSize)
	run := func(b *testing.B, bt *Batch) {
		rows := 0
		for _, s := range bt.New {
			rows += len(s.IDs)
		}
		for _, x := range bt.Rows {
			rows += len(x.IDs)
		}
		for b.Loop() {
			out, err := m.Forward(bt)
			if err != nil {
				b.Fatal(err)
			}
			out.Free()
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/pass")
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
	}
	b.Run("new2200", func(b *testing.B) { run(b, &Batch{New: []NewState{{IDs: long}}, Rows: questions(nil)}) })
	b.Run("cached2200", func(b *testing.B) {
		st, h, err := m.Prefill(long)
		if err != nil {
			b.Fatal(err)
		}
		m.b.Free(h)
		defer st.Free()
		run(b, &Batch{Rows: questions(st)})
	})
	b.Run("short280", func(b *testing.B) {
		run(b, &Batch{New: []NewState{{IDs: randomIDs(r, 40, c.VocabSize)}}, Rows: questions(nil)})
	})
}
