package kev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kevgo/kev/internal/systemone"
)

// TestAllot checks how a batch's token budget is shared: whole requests in queue order while they fit, slices for
// requests bigger than the budget (as big as the biggest whole request, or an equal part of the budget).
func TestAllot(t *testing.T) {
	for _, c := range []struct {
		rem, shares []int
		whole       []bool
	}{
		{[]int{100, 200}, []int{100, 200}, []bool{true, true}},
		{[]int{5000}, []int{1000}, []bool{false}},
		{[]int{5000, 3000}, []int{500, 500}, []bool{false, false}},
		{[]int{5000, 100, 300}, []int{300, 100, 300}, []bool{false, true, true}},
		{[]int{600, 600, 50}, []int{600, 0, 0}, []bool{true, false, false}}, // the second does not fit: queue order kept
		{[]int{1000, 1000}, []int{1000, 0}, []bool{true, false}},
		{[]int{4000, 1000}, []int{1000, 1000}, []bool{false, true}},
		// Whole requests past one budget are balanced over the batches they need.
		{[]int{300, 300, 300, 300}, []int{300, 300, 0, 0}, []bool{true, true, false, false}},
		{[]int{257, 257, 257, 257}, []int{257, 257, 0, 0}, []bool{true, true, false, false}},
		{[]int{200, 200, 200, 200, 200, 200}, []int{200, 200, 200, 0, 0, 0}, []bool{true, true, true, false, false, false}},
		{[]int{900, 200}, []int{900, 0}, []bool{true, false}},
	} {
		shares, whole := allot(c.rem, 1000)
		if !slices.Equal(shares, c.shares) || !slices.Equal(whole, c.whole) {
			t.Errorf("allot(%v, 1000) = %v %v, want %v %v", c.rem, shares, whole, c.shares, c.whole)
		}
	}
}

func TestBalancedBudget(t *testing.T) {
	n257 := make([]int, 64)
	for i := range n257 {
		n257[i] = 257
	}
	for _, c := range []struct {
		rem          []int
		budget, want int
	}{
		{[]int{100, 200}, 1000, 1000},
		{[]int{300, 300, 300, 300}, 1000, 600},
		{n257, 16384, 8224}, // 64 clients of Kev's 6-question tickets: two groups of 32
		{n257[:63], 16384, 16384},
		{[]int{600, 600, 50}, 1000, 625},
		{[]int{900, 200}, 1000, 900},   // at least the biggest
		{[]int{5000, 300}, 1000, 1000}, // slices do not count
		{[]int{1000, 1000, 1000}, 1000, 1000},
	} {
		if got := balancedBudget(c.rem, c.budget); got != c.want {
			t.Errorf("balancedBudget(%v, %d) = %d, want %d", c.rem, c.budget, got, c.want)
		}
	}
}

