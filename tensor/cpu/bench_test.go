package cpu

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/kevgo/kev/tensor"
)

// Benchmarks of the long-state operations at Kev-0.8B's shape: a new
// 2,200-token state (one segment), and 6 questions of 40 rows each on a
// cached 2,200-token state. GOMAXPROCS sets the threads. Besides the wall
// time they report the process's CPU time a call (cpu-ms/call), which a
// busy machine disturbs less.

const benchState, benchQuestions, benchRows = 2200, 6, 40

// benchDecay is the largest per-token log decay −g of the delta-rule
// benchmarks (KEV_BENCH_DECAY sets it): at a few units a chunk's
// cumulative decays pass float32's smallest normal numbers, as fast-
// forgetting heads of real models do.
var benchDecay = func() float32 {
	if v, err := strconv.ParseFloat(os.Getenv("KEV_BENCH_DECAY"), 32); err == nil {
		return float32(v)
	}
	return 0.3
}()

func benchUp(b *testing.B, be *Backend, shape []int, d []float32) tensor.Tensor {
	x, err := be.FromFloat32(shape, d)
	if err != nil {
		b.Fatal(err)
	}
	return x
}

func benchAttention(b *testing.B, prefix, segs, rows int) {
	be := &Backend{Threads: runtime.GOMAXPROCS(0)}
	r := rand.New(rand.NewPCG(1, 1))
	c := tensor.AttentionConfig{Heads: 8, KVHeads: 2, HeadDim: 256}
	c.Scale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	n, qw, kvw := segs*rows, c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	q, k, v := benchUp(b, be, []int{n, qw}, randFloats(r, n*qw)), benchUp(b, be, []int{n, kvw}, randFloats(r, n*kvw)), benchUp(b, be, []int{n, kvw}, randFloats(r, n*kvw))
	var kps, vps []tensor.Tensor
	ss := make([]tensor.Segment, segs)
	for i := range ss {
		ss[i] = tensor.Segment{Len: rows}
	}
	if prefix > 0 {
		kps = []tensor.Tensor{benchUp(b, be, []int{prefix, kvw}, randFloats(r, prefix*kvw))}
		vps = []tensor.Tensor{benchUp(b, be, []int{prefix, kvw}, randFloats(r, prefix*kvw))}
		for i := range ss {
			ss[i].From = tensor.FromPrefix
		}
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		y, err := be.AttentionSegments(q, k, v, kps, vps, ss, c)
		if err != nil {
			b.Fatal(err)
		}
		be.Free(y)
	}
	reportCPU(b, cpu0)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/call")
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkAttentionNew2200 is one gated attention layer's attention over a
// new 2,200-token state.
func BenchmarkAttentionNew2200(b *testing.B) { benchAttention(b, 0, 1, benchState) }

// BenchmarkAttentionCached6x40 is 6 questions of 40 rows on a cached
// 2,200-token state.
func BenchmarkAttentionCached6x40(b *testing.B) {
	benchAttention(b, benchState, benchQuestions, benchRows)
}

func benchDelta(b *testing.B, cached bool, segs, rows int) {
	be := &Backend{Threads: runtime.GOMAXPROCS(0)}
	r := rand.New(rand.NewPCG(2, 2))
	c := tensor.DeltaConfig{KeyHeads: 16, ValueHeads: 16, KeyDim: 128, ValueDim: 128, Chunk: 64}
	n, width := segs*rows, 2*c.KeyHeads*c.KeyDim+c.ValueHeads*c.ValueDim
	gs, bs := make([]float32, n*c.ValueHeads), make([]float32, n*c.ValueHeads)
	for i := range gs {
		gs[i] = -benchDecay * r.Float32()
		bs[i] = 0.1 + 0.8*r.Float32()
	}
	qkv := benchUp(b, be, []int{n, width}, randFloats(r, n*width))
	g, beta := benchUp(b, be, []int{n, c.ValueHeads}, gs), benchUp(b, be, []int{n, c.ValueHeads}, bs)
	var states []tensor.Tensor
	ss := make([]tensor.Segment, segs)
	for i := range ss {
		ss[i] = tensor.Segment{Len: rows, Keep: !cached}
	}
	if cached {
		st := randFloats(r, c.ValueHeads*c.KeyDim*c.ValueDim)
		for i := range st {
			st[i] *= 0.05
		}
		states = []tensor.Tensor{benchUp(b, be, []int{c.ValueHeads, c.KeyDim, c.ValueDim}, st)}
		for i := range ss {
			ss[i].From = tensor.FromPrefix
		}
	}
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		y, kept, err := be.GatedDeltaRuleSegments(qkv, g, beta, states, ss, c)
		if err != nil {
			b.Fatal(err)
		}
		be.Free(y)
		be.Free(kept...)
	}
	reportCPU(b, cpu0)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/call")
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkDeltaRuleNew2200 is one Gated DeltaNet layer's delta rule over a
// new 2,200-token state.
func BenchmarkDeltaRuleNew2200(b *testing.B) { benchDelta(b, false, 1, benchState) }

// BenchmarkDeltaRuleCached6x40 is 6 questions of 40 rows each continuing a
// cached state.
func BenchmarkDeltaRuleCached6x40(b *testing.B) { benchDelta(b, true, benchQuestions, benchRows) }

// BenchmarkConv2200 is one Gated DeltaNet layer's causal convolution with
// SiLU over a new 2,200-token state (6,144 channels, kernel 4).
func BenchmarkConv2200(b *testing.B) {
	be := &Backend{Threads: runtime.GOMAXPROCS(0)}
	r := rand.New(rand.NewPCG(3, 3))
	n, ch, kw := benchState, 6144, 4
	x, w := benchUp(b, be, []int{n, ch}, randFloats(r, n*ch)), benchUp(b, be, []int{ch, kw}, randFloats(r, ch*kw))
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		y, st, err := be.CausalConv1dSiLUSegments(x, w, nil, []tensor.Segment{{Len: n, Keep: true}})
		if err != nil {
			b.Fatal(err)
		}
		be.Free(y)
		be.Free(st...)
	}
	reportCPU(b, cpu0)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/call")
}

// reportCPU reports the CPU time a call since cpu0.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	if d := cpuTime() - cpu0; cpu0 > 0 {
		b.ReportMetric(float64(d.Microseconds())/1000/float64(b.N), "cpu-ms/call")
	}
}
