package kev

import (
	"sync"
	"testing"

	"github.com/kevgo/kev/internal/prefixcache"
	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// eachBackend is the CPU backend without its optional interfaces: the model takes its per-state path.
type eachBackend struct{ tensor.Backend }

const eachName = "cpu-each"

func init() {
	tensor.Register(eachName, func() (tensor.Backend, error) { return eachBackend{cpu.New()}, nil })
}

// TestBatchMixed runs one batch of cached hits, misses and duplicate states, in one pass, in a pass per row, and
// on a backend without batched operations: every request's probabilities equal, bit for bit, those it gets alone,
// and the cache counts and keeps what it does when requests run one at a time.
func TestBatchMixed(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := smallRequests(t, s)
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	order := []int{1, 0, 1, 2, 0, 2, 1}
	want := make([][][]float32, len(reqs))
	for i := range reqs {
		want[i] = probs(t, alone, reqs[i])
	}
	for _, tc := range []struct {
		name       string
		device     string
		passTokens int
	}{
		{"one pass", "cpu", systemone.RowPassTokens},
		{"a pass per row", "cpu", 1},
		{"small passes", "cpu", 200},
		{"per state", eachName, systemone.RowPassTokens},
	} {
		if testing.Short() && tc.name != "small passes" && tc.name != "per state" {
			continue // the quick loop: one split into passes, one per-state backend
		}
		t.Run(tc.name, func(t *testing.T) {
			// The model goroutine's second take waits for hold: the warm-up runs alone, the rest in one batch.
			hold := make(chan struct{})
			takes := 0
			testBeforeTake = func(int) {
				if takes++; takes == 2 {
					<-hold
				}
			}
			p := loadGolden(t, s, Options{PrefixCache: 2, Device: Device(tc.device), DType: "fp32"})
			testBeforeTake = nil
			p.engines[0].passTokens = tc.passTokens
			probs(t, p, reqs[0])
			got := make([][][]float32, len(order))
			hits := make([]bool, len(order))
			var wg sync.WaitGroup
			for i, k := range order {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, _, r, err := p.submit(t.Context(), reqs[k])
					if err != nil {
						t.Error(err)
						return
					}
					got[i], hits[i] = r.probs, r.hit
				}()
				waitAccepted(t, p, 2+i) // queue in order
			}
			close(hold)
			wg.Wait()
			for i, k := range order {
				if !equalProbs(got[i], want[k]) {
					t.Errorf("request %d (golden %d): %v in the batch, %v alone", i, k, got[i], want[k])
				}
				if hits[i] != (k == 0) {
					t.Errorf("request %d (golden %d): hit %v", i, k, hits[i])
				}
			}
			st := p.Stats()
			// Plan walks back from the last request: reqs[1], reqs[2] survive a size-2 cache, reqs[0] is evicted.
			if st.Batches.Count != 2 || st.Batches.Requests != 1+len(order) || st.PrefixCache.Hits != 2 ||
				st.PrefixCache.Misses != 6 || st.PrefixCache.CachedStates != 2 {
				t.Errorf("stats %+v", st)
			}
			if held := len(p.engines[0].held); held != 2 {
				t.Errorf("%d states held, want 2", held)
			}
			// The kept states answer as fresh ones do.
			for _, k := range []int{1, 2} {
				_, _, r, err := p.submit(t.Context(), reqs[k])
				if err != nil {
					t.Fatal(err)
				}
				if !r.hit || !equalProbs(r.probs, want[k]) {
					t.Errorf("golden %d from the cache: hit %v, %v, want %v", k, r.hit, r.probs, want[k])
				}
			}
		})
	}
}

