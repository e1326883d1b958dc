package layers

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// BenchmarkPass08B runs whole passes of a random Qwen3.5-0.8B-shaped model
// (bf16 weights, 24 layers; 4 with -short) on the CPU backend: a new
// 2,200-token state with 6 questions of 40 rows, the same questions on that
// state cached, 2 questions of 29 rows on a cached 31-token state (the
// 2-question ticket), and 6 questions on a new 40-token state (280 rows). It logs
// each operation's share of the wall time, and reports the process's CPU
// time a pass (cpu-ms/pass), which a busy machine disturbs less. With
// KEV_PASS_DTYPE=fp32 the weights are widened to float32 first, as kev
// serves with -dtype fp32.
func BenchmarkPass08B(b *testing.B) {
	c := config08B()
	if testing.Short() {
		c.NumLayers, c.LayerTypes = 4, c.LayerTypes[:4]
	}
	tb := &timed{Backend: cpu.New()}
	w := bf16Weights(c, 1)
	if os.Getenv("KEV_PASS_DTYPE") == "fp32" {
		for _, t := range w.Tensors {
			if t.DType == qwen35.BF16 {
				t.F32, t.BF16, t.DType = t.Float32s(), nil, qwen35.F32
			}
		}
	}
	m, err := New(tb, w)
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
		tb.reset()
		cpu0 := cpuTime()
		for b.Loop() {
			out, err := m.Forward(bt)
			if err != nil {
				b.Fatal(err)
			}
			out.Free()
		}
		if d := cpuTime() - cpu0; cpu0 > 0 {
			b.ReportMetric(float64(d.Milliseconds())/float64(b.N), "cpu-ms/pass")
		}
		b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/pass")
		b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
		b.Log(tb.shares(b.Elapsed()))
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
	b.Run("cached58", func(b *testing.B) { // the 2-question short ticket, its state cached
		st, h, err := m.Prefill(randomIDs(r, 31, c.VocabSize))
		if err != nil {
			b.Fatal(err)
		}
		m.b.Free(h)
		defer st.Free()
		run(b, &Batch{Rows: []Row{{IDs: randomIDs(r, 29, c.VocabSize), Cached: st}, {IDs: randomIDs(r, 29, c.VocabSize), Cached: st}}})
	})
	b.Run("short280", func(b *testing.B) {
		run(b, &Batch{New: []NewState{{IDs: randomIDs(r, 40, c.VocabSize)}}, Rows: questions(nil)})
	})
}

// timed is the CPU backend with the wall time of each operation summed.
type timed struct {
	*cpu.Backend
	mu sync.Mutex
	d  map[string]time.Duration
}

func (t *timed) reset() {
	t.mu.Lock()
	t.d = map[string]time.Duration{}
	t.mu.Unlock()
}

func (t *timed) add(op string, start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	if t.d == nil {
		t.d = map[string]time.Duration{}
	}
	t.d[op] += d
	t.mu.Unlock()
}

// shares lists each operation's share of total, largest first.
func (t *timed) shares(total time.Duration) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	ops := make([]string, 0, len(t.d))
	var sum time.Duration
	for op, d := range t.d {
		ops = append(ops, op)
		sum += d
	}
	slices.SortFunc(ops, func(a, b string) int { return int(t.d[b] - t.d[a]) })
	var sb strings.Builder
	fmt.Fprintf(&sb, "operations %.1f%% of the time:", 100*float64(sum)/float64(total))
	for _, op := range ops {
		fmt.Fprintf(&sb, " %s %.1f%%", op, 100*float64(t.d[op])/float64(total))
	}
	return sb.String()
}

func (t *timed) Embedding(table tensor.Tensor, ids []int32) (tensor.Tensor, error) {
	defer t.add("Embedding", time.Now())
	return t.Backend.Embedding(table, ids)
}

func (t *timed) MatMul(x, w tensor.Tensor) (tensor.Tensor, error) {
	defer t.add("MatMul", time.Now())
	return t.Backend.MatMul(x, w)
}

func (t *timed) SplitCols(x tensor.Tensor, widths ...int) ([]tensor.Tensor, error) {
	defer t.add("SplitCols", time.Now())
	return t.Backend.SplitCols(x, widths...)
}

func (t *timed) RMSNorm(x, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, error) {
	defer t.add("RMSNorm", time.Now())
	return t.Backend.RMSNorm(x, gain, eps, plusOne)
}

func (t *timed) AddRMSNorm(x, residual, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, tensor.Tensor, error) {
	defer t.add("AddRMSNorm", time.Now())
	return t.Backend.AddRMSNorm(x, residual, gain, eps, plusOne)
}

