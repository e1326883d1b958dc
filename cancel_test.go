package kev

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cancelAtLayer makes p's replica run hook the first time a pass reaches layer 1 (after its first layer ran).
func cancelAtLayer(p *Predictor, hook func()) {
	var once atomic.Bool
	p.engines[0].onLayer = func(layer int) {
		if layer == 1 && once.CompareAndSwap(false, true) {
			hook()
		}
	}
}

// TestCancelFreesEngine cancels a request whose pass is running (after its first layer): Do returns the context's
// error, the pass stops at its next layer — it runs none of its remaining layers, by the replica's own count — and
// the next request runs at once, with its own answers.
func TestCancelFreesEngine(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	small, big := reqs[5], bigRequest(reqs[1], 20) // 60 questions, one pass
	want := probs(t, loadGolden(t, s, Options{PrefixCache: -1}), small)
	p := loadGolden(t, s, Options{PrefixCache: -1, MaxBatch: 1}) // the big request's batch is its own
	e := p.engines[0]
	e.preempt = false // the small request waits behind the big pass, as on a GPU, rather than run inside it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan error, 1)
	var layersAtCancel int64
	cancelAtLayer(p, func() {
		layersAtCancel = e.layersRun.Load()
		cancel()
		// The caller has gone before the pass asks again: the next check is the one that must stop it.
		if err := <-returned; !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled request returned %v, want context.Canceled", err)
		}
	})
	stopped0 := e.passesStopped.Load()
	go func() {
		_, _, _, err := p.submit(ctx, big)
		returned <- err
	}()
	waitAccepted(t, p, 1)
	if got := probs(t, p, small); !equalProbs(got, want) {
		t.Error("the request after the cancelled one: probabilities differ from its own alone")
	}
	if n := e.passesStopped.Load() - stopped0; n != 1 {
		t.Errorf("%d passes stopped, want 1", n)
	}
	// The layers that ran after the cancel: the small request's own pass, none of the big pass's remaining ones.
	nl := int64(e.model.Config.NumLayers)
	if after := e.layersRun.Load() - layersAtCancel; after != nl {
		t.Errorf("%d layers ran after the cancel, want the next request's %d alone", after, nl)
	}
	if st := p.Stats(); st.Replicas[0].QueuedTokens != 0 || st.Batches.Queued != 0 {
		t.Errorf("requests or tokens left on the books: %+v", st)
	}
}

// TestCancelOneOfTwo cancels one of two requests that share a batch: the pass runs on for the other, whose answers
// are its own.
func TestCancelOneOfTwo(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	want := probs(t, loadGolden(t, s, Options{PrefixCache: -1}), reqs[4])
	release := holdReplicas(t)
	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := p.engines[0]
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	cancelAtLayer(p, func() {
		cancel()
		gone <- nil
	})
	go func() {
		_, _, _, err := p.submit(ctx, reqs[5])
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the cancelled request returned %v, want context.Canceled", err)
		}
	}()
	waitAccepted(t, p, 1)
	var got [][]float32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		got = probs(t, p, reqs[4])
	}()
	waitAccepted(t, p, 2)
	release()
	wg.Wait()
	<-gone
	if !equalProbs(got, want) {
		t.Error("the request beside the cancelled one: probabilities differ from its own alone")
	}
	if n := e.passesStopped.Load(); n != 0 {
		t.Errorf("%d passes stopped, want none: a request of the batch was still waiting", n)
	}
	if st := p.Stats(); st.Batches.Count != 1 {
		t.Errorf("%d batches, want the one of both", st.Batches.Count)
	}
}

