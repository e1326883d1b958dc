package kev

import (
	"sync"
	"testing"
	"time"
)

// setGather sets the gathering window of every replica of p.
func setGather(p *Predictor, max time.Duration, frac float64) {
	for _, e := range p.engines {
		e.mu.Lock()
		e.gatherMax, e.gatherFrac = max, frac
		e.mu.Unlock()
	}
}

// TestGatherMergesClients runs clients that each send their next request when answered. The first batch takes
// what has arrived when the model goroutine wakes; without gathering, the clients answered by one batch return
// while the next runs, and batches alternate between the two groups for good. With gathering (a window long
// enough for any return here), every batch after the first waits for the clients the previous one answered, so
// the clients run together: at most one batch more than each client's requests, no batch but the last waits out
// the window, and the answers are those of the requests alone.
func TestGatherMergesClients(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	small := reqs[5]
	p := loadGolden(t, s, Options{})
	want := probs(t, p, small)
	const window = time.Second
	setGather(p, window, 1e6)
	var mu sync.Mutex
	var sizes []int
	f := func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}
	p.onBatch.Store(&f)
	defer p.onBatch.Store(nil)

	const clients, each = 4, 5
	start := time.Now()
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
	elapsed := time.Since(start)
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != clients*each {
		t.Fatalf("batches %v hold %d requests, want %d", sizes, total, clients*each)
	}
	if len(sizes) > each+1 {
		t.Errorf("%d clients × %d requests ran in %d batches %v, want at most %d", clients, each, len(sizes), sizes, each+1)
	}
	// Only a batch whose answered clients do not all come back waits out the window: at most the last one (a
	// client that ran in the first batch finishes one batch early).
	if elapsed > 3*window {
		t.Errorf("%d batches took %v: batches waited for the %v window though their clients had come back", len(sizes), elapsed, window)
	}
}

// TestGatherLoneClient checks that a client alone is never held back: its next request is the arrival that
// matches the previous batch's answer, so no batch waits for the window (5 s here; the requests take far less).
func TestGatherLoneClient(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	p := loadGolden(t, s, Options{})
	probs(t, p, reqs[5])
	setGather(p, 5*time.Second, 1e6)
	start := time.Now()
	for i := range 5 {
		probs(t, p, reqs[i%len(reqs)])
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("5 requests of one client took %v: a batch waited for the gathering window", d)
	}
}

// TestGatherGivesUp checks that a batch whose answered clients do not come back waits no longer than the window:
// two requests answered together, then one of the two clients sends another and the other never does.
func TestGatherGivesUp(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	p := loadGolden(t, s, Options{})
	probs(t, p, reqs[5])
	const window = 300 * time.Millisecond
	setGather(p, window, 1e6)
	var wg sync.WaitGroup
	for _, r := range reqs[4:6] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probs(t, p, r)
		}()
	}
	wg.Wait()
	start := time.Now()
	probs(t, p, reqs[5])
	d := time.Since(start)
	if d > window+2*time.Second {
		t.Errorf("a request whose batch-mate never came back took %v, the window is %v", d, window)
	}
}