// TestPlanPasses checks how a batch is cut into passes: new states once per batch, in the pass of their first
// row; rows of a later pass continue them as kept states; a pass holds at least one row.
func TestPlanPasses(t *testing.T) {
	s := goldenSets(t)[0]
	p := loadGolden(t, s, Options{})
	reqs := smallRequests(t, s)
	var batch []chunk
	for _, k := range []int{0, 1, 0} {
		rec, err := systemone.ToRecord(reqs[k], systemone.RecordOptions{})
		if err != nil {
			t.Fatal(err)
		}
		enc, err := systemone.Encode(p.tok, rec, systemone.EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := newCall(t.Context(), enc)
		batch = append(batch, chunk{c: c, to: len(c.rows)})
	}
	states := make([][]int, len(batch))
	tokens := 0 // the whole batch: two distinct states and every row
	for i, ch := range batch {
		states[i] = ch.c.enc.StateIDs()
		if i < 2 {
			tokens += len(states[i])
		}
		for _, r := range ch.c.rows {
			tokens += len(r.IDs)
		}
	}
	for _, budget := range []int{1 << 20, tokens, 1} {
		plan := p.engines[0].cache.Plan(states, false)
		slots := make([]*prefixcache.Slot[*layers.State], len(batch))
		for i := range slots {
			slots[i] = &plan.Slots[i]
		}
		passes, news := planPasses(batch, slots, budget)
		if len(news) != 2 {
			t.Errorf("budget %d: %d new states, want 2", budget, len(news))
		}
		rows, newTokens := 0, 0
		for pi, ps := range passes {
			if len(ps.batch.Rows) == 0 {
				t.Errorf("budget %d: pass %d has no rows", budget, pi)
			}
			n := 0
			for _, ns := range ps.batch.New {
				n += len(ns.IDs)
				newTokens += len(ns.IDs)
			}
			for k, r := range ps.batch.Rows {
				n += len(r.IDs)
				if ps.rows[k].after != nil && !passes[ps.rows[k].after.pass].batch.New[ps.rows[k].after.idx].Keep {
					t.Errorf("budget %d: pass %d row %d continues a state its pass does not keep", budget, pi, k)
				}
				if ps.rows[k].after == nil && r.Cached == nil && (r.New < 0 || r.New >= len(ps.batch.New)) {
					t.Errorf("budget %d: pass %d row %d continues new state %d", budget, pi, k, r.New)
				}
			}
			if n > budget && len(ps.batch.Rows) > 1 {
				t.Errorf("budget %d: pass %d holds %d tokens in %d rows", budget, pi, n, len(ps.batch.Rows))
			}
			rows += len(ps.batch.Rows)
		}
		wantRows := 0
		for _, ch := range batch {
			wantRows += len(ch.c.rows)
		}
		if rows != wantRows || newTokens != len(states[0])+len(states[1]) {
			t.Errorf("budget %d: %d rows, %d new state tokens in %d passes", budget, rows, newTokens, len(passes))
		}
		switch budget {
		case 1 << 20, tokens:
			if len(passes) != 1 {
				t.Errorf("budget %d: %d passes, want 1", budget, len(passes))
			}
		case 1:
			if len(passes) != wantRows {
				t.Errorf("budget 1: %d passes, want one per row (%d)", len(passes), wantRows)
			}
		}
	}
}

// BenchmarkPredictorConcurrent has 32 clients send the golden requests with the cache off (every state new), on
// the batched CPU backend and on the per-state path.
func BenchmarkPredictorConcurrent(b *testing.B) {
	s := goldenSets(b)[0]
	reqs := smallRequests(b, s)
	for _, device := range []string{"cpu", eachName} {
		b.Run(device, func(b *testing.B) {
			p := loadGolden(b, s, Options{PrefixCache: -1, Device: Device(device), DType: "fp32"})
			const clients = 32
			for b.Loop() {
				var wg sync.WaitGroup
				for c := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if _, err := p.Do(b.Context(), fromSysRequest(reqs[c%len(reqs)])); err != nil {
							b.Error(err)
						}
					}()
				}
				wg.Wait()
			}
			st := p.Stats().Batches
			b.ReportMetric(float64(b.N*clients)/b.Elapsed().Seconds(), "requests/s")
			b.ReportMetric(float64(st.Requests)/float64(st.Count), "requests/batch")
		})
	}
}
