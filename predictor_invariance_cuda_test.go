//go:build cuda

package kev

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestBatchInvariantCUDA checks Kev's claim that a request's answers do not depend on its batch-mates, on the GPU
// in bf16: for every golden fixture, each request's probabilities alone (no prefix cache, a batch of one) are
// bit-identical to the same request inside batches of 2, 7 and 33 mixed requests — new states, states from the
// prefix cache (put there by a warm-up batch), and duplicates sharing a state. The batch sizes change the token
// count of every GEMM and the segments of every attention and delta-rule call, so this fails if any planner lets M
// or the other segments choose a reduction order.
func TestBatchInvariantCUDA(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	for _, s := range goldenSets(t) {
		t.Run(s.name, func(t *testing.T) {
			reqs := goldenRequests(t, s)
			alone := loadGolden(t, s, Options{Device: "cuda", DType: "bf16", PrefixCache: -1})
			want := make([][][]float32, len(reqs))
			for i := range reqs {
				want[i] = probs(t, alone, reqs[i])
			}
			for _, size := range []int{2, 7, 33} {
				// Warm-up: a batch of one request puts its state in the cache; the next batch is held until all
				// of its requests are queued, so they run as one batch (MaxBatch 64).
				warm := r.IntN(len(reqs))
				order := make([]int, size)
				order[0] = warm // a cache hit
				for i := 1; i < size; i++ {
					order[i] = r.IntN(len(reqs))
				}
				if size > 2 {
					order[size-1] = order[1] // a duplicate
				}
				r.Shuffle(size, func(i, j int) { order[i], order[j] = order[j], order[i] })
				hold := make(chan struct{})
				takes := 0
				testBeforeTake = func(int) {
					if takes++; takes == 2 {
						<-hold
					}
				}
				// PrefixMinTokens 1: cache every state, also on the attention-only fixtures (whose default, 384,
				// is above their states' lengths).
				p := loadGolden(t, s, Options{Device: "cuda", DType: "bf16", PrefixMinTokens: 1})
				testBeforeTake = nil
				p.engines[0].sliceTokens = 1 << 30 // one batch however many tokens: every request beside every other
				if got := probs(t, p, reqs[warm]); !equalProbs(got, want[warm]) {
					t.Errorf("batch of %d: warm-up request (golden %d): %v, alone %v", size, warm, got, want[warm])
				}
				got := make([][][]float32, size)
				var wg sync.WaitGroup
				for i, k := range order {
					wg.Add(1)
					go func() {
						defer wg.Done()
						_, _, res, err := p.submit(t.Context(), reqs[k])
						if err != nil {
							t.Error(err)
							return
						}
						got[i] = res.probs
					}()
				}
				waitAccepted(t, p, 1+size)
				close(hold)
				wg.Wait()
				for i, k := range order {
					if !equalProbs(got[i], want[k]) {
						t.Errorf("batch of %d %v: request %d (golden %d): %v, alone %v", size, order, i, k, got[i], want[k])
					}
				}
				if st := p.Stats(); st.Batches.Count != 2 || st.PrefixCache.Hits == 0 {
					t.Errorf("batch of %d: %d batches, %d cache hits; want 2 batches and a hit", size, st.Batches.Count, st.PrefixCache.Hits)
				}
				p.Close()
			}
		})
	}
}