func (t *timed) MatMulAddRMSNorm(x, w, residual, gain tensor.Tensor, eps float32, plusOne bool) (tensor.Tensor, tensor.Tensor, error) {
	defer t.add("MatMulAddRMSNorm", time.Now())
	return t.Backend.MatMulAddRMSNorm(x, w, residual, gain, eps, plusOne)
}

func (t *timed) SwiGLU(x tensor.Tensor) (tensor.Tensor, error) {
	defer t.add("SwiGLU", time.Now())
	return t.Backend.SwiGLU(x)
}

func (t *timed) MatMulSwiGLU(x, w tensor.Tensor) (tensor.Tensor, error) {
	defer t.add("MatMulSwiGLU", time.Now())
	return t.Backend.MatMulSwiGLU(x, w)
}

func (t *timed) MatMulSplit(x, w tensor.Tensor, widths ...int) ([]tensor.Tensor, error) {
	defer t.add("MatMulSplit", time.Now())
	return t.Backend.MatMulSplit(x, w, widths...)
}

func (t *timed) SigmoidGate(x, gate tensor.Tensor) (tensor.Tensor, error) {
	defer t.add("SigmoidGate", time.Now())
	return t.Backend.SigmoidGate(x, gate)
}

func (t *timed) AddBias(x, bias tensor.Tensor) (tensor.Tensor, error) {
	defer t.add("AddBias", time.Now())
	return t.Backend.AddBias(x, bias)
}

func (t *timed) QKNormRope(q, k, qGain, kGain tensor.Tensor, positions []int32, c tensor.RopeConfig) (tensor.Tensor, tensor.Tensor, tensor.Tensor, error) {
	defer t.add("QKNormRope", time.Now())
	return t.Backend.QKNormRope(q, k, qGain, kGain, positions, c)
}

func (t *timed) Attention(q, k, v, kPrefix, vPrefix tensor.Tensor, lens []int, c tensor.AttentionConfig) (tensor.Tensor, error) {
	defer t.add("Attention", time.Now())
	return t.Backend.Attention(q, k, v, kPrefix, vPrefix, lens, c)
}

func (t *timed) AttentionSegments(q, k, v tensor.Tensor, kPrefixes, vPrefixes []tensor.Tensor, segs []tensor.Segment, c tensor.AttentionConfig) (tensor.Tensor, error) {
	defer t.add("Attention", time.Now())
	return t.Backend.AttentionSegments(q, k, v, kPrefixes, vPrefixes, segs, c)
}

func (t *timed) CausalConv1dSiLU(x, w, state tensor.Tensor, lens []int) (tensor.Tensor, tensor.Tensor, error) {
	defer t.add("Conv", time.Now())
	return t.Backend.CausalConv1dSiLU(x, w, state, lens)
}

func (t *timed) CausalConv1dSiLUSegments(x, w tensor.Tensor, states []tensor.Tensor, segs []tensor.Segment) (tensor.Tensor, []tensor.Tensor, error) {
	defer t.add("Conv", time.Now())
	return t.Backend.CausalConv1dSiLUSegments(x, w, states, segs)
}

func (t *timed) DeltaGates(bl, a, aLog, dtBias tensor.Tensor) (tensor.Tensor, tensor.Tensor, error) {
	defer t.add("DeltaGates", time.Now())
	return t.Backend.DeltaGates(bl, a, aLog, dtBias)
}

func (t *timed) GatedDeltaRule(qkv, g, beta, state tensor.Tensor, lens []int, c tensor.DeltaConfig) (tensor.Tensor, tensor.Tensor, error) {
	defer t.add("DeltaRule", time.Now())
	return t.Backend.GatedDeltaRule(qkv, g, beta, state, lens, c)
}

func (t *timed) GatedDeltaRuleSegments(qkv, g, beta tensor.Tensor, states []tensor.Tensor, segs []tensor.Segment, c tensor.DeltaConfig) (tensor.Tensor, []tensor.Tensor, error) {
	defer t.add("DeltaRule", time.Now())
	return t.Backend.GatedDeltaRuleSegments(qkv, g, beta, states, segs, c)
}

func (t *timed) GatedRMSNorm(o, z, w tensor.Tensor, eps float32) (tensor.Tensor, error) {
	defer t.add("GatedRMSNorm", time.Now())
	return t.Backend.GatedRMSNorm(o, z, w, eps)
}

func (t *timed) SliceRows(x tensor.Tensor, lo, hi int) (tensor.Tensor, error) {
	defer t.add("SliceRows", time.Now())
	return t.Backend.SliceRows(x, lo, hi)
}

func (t *timed) Free(ts ...tensor.Tensor) {
	defer t.add("Free", time.Now())
	t.Backend.Free(ts...)
}
