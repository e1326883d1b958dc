package kev

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/pyjson"
	"github.com/kevgo/kev/internal/systemone"
)

// TestSmallFirst checks which requests of a batch run in it when passes may be preempted: those whose share is at
// most a quarter of the biggest go first, alone, while every bigger one has room to be overtaken; among those, again.
func TestSmallFirst(t *testing.T) {
	for _, c := range []struct {
		shares, room []int
		want         []bool
	}{
		{[]int{100, 200}, []int{100, 200}, []bool{true, true}},                             // within 4×: one batch
		{[]int{28, 1424}, []int{28, 1424}, []bool{true, false}},                            // the short one first
		{[]int{1424, 28}, []int{1424, 28}, []bool{false, true}},                            // whatever the queue order
		{[]int{28, 1424}, []int{28, 0}, []bool{true, true}},                                // the long one was overtaken enough
		{[]int{28, 200, 1424}, []int{28, 200, 1424}, []bool{true, false, false}},           // again among the rest
		{[]int{28, 200, 1424}, []int{28, 0, 1424}, []bool{true, true, false}},              // 200 cannot wait: 28 runs beside it
		{[]int{28, 1424, 2000}, []int{28, 1424, 0}, []bool{true, true, true}},              // one that cannot wait keeps all
		{[]int{50, 0, 1000, 60}, []int{50, 0, 1000, 60}, []bool{true, false, false, true}}, // 0: not in the batch
		{[]int{400, 100, 100}, []int{400, 100, 100}, []bool{false, true, true}},
	} {
		if got := smallFirst(c.shares, c.room); !slices.Equal(got, c.want) {
			t.Errorf("smallFirst(%v, %v) = %v, want %v", c.shares, c.room, got, c.want)
		}
	}
}

// TestDeferLong checks the books of a deferral: the deferred request counts the batch's tokens as overtaking it, is
// deferred again only while they are fewer than its share, and starts from nothing once it runs.
func TestDeferLong(t *testing.T) {
	e := &engine{}
	long, short := &call{}, &call{}
	for round, want := range []bool{false, false, false, false, true} { // 4 × 250 tokens overtake a 1,000-token share
		shares := []int{1000, 250}
		e.deferLong([]*call{long, short}, shares)
		if ran := shares[0] > 0; ran != want {
			t.Fatalf("round %d: the long request ran %v, want %v (overtaken by %d tokens)", round, ran, want, long.overtaken)
		}
		if shares[1] != 250 || short.overtaken != 0 {
			t.Fatalf("round %d: the short request's share %d, overtaken %d", round, shares[1], short.overtaken)
		}
		if !want && long.overtaken != 250*(round+1) {
			t.Fatalf("round %d: overtaken by %d tokens, want %d", round, long.overtaken, 250*(round+1))
		}
	}
	if long.overtaken != 0 || e.deferrals != 4 {
		t.Errorf("after it ran: overtaken %d, %d deferrals; want 0, 4", long.overtaken, e.deferrals)
	}

	// A part of a Separate or Permute request weighs preemptRatio times its share: a request of another client up
	// to its size goes first, a bigger one shares its batch.
	part := &call{part: true}
	for _, c := range []struct {
		other int
		ran   bool
	}{{500, false}, {1000, false}, {1500, true}} {
		shares := []int{1000, c.other}
		e.deferLong([]*call{part, &call{}}, shares)
		part.overtaken = 0
		if ran := shares[0] > 0; ran != c.ran || shares[1] != c.other {
			t.Errorf("a 1,000-token part beside a %d-token request: shares %v, want the part in the batch %v", c.other, shares, c.ran)
		}
	}
}

