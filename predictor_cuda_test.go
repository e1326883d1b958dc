//go:build cuda

package kev

import (
	"math"
	"os"
	"testing"

	_ "github.com/kevgo/kev/tensor/cuda" // registers the "cuda" backend
)

// TestPredictorGoldenCUDA runs every golden request on the GPU in bf16 and compares the probabilities with the
// PyTorch fp32 reference, at Kev's own bf16 serving tolerance: max |Δp| ≤ 0.03 and at most one argmax flip in 300
// questions (here: at most one over all golden questions).
func TestPredictorGoldenCUDA(t *testing.T) {
	var worst float64
	flips, questions := 0, 0
	for _, s := range goldenSets(t) {
		t.Run(s.name, func(t *testing.T) {
			g := readGolden(t, s.cases)
			p := loadGolden(t, s, Options{Device: "cuda", DType: "bf16"})
			for pass := 0; pass < 2; pass++ { // uncached, then the same states from the prefix cache
				for _, c := range g.Cases {
					got := probs(t, p, decode(t, c.Request))
					if len(got) != len(c.Probabilities) {
						t.Fatalf("%s: %d questions answered, want %d", c.Name, len(got), len(c.Probabilities))
					}
					for q, want := range c.Probabilities {
						if len(got[q]) != len(want) {
							t.Fatalf("%s q%d: %d probabilities, want %d", c.Name, q, len(got[q]), len(want))
						}
						for i := range want {
							d := math.Abs(float64(got[q][i]) - float64(want[i]))
							if math.IsNaN(d) || d > 0.03 {
								t.Errorf("%s q%d option %d: cuda %.5f, reference %.5f (|Δ| %.4f > 0.03)", c.Name, q, i, got[q][i], want[i], d)
							}
							worst = math.Max(worst, d)
						}
						if pass == 0 {
							questions++
							if argmax32(got[q]) != argmax32(want) {
								flips++
								t.Logf("%s q%d: argmax flip (cuda %v, reference %v)", c.Name, q, got[q], want)
							}
						}
					}
				}
			}
			// Graphs are off unless KEV_CUDA_GRAPHS turns them on: then the counters are null, as Kev reports them
			// when it captures no graphs.
			switch st := p.Stats(); {
			case st.Graphs != nil:
				t.Logf("graphs: %+v", *st.Graphs)
			case os.Getenv("KEV_CUDA_GRAPHS") != "" && os.Getenv("KEV_CUDA_GRAPHS") != "off" && os.Getenv("KEV_CUDA_GRAPHS") != "0":
				t.Error("Stats().Graphs is nil on cuda with KEV_CUDA_GRAPHS set")
			}
		})
	}
	t.Logf("bf16 CUDA vs fp32 reference: worst |Δp| %.5f, %d argmax flips in %d questions", worst, flips, questions)
	if flips > 1 {
		t.Errorf("%d argmax flips in %d questions, want at most 1", flips, questions)
	}
}

func argmax32(p []float32) int {
	best := 0
	for i, v := range p {
		if v > p[best] {
			best = i
		}
	}
	return best
}

// TestPredictorCUDAGraphsOption serves every golden request with Options.CUDAGraphs off and on: the answers are
// the same bit for bit, the counters are null with graphs off, and with them on the repeated requests are replayed
// from graphs (the state-prefix cache off, so that each request runs the same passes again).
func TestPredictorCUDAGraphsOption(t *testing.T) {
	for _, s := range goldenSets(t) {
		t.Run(s.name, func(t *testing.T) {
			g := readGolden(t, s.cases)
			off := loadGolden(t, s, Options{Device: "cuda", DType: "bf16", CUDAGraphs: -1, PrefixCache: -1})
			on := loadGolden(t, s, Options{Device: "cuda", DType: "bf16", CUDAGraphs: 16, PrefixCache: -1})
			if st := off.Stats(); st.Graphs != nil {
				t.Errorf("CUDAGraphs -1: graph counters %+v, want none", *st.Graphs)
			}
			for round := range 3 {
				for _, c := range g.Cases {
					req := decode(t, c.Request)
					if a, b := probs(t, off, req), probs(t, on, req); !equalProbs(a, b) {
						t.Errorf("round %d, %s: graphs on %v, off %v", round, c.Name, b, a)
					}
				}
			}
			st := on.Stats()
			if st.Graphs == nil {
				t.Fatal("CUDAGraphs 16: no graph counters")
			}
			t.Logf("graphs: %+v", *st.Graphs)
			if st.Graphs.Replays == 0 || st.Graphs.Failed != 0 {
				t.Errorf("three rounds of the same requests: %+v, want replays and no failures", *st.Graphs)
			}
		})
	}
}