// TestSplitInvariance runs a big request whose rows are split into slices over several batches, interleaved with
// small requests that arrive while it runs: every request's probabilities equal, bit for bit, those it gets alone
// in one batch, with the prefix cache on and off, on the batched CPU backend and on the per-state path; and the
// books balance after.
func TestSplitInvariance(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	big := bigRequest(reqs[1], 5) // 15 questions on a 360-token state: 1,425 tokens
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	wantBig := probs(t, alone, big)
	want := make([][][]float32, len(reqs))
	for i, r := range reqs {
		want[i] = probs(t, alone, r)
	}
	for _, tc := range []struct {
		name   string
		device Device
		cache  int
		slice  int
	}{
		{"cached", CPU, 4, 300},
		{"uncached", CPU, -1, 300},
		{"row slices", CPU, 4, 1},
		{"per state", eachName, 4, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := holdReplicas(t)
			p := loadGolden(t, s, Options{Device: tc.device, DType: "fp32", PrefixCache: tc.cache})
			e := p.engines[0]
			e.sliceTokens = tc.slice
			e.passTokens = 200 // passes inside a batch too
			var wg sync.WaitGroup
			var gotBig [][]float32
			wg.Add(1)
			go func() {
				defer wg.Done()
				gotBig = probs(t, p, big)
			}()
			waitAccepted(t, p, 1)
			got := make([][][]float32, len(reqs)+1)
			for i := range len(reqs) + 1 {
				k := i % len(reqs) // golden 0 twice: its second copy may hit the first's state
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i] = probs(t, p, reqs[k])
				}()
				waitAccepted(t, p, 2+i)
			}
			release()
			wg.Wait()
			if !equalProbs(gotBig, wantBig) {
				t.Errorf("big request in slices: %v, alone %v", gotBig, wantBig)
			}
			for i, g := range got {
				if k := i % len(reqs); !equalProbs(g, want[k]) {
					t.Errorf("golden %d beside the big one: %v, alone %v", k, g, want[k])
				}
			}
			st := p.Stats()
			t.Logf("%d batches, %d of them slices; cache %d hits %d misses", st.Batches.Count, st.Batches.Slices,
				st.PrefixCache.Hits, st.PrefixCache.Misses)
			if st.Batches.Slices < 2 || st.Batches.Requests != len(reqs)+2 || st.Replicas[0].QueuedTokens != 0 {
				t.Errorf("stats %+v", st)
			}
			if tc.cache > 0 && st.PrefixCache.Hits+st.PrefixCache.Misses != len(reqs)+2 {
				t.Errorf("%d hits + %d misses for %d requests", st.PrefixCache.Hits, st.PrefixCache.Misses, len(reqs)+2)
			}
			if n := len(e.started); n != 0 {
				t.Errorf("%d requests still started", n)
			}
			// Only the cache's states are held once the big request is done.
			if held, cached := len(e.held), st.PrefixCache.CachedStates; held != cached {
				t.Errorf("%d states held, %d cached", held, cached)
			}
			// The big request again, alone: its state from the cache when cached, the same answers.
			if got := probs(t, p, big); !equalProbs(got, wantBig) {
				t.Errorf("big request again: %v, want %v", got, wantBig)
			}
		})
	}
}

// TestSplitCancel cancels a big request between its slices: its caller gets the context's error, the model stops
// working on it, and its kept state is freed.
func TestSplitCancel(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	big := bigRequest(reqs[1], 40)
	ctx, cancel := context.WithCancel(context.Background())
	var armed atomic.Bool
	slicesRun := 0 // model goroutine only
	testBeforeTake = func(int) {
		if !armed.Load() {
			return
		}
		if slicesRun++; slicesRun == 3 { // two slices have run
			cancel()
		}
	}
	p := loadGolden(t, s, Options{PrefixCache: -1})
	testBeforeTake = nil
	p.engines[0].sliceTokens = 400
	armed.Store(true)
	if _, err := p.Do(ctx, fromSysRequest(big)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled big request: %v", err)
	}
	// The next request runs once the big one is dropped.
	if got := probs(t, p, reqs[0]); len(got) != len(reqs[0].Questions) {
		t.Fatalf("%v", got)
	}
	e := p.engines[0]
	st := p.Stats()
	if st.Batches.Requests != 1 || st.Replicas[0].QueuedTokens != 0 || len(e.started) != 0 || len(e.held) != 0 {
		t.Errorf("after the cancelled request: stats %+v, %d started, %d held", st, len(e.started), len(e.held))
	}
	if st.Batches.Count > 4 {
		t.Errorf("%d batches: the cancelled request kept running", st.Batches.Count)
	}
}