// encodedTokens returns the tokens req costs a replica with nothing cached: its state and its rows.
func encodedTokens(t *testing.T, p *Predictor, req *systemone.Request) int {
	t.Helper()
	rec, err := systemone.ToRecord(req, systemone.RecordOptions{})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := systemone.Encode(p.tok, rec, systemone.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return enc.InputTokens()
}

// TestPreempt queues short requests while a long request's pass runs (after its first layer): they run in a batch
// nested between two of its layers, not after it. By the replica's own record: one preempting batch, of at most a
// quarter of the pass's tokens, ran before the pass's next layer, and had answered every short request by then;
// the long pass then ran its remaining layers. Every answer is, bit for bit, the request's own alone.
func TestPreempt(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	short, long := reqs[5], bigRequest(reqs[1], 20) // 102 tokens; 60 questions in one pass
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	wantShort, wantLong := probs(t, alone, short), probs(t, alone, long)

	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := p.engines[0]
	if !e.preempt {
		t.Fatal("the CPU replica's passes may not be preempted")
	}
	passTokens, shortTokens := encodedTokens(t, p, long), encodedTokens(t, p, short)
	n := passTokens / preemptRatio / shortTokens // as many as one preempting batch takes
	if n < 2 || passTokens > e.passTokens {
		t.Fatalf("a %d-token pass takes %d short requests of %d tokens: change the requests", passTokens, n, shortTokens)
	}

	type event struct {
		layer    int // the long pass asks before this layer
		answered int // requests answered by then
	}
	var events []event // model goroutine
	var nested []int   // the requests of each preempting batch (model goroutine)
	var got [][][]float32
	var wg sync.WaitGroup
	e.onLayer = func(layer int) {
		if e.nested {
			return
		}
		e.mu.Lock()
		events = append(events, event{layer, e.requests})
		e.mu.Unlock()
		if layer != 1 || got != nil {
			return
		}
		got = make([][][]float32, n)
		for i := range n {
			wg.Go(func() { got[i] = probs(t, p, short) })
		}
		waitAccepted(t, p, 1+n) // queued before the pass goes on: the yield after this hook takes them
	}
	onBatch := func(k int) {
		if e.nested {
			nested = append(nested, k)
		}
	}
	p.onBatch.Store(&onBatch)
	gotLong := probs(t, p, long)
	wg.Wait()
	e.onLayer = nil
	p.onBatch.Store(nil)

	nl := e.model.Config.NumLayers
	want := []event{{0, 0}, {1, 0}}
	for l := 2; l < nl; l++ {
		want = append(want, event{l, n})
	}
	if !slices.Equal(events, want) {
		t.Errorf("the long pass asked before each layer, with the requests answered by then: %v, want %v", events, want)
	}
	if !slices.Equal(nested, []int{n}) || e.preemptions != 1 {
		t.Errorf("preempting batches %v (%d counted), want one of the %d short requests", nested, e.preemptions, n)
	}
	if n*shortTokens > passTokens/preemptRatio {
		t.Errorf("a preempting batch of %d tokens beside a %d-token pass", n*shortTokens, passTokens)
	}
	if !equalProbs(gotLong, wantLong) {
		t.Error("the preempted request's probabilities differ from its own alone")
	}
	for i, g := range got {
		if !equalProbs(g, wantShort) {
			t.Errorf("short request %d: probabilities differ from its own alone", i)
		}
	}
	if st := p.Stats(); st.Batches.Count != 2 || st.Batches.Requests != 1+n || st.Replicas[0].QueuedTokens != 0 ||
		len(e.held) != 0 || len(e.started) != 0 {
		t.Errorf("stats %+v, %d states held, %d started: want 2 batches, nothing left", st, len(e.held), len(e.started))
	}
}

// TestPreemptCached preempts a pass whose batch reads a cached state with a batch that evicts it (a one-state
// cache): the preempted pass still reads it, its answers are its own, and the state is freed once neither needs it.
func TestPreemptCached(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	short, long := reqs[5], bigRequest(reqs[1], 20)
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	wantShort, wantLong := probs(t, alone, short), probs(t, alone, long)

	p := loadGolden(t, s, Options{PrefixCache: 1})
	e := p.engines[0]
	probs(t, p, reqs[1]) // long's state, cached
	var gotShort [][]float32
	done := make(chan struct{})
	e.onLayer = func(layer int) {
		if layer == 1 && !e.nested && gotShort == nil {
			gotShort = [][]float32{}
			go func() {
				defer close(done)
				gotShort = probs(t, p, short) // its state replaces long's in the cache
			}()
			waitAccepted(t, p, 3)
		}
	}
	gotLong := probs(t, p, long)
	<-done
	e.onLayer = nil
	if !equalProbs(gotLong, wantLong) || !equalProbs(gotShort, wantShort) {
		t.Error("probabilities differ from the requests' own alone")
	}
	st := p.Stats()
	if e.preemptions != 1 || st.PrefixCache.Hits != 1 || st.PrefixCache.CachedStates != 1 {
		t.Errorf("%d preemptions, cache %+v: want 1, one hit, one state", e.preemptions, st.PrefixCache)
	}
	if len(e.held) != 1 {
		t.Errorf("%d states held, want the cached one", len(e.held))
	}
}

// TestShortGoesFirst queues a long request, then a short one, before the replica takes a batch: the short one runs
// first, in a batch of its own, rather than inside the long one's pass, which runs next. Then a long request whose
// deferrals have reached its own tokens runs beside the short requests queued with it.
func TestShortGoesFirst(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	short, long := reqs[5], bigRequest(reqs[1], 20)
	release := holdReplicas(t)
	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := p.engines[0]
	shortTokens := encodedTokens(t, p, short)
	var longWaited, shortWaited int
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _, r, err := p.submit(context.Background(), long)
		if err != nil {
			t.Error(err)
		}
		longWaited = r.waited
	})
	waitAccepted(t, p, 1)
	wg.Go(func() {
		_, _, r, err := p.submit(context.Background(), short)
		if err != nil {
			t.Error(err)
		}
		shortWaited = r.waited
	})
	waitAccepted(t, p, 2)
	release()
	wg.Wait()
	if shortWaited != 0 || longWaited != shortTokens || e.deferrals != 1 || p.Stats().Batches.Count != 2 {
		t.Errorf("the short request waited for %d tokens, the long one for %d, %d deferrals, %d batches; want 0, %d, 1, 2",
			shortWaited, longWaited, e.deferrals, p.Stats().Batches.Count, shortTokens)
	}

	// The long request again, with enough short ones behind it to overtake it all at once; one more short request
	// arrives before the next batch: the long request goes no later than that batch, beside it.
	longTokens := encodedTokens(t, p, long)
	shorts := longTokens/shortTokens + 1
	var takes int // model goroutine
	e.mu.Lock()
	taken0, deferrals0 := e.batches, e.deferrals
	e.mu.Unlock()
	hold := make(chan struct{})
	e.mu.Lock() // the replica reads its hook after its next take, which locks mu after this
	e.beforeTake = func(int) {
		if takes++; takes == 1 {
			<-hold
		}
		if takes == 2 { // the short requests' batch has run: one more comes before the next is taken
			wg.Go(func() { probs(t, p, short) })
			waitAccepted(t, p, 5+shorts)
		}
	}
	e.mu.Unlock()
	probs(t, p, short) // the replica is waiting for work again: the hook runs from its next take
	wg.Go(func() { probs(t, p, long) })
	waitAccepted(t, p, 4)
	for range shorts {
		wg.Go(func() { probs(t, p, short) })
	}
	waitAccepted(t, p, 4+shorts)
	close(hold)
	wg.Wait()
	e.mu.Lock()
	batches, deferrals := e.batches-taken0, e.deferrals-deferrals0
	e.mu.Unlock()
	if batches != 3 || deferrals != 1 { // the warm one, the short ones, the long one beside the last short one
		t.Errorf("%d batches, %d deferrals; want 3 and 1: a long request overtaken by its own tokens waits no more", batches, deferrals)
	}
}