// TestLoadCancelled checks that Load with an ended context loads nothing and returns the context's error.
func TestLoadCancelled(t *testing.T) {
	s := goldenSets(t)[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p, err := Load(ctx, s.kev, Options{Base: s.base})
	if !errors.Is(err, context.Canceled) || p != nil {
		t.Fatalf("Load with a cancelled context = %v, %v; want nil, context.Canceled", p, err)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Unix(1, 0))
	defer cancel()
	if _, err := Load(ctx, s.kev, Options{Base: s.base}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Load past its deadline = %v, want context.DeadlineExceeded", err)
	}
}

// TestShutdownBounded shuts a predictor down while a pass runs and a request waits behind it, with a context that
// ends: the pass stops at its next layer, both requests get ErrClosed, Shutdown returns the context's error, and
// later requests get ErrClosed.
func TestShutdownBounded(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	p := loadGolden(t, s, Options{PrefixCache: -1, MaxBatch: 1})
	e := p.engines[0]
	ctx, cancel := context.WithCancel(context.Background())
	shut := make(chan error, 1)
	cancelAtLayer(p, func() {
		waitAccepted(t, p, 2)
		go func() { shut <- p.Shutdown(ctx) }()
		cancel()
		for !e.abort.Load() { // Shutdown's context.AfterFunc runs on a goroutine of its own
			time.Sleep(time.Millisecond)
		}
	})
	errs := make(chan error, 2)
	for _, r := range reqs[4:6] {
		go func() {
			_, _, _, err := p.submit(context.Background(), r)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Errorf("a request running or queued at the shutdown returned %v, want ErrClosed", err)
		}
	}
	if err := <-shut; !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want context.Canceled", err)
	}
	if n := e.passesStopped.Load(); n != 1 {
		t.Errorf("%d passes stopped, want 1", n)
	}
	if _, err := p.Do(context.Background(), &Request{State: Text("x"), Questions: []QuestionEntry{{ID: "a", Question: Question{Type: "score"}}}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Shutdown = %v, want ErrClosed", err)
	}
}

// BenchmarkNextAfterCancel measures how long a small request sent when a big one is cancelled waits for its answer:
// the big request's pass is cancelled after its first layer, and the small request, queued behind it, is timed
// from the cancel to its answer (next_ms). For scale: the small request alone (alone_ms), the big request's whole
// pass (big_pass_ms, what the small one waited before a cancelled pass stopped) and one layer of it (layer_ms).
func BenchmarkNextAfterCancel(b *testing.B) {
	s := goldenSets(b)[0]
	reqs := goldenRequests(b, s)
	small, big := reqs[5], bigRequest(reqs[1], 60) // 180 questions, one pass
	p := loadGolden(b, s, Options{PrefixCache: -1, MaxBatch: 1})
	e := p.engines[0]
	timeIt := func(f func()) time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}
	const runs = 5
	var alone, pass time.Duration
	for range runs {
		alone += timeIt(func() { probs(b, p, small) })
		pass += timeIt(func() { probs(b, p, big) })
	}
	alone /= runs
	pass /= runs
	var next time.Duration
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithCancel(context.Background())
		returned := make(chan error, 1)
		var cancelled time.Time
		cancelAtLayer(p, func() {
			cancelled = time.Now()
			cancel()
			<-returned
		})
		p.mu.Lock()
		accepted := p.accepted
		p.mu.Unlock()
		go func() {
			_, _, _, err := p.submit(ctx, big)
			returned <- err
		}()
		waitAccepted(b, p, accepted+1)
		probs(b, p, small)
		next += time.Since(cancelled)
		cancel()
	}
	e.onLayer = nil
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(next/time.Duration(b.N)), "next_ms")
	b.ReportMetric(ms(alone), "alone_ms")
	b.ReportMetric(ms(pass), "big_pass_ms")
	b.ReportMetric(ms(pass/time.Duration(e.model.Config.NumLayers)), "layer_ms")
}

// TestCancelLaterPasses runs a batch of two requests in several passes, the live one's first, and cancels the
// other while the live one's passes run: the passes left, which work only for the cancelled request, stop before
// their first layer, the batch ends, and the live request's answers are its own.
func TestCancelLaterPasses(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	live, gone := reqs[5], bigRequest(reqs[1], 3) // 102 tokens; 9 questions on a 360-token state
	const passTokens = 400
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	alone.engines[0].passTokens = passTokens
	l0 := alone.engines[0].layersRun.Load()
	want := probs(t, alone, live)
	livePasses := (alone.engines[0].layersRun.Load() - l0) / int64(alone.engines[0].model.Config.NumLayers)
	t.Logf("the live request alone: %d passes of at most %d tokens", livePasses, passTokens)

	release := holdReplicas(t)
	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := p.engines[0]
	e.passTokens = passTokens
	e.preempt = false // one batch of both, as on a GPU (the live request is short enough to go first on its own)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Int64 // passes begun (layer 0 asked)
	e.onLayer = func(layer int) {
		if layer == 0 && started.Add(1) == 1 {
			cancel() // in the live request's first pass
		}
	}
	var got [][]float32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		got = probs(t, p, live)
	}()
	waitAccepted(t, p, 1)
	goneErr := make(chan error, 1)
	go func() {
		_, _, _, err := p.submit(ctx, gone)
		goneErr <- err
	}()
	waitAccepted(t, p, 2)
	l1, s1 := e.layersRun.Load(), e.passesStopped.Load()
	release()
	wg.Wait()
	if err := <-goneErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled request returned %v", err)
	}
	if !equalProbs(got, want) {
		t.Error("the live request's probabilities differ from its own alone")
	}
	nl := int64(e.model.Config.NumLayers)
	if ran, stopped := e.layersRun.Load()-l1, e.passesStopped.Load()-s1; ran != livePasses*nl || stopped != 1 || started.Load() != livePasses+1 {
		t.Errorf("%d layers ran in %d passes begun, %d stopped; want the live request's %d passes (%d layers) and one stopped",
			ran, started.Load(), stopped, livePasses, livePasses*nl)
	}
	if st := p.Stats(); st.Batches.Count != 1 || st.Batches.Requests != 1 || st.Replicas[0].QueuedTokens != 0 || st.Batches.Queued != 0 {
		t.Errorf("stats %+v: want one batch, one request answered, nothing left", st)
	}
}
