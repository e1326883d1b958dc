package kev

import (
	"context"
	"math"
	"strings"
	"testing"
)

// TestWarmUp checks the warm-up pass of Load: every replica runs it, it leaves Stats and the prefix cache as if
// it never ran (its own state is not cached: asking about it is a miss), and answers are bit for bit those of a
// predictor loaded without it.
func TestWarmUp(t *testing.T) {
	t.Run("cpu", func(t *testing.T) { testWarmUp(t, Options{Device: "cpu,cpu"}) })
	t.Run("short and long", func(t *testing.T) { // as on a GPU, shorter
		testWarmLengths = []int{1, 4}
		t.Cleanup(func() { testWarmLengths = nil })
		testWarmUp(t, Options{Device: "cpu"})
	})
}

func testWarmUp(t *testing.T, opts Options) {
	for _, s := range goldenSets(t) {
		t.Run(s.name, func(t *testing.T) {
			g := readGolden(t, s.cases)
			warm := loadGolden(t, s, opts)
			testSkipWarmUp = true
			cold := loadGolden(t, s, opts)
			testSkipWarmUp = false
			for i, e := range warm.engines {
				if want := warmPassesEach * len(warmLengths(e.backend.Name())); e.warmPasses != want {
					t.Errorf("replica %d ran %d warm-up passes, want %d", i, e.warmPasses, want)
				}
				if cold.engines[i].warmPasses != 0 {
					t.Errorf("replica %d of the predictor loaded without warm-up ran %d passes", i, cold.engines[i].warmPasses)
				}
			}
			st := warm.Stats()
			if len(st.Replicas) != len(warm.engines) || len(st.Replicas) != len(cold.engines) {
				t.Fatalf("%d replicas in Stats, %d and %d engines", len(st.Replicas), len(warm.engines), len(cold.engines))
			}
			for i, r := range st.Replicas {
				pc := r.PrefixCache
				if r.Batches.Count != 0 || r.Batches.Requests != 0 || r.QueuedTokens != 0 || pc.Hits != 0 ||
					pc.Misses != 0 || pc.CachedStates != 0 || pc.OOMRetries != 0 {
					t.Errorf("replica %d after Load: %+v, want every counter 0", i, r)
				}
			}
			for _, c := range shortCases(g.Cases, 2) {
				req := decode(t, c.Request)
				_, _, rw, err := warm.submit(context.Background(), req)
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				_, _, rc, err := cold.submit(context.Background(), req)
				if err != nil {
					t.Fatalf("%s: %v", c.Name, err)
				}
				if len(rw.probs) != len(rc.probs) {
					t.Fatalf("%s: %d rows with the warm-up, %d without", c.Name, len(rw.probs), len(rc.probs))
				}
				for q := range rw.probs {
					for j := range rw.probs[q] {
						if math.Float32bits(rw.probs[q][j]) != math.Float32bits(rc.probs[q][j]) {
							t.Fatalf("%s question %d option %d: %v with the warm-up, %v without", c.Name, q, j, rw.probs[q][j], rc.probs[q][j])
						}
					}
				}
				if rw.hit != rc.hit {
					t.Errorf("%s: cache hit %v with the warm-up, %v without", c.Name, rw.hit, rc.hit)
				}
			}
			if w, c := warm.Stats().PrefixCache, cold.Stats().PrefixCache; w != c {
				t.Errorf("prefix cache after the same requests: %+v with the warm-up, %+v without", w, c)
			}
			// The warm-up's own requests are not cached: asked now, they are no hits, and the caches agree after them.
			for _, n := range warmLengths(warm.engines[0].backend.Name()) {
				before := warm.Stats().PrefixCache
				req := &Request{State: Text(strings.Repeat(warmSentence, n)), Questions: []QuestionEntry{
					Noul("refund", "Does the customer ask for a refund?"),
					Choice("tone", "How does the customer sound?", Opt("calm", ""), Opt("upset", "angry or annoyed")),
				}}
				for _, p := range []*Predictor{warm, cold} {
					if _, err := p.Do(context.Background(), req); err != nil {
						t.Fatal(err)
					}
				}
				after := warm.Stats().PrefixCache
				if after.Hits != before.Hits {
					t.Errorf("the warm-up's request of %d sentences after Load hit the cache: hits %d→%d", n, before.Hits, after.Hits)
				}
				if c := cold.Stats().PrefixCache; after != c {
					t.Errorf("prefix cache after the warm-up's request of %d sentences: %+v with the warm-up, %+v without", n, after, c)
				}
			}
		})
	}
}