// TestTakeShort checks the batch that preempts a pass: whole requests in queue order while their tokens fit the
// limit, skipping those that do not fit and those whose caller has gone, which keep their places in the queue.
func TestTakeShort(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := newEngine(0, CPU, p.engines[0].backend, nil, nil, Options{MaxBatch: 64}, nil, p.log)
	newCallOf := func(ctx context.Context, req *systemone.Request) *call {
		rec, err := systemone.ToRecord(req, systemone.RecordOptions{})
		if err != nil {
			t.Fatal(err)
		}
		enc, err := systemone.Encode(p.tok, rec, systemone.EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return newCall(ctx, enc)
	}
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	a, long, b, g, c := newCallOf(t.Context(), reqs[5]), newCallOf(t.Context(), reqs[1]), newCallOf(t.Context(), reqs[0]),
		newCallOf(gone, reqs[5]), newCallOf(t.Context(), reqs[5])
	for _, x := range []*call{a, long, b, g, c} {
		if err := e.enqueue(x, e.cost(x)); err != nil {
			t.Fatal(err)
		}
	}
	ta, tb := e.remaining(a), e.remaining(b)
	batch := e.takeShort(ta + tb + ta - 1) // a and b; c would not fit beside them
	var got []*call
	for _, ch := range batch {
		got = append(got, ch.c)
		if ch.from != 0 || ch.to != len(ch.c.rows) || ch.tokens != e.remaining(ch.c) {
			t.Errorf("chunk %+v: want the whole request", ch)
		}
	}
	if !slices.Equal(got, []*call{a, b}) || !slices.Equal(e.queue, []*call{long, g, c}) {
		t.Errorf("took %d requests, left %d: want a and b, then long, gone and c in order", len(got), len(e.queue))
	}
	if e.runningTokens != ta+tb || e.takenTokens != ta+tb {
		t.Errorf("running %d, taken %d tokens; want %d", e.runningTokens, e.takenTokens, ta+tb)
	}
	if batch := e.takeShort(e.remaining(c) - 1); batch != nil || len(e.queue) != 3 {
		t.Errorf("a limit below every request's tokens took %d requests, left %d", len(batch), len(e.queue))
	}
}

// TestPartsGoLast queues a part of a Separate request (one question on the state), then a request of about its
// size from another client, before the replica takes a batch: the other client's request goes first, on its own,
// rather than share the part's pass; the parts follow.
func TestPartsGoLast(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	sep := reqs[1]   // three questions on a 360-token state: three parts of about 430 tokens
	other := reqs[3] // 402 tokens: more than a quarter of a part, so only a part's weight puts it first
	release := holdReplicas(t)
	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := p.engines[0]
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := systemone.Separate(t.Context(), p.do, sep, p.tok); err != nil {
			t.Error(err)
		}
	})
	waitAccepted(t, p, 1)
	var waited int
	wg.Go(func() {
		_, _, r, err := p.submit(t.Context(), other)
		if err != nil {
			t.Error(err)
		}
		waited = r.waited
	})
	waitAccepted(t, p, 2)
	release()
	wg.Wait()
	if waited != 0 || e.deferrals != 1 {
		t.Errorf("the other client's request waited for %d tokens, %d deferrals; want 0 and 1 (the first part)", waited, e.deferrals)
	}
	if st := p.Stats(); st.Batches.Count != 1+len(sep.Questions) || st.Batches.Requests != 1+len(sep.Questions) {
		t.Errorf("%+v: want a batch per request", st.Batches)
	}
}