// TestMaxQuestions refuses a request over Options.MaxQuestions before it is queued, as a 422 admission error; no
// limit by default.
func TestMaxQuestions(t *testing.T) {
	s := goldenSets(t)[0]
	big := bigRequest(goldenRequests(t, s)[0], 4) // 12 questions
	p := loadGolden(t, s, Options{MaxQuestions: 10})
	_, err := p.Do(context.Background(), fromSysRequest(big))
	var qe *TooManyQuestionsError
	if !errors.As(err, &qe) || qe.Questions != 12 || qe.Limit != 10 {
		t.Fatalf("12 questions over a limit of 10: %v", err)
	}
	if detail, ok := systemone.AdmissionDetail(err); !ok || detail != "12 questions, over this server's limit of 10 per request: split them across requests" {
		t.Errorf("detail %q %v", detail, ok)
	}
	if st := p.Stats(); st.Batches.Requests != 0 {
		t.Errorf("refused request ran: %+v", st)
	}
	if _, err := p.Do(context.Background(), fromSysRequest(bigRequest(goldenRequests(t, s)[0], 3))); err != nil {
		t.Errorf("9 questions: %v", err)
	}
	if _, err := loadGolden(t, s, Options{}).Do(context.Background(), fromSysRequest(big)); err != nil {
		t.Errorf("no limit: %v", err)
	}
}

// TestBigRequestDoesNotStarve runs small requests that arrive while a request of hundreds of questions runs on
// the same replica, split into 1,024-token slices: by the batcher's own record, the model runs no more than one
// batch's tokens (the batch running when they arrive) before each small request starts, and their answers are
// their own. Without the slices a small request waited for the whole big one. The GPU test runs it at full size:
// 50,000 questions and the default 16,384-token passes.
func TestBigRequestDoesNotStarve(t *testing.T) {
	if err := starve(t, CPU, 480, 1024); err != nil {
		t.Error(err)
	}
}

// starve runs TestBigRequestDoesNotStarve on device: a request of questions questions (golden 1's three, repeated),
// slices of sliceTokens (0: the default). Seven small requests are queued while the replica runs the big request's
// first batch or holds before its second. It reports a small request that waited for more than one batch's tokens
// as an error. The slices are what it checks, so no pass is preempted (as on a GPU): TestPreempt checks that.
func starve(t *testing.T, device Device, questions, sliceTokens int) error {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	small := reqs[5] // 102 tokens
	big := bigRequest(reqs[1], questions/3)
	want := probs(t, loadGolden(t, s, Options{Device: device, PrefixCache: -1}), small)
	release := holdReplicas(t, 0) // the first batch (the big request's first slice) runs, the second waits
	p := loadGolden(t, s, Options{Device: device, PrefixCache: -1})
	e := p.engines[0]
	e.preempt = false
	if sliceTokens > 0 {
		e.sliceTokens = sliceTokens
	}
	bigDone := make(chan error, 1)
	go func() {
		_, _, _, err := p.submit(context.Background(), big)
		bigDone <- err
	}()
	waitAccepted(t, p, 1)
	const smalls = 7
	waited := make([]int, smalls)
	errs := make([]error, smalls)
	var wg sync.WaitGroup
	for i := range smalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, r, err := p.submit(context.Background(), small)
			switch {
			case err != nil:
				errs[i] = err
			case !equalProbs(r.probs, want):
				errs[i] = errors.New("a small request's probabilities differ from its own alone")
			}
			waited[i] = r.waited
		}()
	}
	waitAccepted(t, p, 1+smalls)
	release()
	wg.Wait()
	if err := <-bigDone; err != nil {
		return err
	}
	st := p.Stats()
	t.Logf("%s: small requests (%d questions) waited for %v tokens beside a %d-question request (%d batches, %d slices; a batch takes %d tokens)",
		device, len(small.Questions), waited, len(big.Questions), st.Batches.Count, st.Batches.Slices, e.sliceTokens)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if st.Batches.Slices < 2 {
		return fmt.Errorf("the big request ran in %d slices: make it bigger", st.Batches.Slices)
	}
	for i, w := range waited {
		if w > e.sliceTokens {
			return fmt.Errorf("small request %d waited for %d tokens of other work, over one batch's %d", i, w, e.sliceTokens)
		}
	}
	return nil
}
