package kev

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// gatherRecord returns the first replica's record of its gathers: those that waited, those that waited out their
// window, and the window of the last one that waited.
func gatherRecord(p *Predictor) (waits, timeouts int, window time.Duration) {
	e := p.engines[0]
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gatherWaits, e.gatherTimeouts, e.lastGatherWindow
}

// setGather sets the gathering window of every replica of p.
func setGather(p *Predictor, max time.Duration, frac float64) {
	for _, e := range p.engines {
		e.mu.Lock()
		e.gatherMax, e.gatherFrac = max, frac
		e.mu.Unlock()
	}
}

// TestGatherMergesClients runs clients that each send their next request when answered. The first batches take
// what has arrived when the model goroutine wakes (on a busy machine a client's goroutine may start a few batches
// late); without gathering, the clients answered by one batch return while the next runs, and batches alternate
// between groups for good. With gathering (a window long enough for any return here), a batch waits for the
// clients the previous one answered, so once a batch holds every client they run together: every later batch
// holds the clients that have requests left (the sizes never grow again), only a batch some of whose clients
// were done waits out the window (the batcher's record says which did), and the answers are those of the
// requests alone.
func TestGatherMergesClients(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	small := reqs[5]
	p := loadGolden(t, s, Options{})
	want := probs(t, p, small)
	const window = 5 * time.Second // long enough that a client never takes it to come back, even on a busy machine
	setGather(p, window, 1e6)
	_, timeouts0, _ := gatherRecord(p)
	batchSizes := recordBatches(t, p)

	const clients, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan string, clients*each)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if got := probs(t, p, small); !equalProbs(got, want) {
					errs <- "a gathered request's probabilities differ from the request's alone"
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	sizes := batchSizes()
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != clients*each {
		t.Fatalf("batches %v hold %d requests, want %d", sizes, total, clients*each)
	}
	full := slices.Index(sizes, clients)
	if full < 0 {
		t.Fatalf("%d clients × %d requests ran in batches %v, none of them all the clients", clients, each, sizes)
	}
	drops := 0 // batches after which some clients were done
	for i := full + 1; i < len(sizes); i++ {
		if sizes[i] > sizes[i-1] {
			t.Errorf("batches %v: batch %d holds more clients than the one before, so gathered clients split", sizes, i)
		}
		if sizes[i] < sizes[i-1] {
			drops++
		}
	}
	// Only a batch whose answered clients do not all come back waits out the window: one after which clients
	// were done, or the last.
	if _, timeouts, _ := gatherRecord(p); timeouts-timeouts0 > drops+1 {
		t.Errorf("%d of %d batches %v waited out the %v window, want at most %d", timeouts-timeouts0, len(sizes), sizes, window, drops+1)
	}
}

// TestGatherLoneClient checks that a client alone is never held back: its next request is the arrival that
// matches the previous batch's answer, so no batch waits for the window (the batcher records every gather that
// waits).
func TestGatherLoneClient(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	p := loadGolden(t, s, Options{})
	probs(t, p, reqs[5])
	setGather(p, 5*time.Second, 1e6)
	waits0, _, _ := gatherRecord(p)
	for i := range 5 {
		probs(t, p, reqs[i%len(reqs)])
	}
	if waits, _, _ := gatherRecord(p); waits != waits0 {
		t.Errorf("5 requests of one client: %d batches waited for the gathering window, want none", waits-waits0)
	}
	if n := p.Stats().Batches.Count; n != 6 {
		t.Errorf("%d batches, want 6 (one per request)", n)
	}
}

// TestGatherGivesUp checks that a batch whose answered clients do not come back waits no longer than the window:
// two requests answered together, then one of the two clients sends another and the other never does. The
// batcher's record says that the batch waited once, for a window of at most the one set, and gave up.
func TestGatherGivesUp(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	release := holdReplicas(t, 0) // the warm-up request runs, then the two wait to be taken together
	p := loadGolden(t, s, Options{})
	probs(t, p, reqs[5])
	const window = 300 * time.Millisecond
	setGather(p, window, 1e6)
	var wg sync.WaitGroup
	for _, r := range reqs[3:5] { // of about the same size: they share a batch
		wg.Add(1)
		go func() {
			defer wg.Done()
			probs(t, p, r)
		}()
	}
	waitAccepted(t, p, 3)
	release()
	wg.Wait()
	if n := p.Stats().Batches.Count; n != 2 {
		t.Fatalf("%d batches, want 2 (the warm-up request, then the two together)", n)
	}
	waits0, timeouts0, _ := gatherRecord(p)
	probs(t, p, reqs[5])
	waits, timeouts, w := gatherRecord(p)
	// On a busy machine the window may have passed before the request came: then the batch gives up unwaited.
	if timeouts-timeouts0 != 1 || waits-waits0 > 1 || w > window {
		t.Errorf("a request whose batch-mate never came back: %d gathers gave up, %d waited, the last for %v; want 1, ≤ 1, ≤ %v",
			timeouts-timeouts0, waits-waits0, w, window)
	}
}

// TestBalancedBatches queues requests that need more tokens than one batch takes, with the replica held, and
// checks that the batcher splits them into equal batches rather than fill the first and leave the rest for the
// next (see allot): four requests of s tokens with a budget of 3.5 s run as two and two; with 4 s, together.
func TestBalancedBatches(t *testing.T) {
	s := goldenSets(t)[0]
	small := goldenRequests(t, s)[5]
	for _, c := range []struct {
		halves int   // the budget in halves of a request's tokens
		want   []int // the batches' sizes
	}{{7, []int{2, 2}}, {8, []int{4}}} {
		release := holdReplicas(t, 0) // the first request runs, then the four wait to be taken
		p := loadGolden(t, s, Options{})
		want := probs(t, p, small)
		e := p.engines[0]
		e.mu.Lock()
		size := e.takenTokens // the first request's
		e.sliceTokens = size * c.halves / 2
		e.mu.Unlock()
		batchSizes := recordBatches(t, p)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if got := probs(t, p, small); !equalProbs(got, want) {
					t.Error("a request's probabilities differ from its own alone")
				}
			}()
		}
		waitAccepted(t, p, 5)
		release()
		wg.Wait()
		if sizes := batchSizes(); !slices.Equal(sizes, c.want) {
			t.Errorf("4 requests of %d tokens, a budget of %d: batches %v, want %v", size, e.sliceTokens, sizes, c.want)
		}
		testBeforeTake = nil
	}
}

// recordBatches records the sizes of the batches p runs from now until the test ends; the function it returns
// gives them so far.
func recordBatches(t *testing.T, p *Predictor) func() []int {
	var mu sync.Mutex
	var sizes []int
	f := func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}
	p.onBatch.Store(&f)
	t.Cleanup(func() { p.onBatch.Store(nil) })
	return func() []int {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sizes)
	}
}