// TestPreemptPart queues a request of another client while a pass of a Separate request's part runs: the request,
// more than a quarter of the part's tokens but less than the part, preempts the pass (a part weighs four times its
// tokens) and is answered before the pass's next layer.
func TestPreemptPart(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	sep, other := reqs[1], reqs[0] // parts of about 430 tokens (nothing cached); 135 tokens
	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := p.engines[0]
	var answeredAt []int // the requests answered when the first part's pass asks before each layer
	var wg sync.WaitGroup
	e.onLayer = func(layer int) {
		if e.nested || len(answeredAt) == e.model.Config.NumLayers { // the first part's pass only
			return
		}
		e.mu.Lock()
		answeredAt = append(answeredAt, e.requests)
		e.mu.Unlock()
		if layer == 1 {
			wg.Go(func() { probs(t, p, other) })
			waitAccepted(t, p, 2)
		}
	}
	if _, err := systemone.Separate(t.Context(), p.do, sep, p.tok); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	e.onLayer = nil
	want := []int{0, 0}
	for len(want) < e.model.Config.NumLayers {
		want = append(want, 1)
	}
	if !slices.Equal(answeredAt, want) || e.preemptions != 1 {
		t.Errorf("requests answered before each layer of the part's pass: %v, %d preemptions; want %v, 1", answeredAt, e.preemptions, want)
	}
}

// longChoice returns a request of one choice question of n options (one question row of about 5n tokens) on
// req's state.
func longChoice(req *systemone.Request, n int) *systemone.Request {
	q := systemone.Question{Type: systemone.TypeChoice, Instructions: pyjson.String("Which one?")}
	for i := range n {
		q.Options = append(q.Options, systemone.Option{Name: fmt.Sprintf("o%d", i)})
	}
	return &systemone.Request{Model: req.Model, State: req.State, Questions: []systemone.QuestionEntry{{ID: "q", Question: q}}}
}

// TestPreemptPiece queues a short request while the first layer of a long question row's pass runs in pieces (as
// they do while short requests come): it runs in a batch nested between two pieces of that layer, before the
// layer's next piece, not at the next layer. By the replica's own record: the points between pieces the long pass
// reached, with the requests answered by then, and one preemption. Every answer is, bit for bit, the request's own
// alone, where the long row runs whole.
func TestPreemptPiece(t *testing.T) {
	s := goldenSets(t)[0]
	reqs := goldenRequests(t, s)
	short, long := reqs[5], longChoice(reqs[5], 120)
	alone := loadGolden(t, s, Options{PrefixCache: -1})
	wantShort, wantLong := probs(t, alone, short), probs(t, alone, long)
	if n := alone.engines[0].pauses.Load(); n != 0 {
		t.Fatalf("%d points between pieces alone, want none: a pass runs its layers whole when no short request comes", n)
	}

	p := loadGolden(t, s, Options{PrefixCache: -1})
	e := p.engines[0]
	e.chunkIdle = -1 // pieces always
	if longTokens := encodedTokens(t, p, long); longTokens < 4*e.chunkTokens {
		t.Fatalf("a %d-token request beside %d-token pieces: make it longer", longTokens, e.chunkTokens)
	}
	type event struct {
		layer, piece int // the long pass reached the point before this piece of this layer
		answered     int // requests answered by then
	}
	var events []event // model goroutine
	piece := 0
	var gotShort [][]float32
	var wg sync.WaitGroup
	e.onLayer = func(int) {
		if !e.nested {
			piece = 0
		}
	}
	e.onPause = func(layer int) {
		if e.nested {
			return
		}
		piece++
		e.mu.Lock()
		events = append(events, event{layer, piece, e.requests})
		e.mu.Unlock()
		if layer == 0 && piece == 1 {
			wg.Go(func() { gotShort = probs(t, p, short) })
			waitAccepted(t, p, 2) // queued before the pass goes on: the yield after this hook takes it
		}
	}
	gotLong := probs(t, p, long)
	wg.Wait()
	e.onLayer, e.onPause = nil, nil

	if len(events) < 2 || events[0] != (event{0, 1, 0}) || events[1] != (event{0, 2, 1}) {
		t.Errorf("the long pass's first points between pieces, with the requests answered by then: %v, want {0 1 0} {0 2 1} first", events)
	}
	for _, ev := range events {
		if ev.layer > 0 && ev.answered != 1 {
			t.Errorf("at piece %d of layer %d, %d requests answered, want 1", ev.piece, ev.layer, ev.answered)
		}
	}
	if e.preemptions != 1 {
		t.Errorf("%d preemptions, want 1", e.preemptions)
	}
	if !equalProbs(gotLong, wantLong) || !equalProbs(gotShort, wantShort) {
		t.Error("probabilities differ from the requests' own alone")
	}
}

// TestChunkIdle checks when a replica runs a pass's layers in pieces: only while short requests come (a
// preemption within chunkIdle), or always with chunkIdle negative.
func TestChunkIdle(t *testing.T) {
	e := &engine{chunkTokens: 128, chunkIdle: time.Second}
	for _, c := range []struct {
		name      string
		idle      time.Duration
		lastShort time.Time
		want      int
	}{
		{"no preemption yet", time.Second, time.Time{}, 0},
		{"a preemption just now", time.Second, time.Now(), 128},
		{"a preemption long ago", time.Second, time.Now().Add(-time.Hour), 0},
		{"always", -1, time.Time{}, 128},
	} {
		e.chunkIdle, e.lastShort = c.idle, c.lastShort
		if got := e.chunk(0); got != c.want {
			t.Errorf("%s: pieces of %d tokens, want %d", c.name, got, c.want)
		}
	}
}
