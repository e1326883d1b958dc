package kev

import (
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kevgo/kev/internal/prefixcache"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// engine is one replica of the model: a backend with its own copy of the weights and pointer head, its prefix
// cache, its queue, and the goroutine that alone runs the model. The predictor sends each request to one engine.
//
// Batches are bounded in tokens so that what arrives waits for about one pass: a batch takes whole requests in
// queue order while they fit sliceTokens, and a request too big for that (more tokens left than sliceTokens) runs
// a slice of its rows, then goes back to the end of the queue with its state kept for the rest. A slice is as many
// tokens as the biggest whole request of its batch, or an equal part of sliceTokens when no request runs whole:
// the big request shares the model fairly by tokens with what arrives while it runs.
//
// A pass is the smallest part of a request the batcher can split off (one question row can be a long one: a choice
// of hundreds of options), so on a backend that runs the operations of a pass one by one (the CPU) a request much
// shorter than a pass does not wait for it: it runs between two of the pass's layers, or two pieces of a layer
// while short requests come (see chunk), in a batch of its own (see yield), and a batch does not put it beside a
// request whose pass it could preempt so (see smallFirst). The model alone then takes about one piece of the long
// pass longer to answer it.
type engine struct {
	index   int
	device  Device
	log     *slog.Logger
	backend tensor.Backend
	model   *layers.Model
	pointer *layers.Pointer
	cache   *prefixcache.Cache[*layers.State]
	onBatch *atomic.Pointer[func(int)] // the predictor's
	files   io.Closer                  // the mapped weights files the backend reads (CPU), closed by close

	maxBatch    int           // requests one batch takes
	passTokens  int           // token budget of one model pass (Options.PassTokens)
	sliceTokens int           // token budget of one batch (Options.PassTokens)
	beforeTake  func(int)     // test hook: runs on the model goroutine before it takes a batch
	trimIdle    time.Duration // idle time after a batch before the backend's pooled memory goes back (< 0: never)

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []*call
	closed   bool
	done     chan struct{} // closed when the model goroutine has exited
	batches  int
	requests int                     // requests answered (a split request once)
	slices   int                     // batches that ran a slice of a request with rows left after it
	tokens   int                     // tokens charged for the requests queued or running: how long a new one waits
	pending  map[prefixcache.Key]int // states of queued requests not started yet, with their count
	trimDue  bool                    // the engine has been idle for trimIdle since its last batch
	trimmer  *time.Timer             // sets trimDue; model goroutine only

	// Gathering (see gather): requests enqueued so far, and of the last batch the requests it answered, the
	// arrivals count when it ended, the time its answers were out and how long it ran.
	arrivals, lastAnswered, arrivalsAtEnd int
	lastAnsweredTokens                    int // the tokens the last batch's answered requests were charged
	lastEnd                               time.Time
	lastPass                              time.Duration
	gatherMax                             time.Duration // the longest gather (≤ 0: never)
	gatherFrac                            float64       // the longest gather as a share of the last batch's time

	// The batcher's record, for tests: gathers that waited, those that gave up (the window passed, waiting or
	// not, with the clients not all back), and the window of the last one that waited; the tokens of the batches
	// taken so far and of the batch running now (see call.ahead).
	gatherWaits, gatherTimeouts int
	lastGatherWindow            time.Duration
	takenTokens, runningTokens  int

	// Preemption (see yield and smallFirst): preempt says whether short batches may run between the layers of a
	// longer pass (not on a backend that runs a pass as one unit, a tensor.Runner); preemptions counts the batches
	// that did (the engine's mu), deferrals the requests a batch left for a later one so that shorter ones would not
	// wait inside their pass (the engine's mu). Model goroutine only: nested is set while a preempting batch runs,
	// pinned holds the states the preempted pass's batch reads.
	preempt     bool
	preemptions int
	deferrals   int
	nested      bool
	pinned      []*layers.State
	// A pass that may be preempted runs each layer of more than chunkTokens tokens in pieces of about that many
	// (layers.Batch.Chunk) while short requests come: from a preemption until chunkIdle has passed without one
	// (negative: always). Short batches may then run between two pieces as between two layers (see yield). pauses
	// counts the points between two pieces that passes reached, onPause (a test hook) runs at each. Model
	// goroutine only, but for pauses.
	chunkTokens int
	chunkIdle   time.Duration
	lastShort   time.Time // the last preemption
	pauses      atomic.Int64
	onPause     func(layer int)

	// Cancellation (see stopper): abort stops the running pass and fails what is queued (Shutdown's context
	// ended); layersRun and passesStopped count the layers passes ran and the passes stopped because every request
	// they worked for had gone; onLayer, a test hook, runs before each layer.
	abort         atomic.Bool
	layersRun     atomic.Int64
	passesStopped atomic.Int64
	onLayer       func(layer int)

	// Model goroutine only.
	held       map[*layers.State]bool // states the cache holds and states of started requests
	started    map[*call]bool         // requests that have run a slice and wait for the rest
	warmPasses int                    // passes run by warmUp (inside Load, before the loop starts)
}

func newEngine(index int, device Device, backend tensor.Backend, model *layers.Model, pointer *layers.Pointer, opts Options, onBatch *atomic.Pointer[func(int)], log *slog.Logger) *engine {
	if opts.PassTokens <= 0 {
		opts.PassTokens = defaultPassTokens
	}
	e := &engine{
		index: index, device: device, log: log, backend: backend, model: model, pointer: pointer,
		cache:    prefixcache.New[*layers.State](opts.PrefixCache, opts.PrefixMinTokens, opts.PrefixMaxTokens),
		onBatch:  onBatch,
		maxBatch: opts.MaxBatch, passTokens: opts.PassTokens, sliceTokens: opts.PassTokens,
		trimIdle:  defaultTrimIdle,
		gatherMax: defaultGatherMax, gatherFrac: defaultGatherFrac,
		beforeTake: testBeforeTake,
		done:       make(chan struct{}),
		pending:    map[prefixcache.Key]int{},
		held:       map[*layers.State]bool{},
		started:    map[*call]bool{},
	}
	_, runner := backend.(tensor.Runner) // the CUDA backend: a pass is queued on the device, perhaps as one graph
	e.preempt = !runner
	if e.preempt && model != nil {
		e.chunkTokens, e.chunkIdle = chunkTokensPerLayer*model.Config.NumLayers, defaultChunkIdle
	}
	e.cond = sync.NewCond(&e.mu)
	return e
}

// cost returns the tokens c would add to the engine's work: its rows, and its state unless the engine has that
// state cached or queued already.
func (e *engine) cost(c *call) int {
	e.mu.Lock()
	queued := e.pending[c.key] > 0
	e.mu.Unlock()
	if queued || e.cache.Contains(c.key) {
		return c.rowTokens
	}
	return c.rowTokens + len(c.enc.StateIDs())
}

// load returns the tokens charged to the engine now.
func (e *engine) load() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tokens
}

// enqueue puts c at the end of the queue, charged cost tokens, unless the engine is closed.
func (e *engine) enqueue(c *call, cost int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	c.charged = cost
	e.tokens += cost
	e.pending[c.key]++
	c.pending = true
	c.ahead = e.takenTokens - e.runningTokens
	e.queue = append(e.queue, c)
	e.arrivals++
	e.cond.Signal()
	return nil
}

// remaining returns the tokens c has left to run: its rows from next on, and its state unless it has started or
// is cached.
func (e *engine) remaining(c *call) int {
	n := 0
	for _, r := range c.rows[c.next:] {
		n += len(r.IDs)
	}
	if !e.started[c] && !e.cache.Contains(c.key) {
		n += len(c.enc.StateIDs())
	}
	return n
}

// take waits for requests and returns the next batch, the chunks of at most maxBatch requests from the front of
// the queue: whole requests while they fit sliceTokens, a slice of each request bigger than that (see engine).
// Requests whose caller has gone are dropped. It returns nil once the engine is closed and the queue is empty.
func (e *engine) take() []chunk {
	e.mu.Lock()
	defer e.mu.Unlock()
	gathered := false
	for {
		for len(e.queue) == 0 && !e.closed {
			if e.trimDue {
				e.trimDue = false
				e.mu.Unlock()
				e.trim()
				e.mu.Lock()
				continue
			}
			e.cond.Wait()
		}
		if len(e.queue) == 0 {
			return nil
		}
		if !gathered {
			gathered = true
			e.gather()
		}
		var cands []*call
		var rem []int
		n := 0
		for n < len(e.queue) && len(cands) < e.maxBatch {
			c := e.queue[n]
			n++
			if c.gone() {
				e.drop(c)
				continue
			}
			if e.abort.Load() {
				e.drop(c)
				c.done <- result{err: ErrClosed}
				continue
			}
			cands = append(cands, c)
			rem = append(rem, e.remaining(c))
		}
		if len(cands) == 0 {
			clear(e.queue[:n])
			e.queue = e.queue[n:]
			continue
		}
		shares, whole := allot(rem, e.sliceTokens)
		if e.preempt {
			e.deferLong(cands, shares)
		}
		var batch []chunk
		left := e.queue[:0:0]
		for i, c := range cands {
			if shares[i] == 0 {
				left = append(left, c) // waits for a later batch, in its place
				continue
			}
			to := len(c.rows)
			if !whole[i] {
				to = c.next + 1
				t := rem[i] - c.rowsTokens(c.next, len(c.rows)) + len(c.rows[c.next].IDs) // the state, if it runs
				for to < len(c.rows) && t+len(c.rows[to].IDs) <= shares[i] {
					t += len(c.rows[to].IDs)
					to++
				}
			}
			batch = append(batch, chunk{c: c, from: c.next, to: to, tokens: shares[i]})
		}
		e.queue = append(left, e.queue[n:]...)
		tokens := batchTokens(batch)
		for _, ch := range batch {
			if ch.from == 0 {
				ch.c.waited = e.takenTokens - ch.c.ahead
			}
		}
		e.takenTokens += tokens
		e.runningTokens = tokens
		return batch
	}
}

// Gathering defaults: a batch waits at most this long, and at most this share of the last batch's time, for the
// requests the last batch answered to come back.
const (
	defaultGatherMax  = 8 * time.Millisecond
	defaultGatherFrac = 0.04
)

// gather (the engine's mu held, a request queued) waits briefly before a batch is taken for the requests the last
// batch answered to come back. Clients that send their next request when answered (a service's workers, a load
// test) otherwise split into cohorts: the requests that queue while a batch runs make the next batch, the ones it
// answers return while that one runs, and batches settle at half the clients each, alternating, where one pass of
// all of them costs less than two of half (on the H200, 64 requests in one pass take ~4 % less time each than in
// two passes of 32). It waits while the last batch's answers outnumber the requests enqueued since it ended, the
// queue holds fewer than maxBatch requests, the tokens queued and those the last batch answered fit one batch (else
// the clients coming back could not join it: see allot), and the window has not passed since the batch's answers
// went out: gatherMax, or gatherFrac of the batch's time if that is less. A lone client never waits: its own next
// request is the arrival that matches its answer.
func (e *engine) gather() {
	if e.gatherMax <= 0 || e.lastAnswered == 0 {
		return
	}
	deadline := e.lastEnd.Add(min(e.gatherMax, time.Duration(float64(e.lastPass)*e.gatherFrac)))
	short := func() bool {
		return e.arrivals-e.arrivalsAtEnd < e.lastAnswered && len(e.queue) < e.maxBatch &&
			e.tokens+e.lastAnsweredTokens <= e.sliceTokens && !e.closed
	}
	if !short() {
		return
	}
	d := time.Until(deadline)
	if d <= 0 {
		e.gatherTimeouts++ // the window passed before the batch could wait
		return
	}
	e.gatherWaits++
	e.lastGatherWindow = d
	wake := time.AfterFunc(d, func() {
		e.mu.Lock()
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	defer wake.Stop()
	for short() && time.Now().Before(deadline) {
		e.cond.Wait()
	}
	if short() {
		e.gatherTimeouts++
	}
}

// allot divides a batch's token budget among requests by the tokens they have left, in queue order: a request
// with no more than budget left runs whole while the whole ones fit (the first always), one with more runs a slice.
// A slice is as many tokens as the biggest whole request (so a small request batched with a big one waits about
// twice its own time), or budget divided among the slices when none runs whole. shares[i] is 0 for a request
// left for a later batch.
//
// Whole requests that need more than one budget between them are balanced: they fit ⌈their tokens / budget⌉
// batches, and each batch takes about an equal part (balancedBudget). Clients that send their next request when
// answered then settle into equal groups that take turns, each request waiting for the other group's pass and its
// own; filling the first batch to the brim instead leaves a few for the next, which wait two whole passes (64
// clients of 257-token requests need 16,450 tokens: batches of 63 left one request out each time, at twice the
// others' latency, the p99).
func allot(rem []int, budget int) (shares []int, whole []bool) {
	shares, whole = make([]int, len(rem)), make([]bool, len(rem))
	total, biggest, slices := 0, 0, 0
	full := false // a whole request did not fit: no more whole ones, to keep the queue's order
	fit := balancedBudget(rem, budget)
	for i, r := range rem {
		switch {
		case r > budget:
			slices++
		case !full && (total == 0 || total+r <= fit):
			whole[i], shares[i] = true, r
			total += r
			biggest = max(biggest, r)
		default:
			full = true
		}
	}
	slice := biggest
	if slice == 0 && slices > 0 {
		slice = budget / slices
	}
	for i, r := range rem {
		if r > budget {
			shares[i] = max(slice, 1)
		}
	}
	return shares, whole
}

// balancedBudget returns the tokens of whole requests a batch takes of those whose tokens left are rem (those of
// at most budget): budget when they all fit it, else their sum divided evenly among the ⌈sum / budget⌉ batches
// they need (at least the biggest of them).
func balancedBudget(rem []int, budget int) int {
	sum, biggest := 0, 0
	for _, r := range rem {
		if r <= budget {
			sum += r
			biggest = max(biggest, r)
		}
	}
	if sum <= budget || budget <= 0 {
		return budget
	}
	k := (sum + budget - 1) / budget
	return min(budget, max(biggest, (sum+k-1)/k))
}

// chunkTokensPerLayer sets the pieces of a pass that may be preempted: a layer of a longer pass runs in pieces of
// about chunkTokensPerLayer tokens for each of the model's layers, which cost about as much through one layer as a
// request of chunkTokensPerLayer tokens through all of them. A short request (a short ticket and a question or two:
// some 30 tokens) then waits for about half its own time for the piece under way, not for a whole layer of a long
// row (a choice of 255 options is a row of 1,424 tokens). Pieces of 32 tokens a layer made that wait its whole time:
// the small request beside a 64 × 255 permute took 2.3–2.6 ms against 2.0–2.3 in pieces of 16, and the permute
// itself 3.7–4.1 s against 4.5–4.7 (EPYC, 2 cores, examples/reliability permute).
const chunkTokensPerLayer = 16

// defaultChunkIdle is how long after a preemption a replica runs the layers of long passes in pieces (see
// engine.chunk).
const defaultChunkIdle = time.Second

// chunk is the layers.Batch.Chunk of a pass that may be preempted: pieces of chunkTokens tokens while short
// requests come, those that preempted a pass within chunkIdle, else whole layers. Each operation costs a little
// however few rows it takes (on the bundled tiny checkpoint a pass of a 1,424-token row takes about 1.7 times as
// long in pieces of 128 tokens), so a long pass that nothing waits beside runs its layers whole; the first short
// request to come then waits for a layer, and those after it for a piece.
func (e *engine) chunk(int) int {
	if e.chunkIdle < 0 || (!e.lastShort.IsZero() && time.Since(e.lastShort) < e.chunkIdle) {
		return e.chunkTokens
	}
	return 0
}

// preemptRatio is how much bigger than a batch a pass must be for the batch to preempt it (see yield), and how much
// bigger than a request another request of a batch must be for the request to go first (see smallFirst): sizes in
// tokens, where a part of a Separate or Permute request counts preemptRatio times its tokens.
const preemptRatio = 4

// deferLong (the engine's mu held) applies smallFirst to a batch's candidates and their shares (allot's): the
// shares of those left for a later batch become 0, and each of them counts the batch's tokens as overtaking it.
// A request is left only while the batches that overtook it since it last ran hold fewer tokens than its share:
// then it runs, beside whatever is queued. A part of a Separate or Permute request weighs preemptRatio times its
// share: it is bulk work of one client, who has the model for many passes in a row, so another client's request
// up to its size goes first rather than share its pass (on a CPU a pass costs about the sum of its requests').
func (e *engine) deferLong(cands []*call, shares []int) {
	room := make([]int, len(cands))
	sizes := make([]int, len(cands))
	for i, c := range cands {
		room[i] = shares[i] - c.overtaken
		sizes[i] = shares[i]
		if c.part {
			sizes[i] *= preemptRatio
		}
	}
	in := smallFirst(sizes, room)
	tokens := 0
	for i := range cands {
		if in[i] {
			tokens += shares[i]
		}
	}
	for i, c := range cands {
		switch {
		case in[i]:
			c.overtaken = 0
		case shares[i] > 0:
			c.overtaken += tokens
			shares[i] = 0
			e.deferrals++
		}
	}
}

// smallFirst returns which of a batch's requests, by their sizes in it (their shares, weighed; 0: not in it), run
// in the batch when the replica's passes may be preempted. A request at most 1/preemptRatio the size of the
// biggest could preempt that one's pass; rather than wait inside that pass, the small ones run in a batch of
// their own first, and the bigger ones wait for the next batch, when every one of them has room left (tokens that
// may still overtake it). Among those that run, it applies again, so that a batch holds requests within
// preemptRatio of each other.
func smallFirst(sizes, room []int) []bool {
	in := make([]bool, len(sizes))
	for i, s := range sizes {
		in[i] = s > 0
	}
	for {
		big := 0
		for i, s := range sizes {
			if in[i] {
				big = max(big, s)
			}
		}
		small, movable := false, true
		for i, s := range sizes {
			switch {
			case !in[i]:
			case s*preemptRatio <= big:
				small = true
			case room[i] <= 0:
				movable = false
			}
		}
		if !small || !movable {
			return in
		}
		for i, s := range sizes {
			if in[i] && s*preemptRatio > big {
				in[i] = false
			}
		}
	}
}

// passRun is a pass that short batches may preempt between two of its layers (see yield): its tokens, its size (its
// tokens, weighed as smallFirst weighs requests: preemptRatio times when it runs only parts of Separate or Permute
// requests), the tokens of the batches that preempted it so far, and the states its batch reads that it did not
// make (see sweep).
type passRun struct {
	tokens, size, overtaken int
	pins                    []*layers.State
}

// yield (model goroutine, before a layer of run's pass) runs a batch of the requests queued that are short beside
// the pass: whole requests in queue order (takeShort), together at most 1/preemptRatio of the pass's size, as one
// batch nested in the pass, so that a request that arrives while a long pass runs waits for one of its layers, not
// all of them. The batches that preempt one pass hold at most its tokens in all (the pass keeps at least half of
// the model however many short requests arrive), and they are not preempted in turn. The pass's results are the
// same bits, as every batch's are beside any other. It reports whether a batch ran.
func (e *engine) yield(run *passRun) bool {
	if !e.preempt || e.nested {
		return false
	}
	batch := e.takeShort(min(run.size/preemptRatio, run.tokens-run.overtaken))
	if batch == nil {
		return false
	}
	run.overtaken += batchTokens(batch)
	e.lastShort = time.Now()
	e.nested, e.pinned = true, run.pins
	defer func() { e.nested, e.pinned = false, nil }()
	e.mu.Lock()
	e.preemptions++
	e.mu.Unlock()
	e.runBatch(batch)
	runtime.Gosched() // the goroutines of the requests it answered run now, not when the pass next waits
	return true
}

// takeShort (model goroutine) takes the batch that preempts a pass: from the queue, in order, whole requests while
// their tokens left sum to at most limit and the batch holds at most maxBatch; the others keep their places. It
// returns nil when none fits (or Shutdown's context has ended: the pass stops, and take fails the queue).
func (e *engine) takeShort(limit int) []chunk {
	if limit <= 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.abort.Load() {
		return nil
	}
	var batch []chunk
	var taken []int // their places in the queue
	tokens := 0
	for i, c := range e.queue {
		if len(batch) == e.maxBatch {
			break
		}
		// A row holds a token at least; a caller that has gone is left for take to drop.
		if len(c.rows)-c.next > limit-tokens || c.gone() {
			continue
		}
		if r := e.remaining(c); tokens+r <= limit {
			batch = append(batch, chunk{c: c, from: c.next, to: len(c.rows), tokens: r})
			taken = append(taken, i)
			tokens += r
		}
	}
	if len(batch) == 0 {
		return nil
	}
	left, next := e.queue[:0], 0
	for i, c := range e.queue {
		if next < len(taken) && taken[next] == i {
			next++
			continue
		}
		left = append(left, c)
	}
	clear(e.queue[len(left):])
	e.queue = left
	for _, ch := range batch {
		if ch.from == 0 {
			ch.c.waited = e.takenTokens - ch.c.ahead
		}
		ch.c.overtaken = 0
	}
	e.takenTokens += tokens
	e.runningTokens += tokens
	return batch
}

// drop forgets a queued request whose caller has gone (the engine's mu held): it uncharges it and unpins its
// state (the next sweep frees it).
func (e *engine) drop(c *call) {
	e.finish(c)
}

// stopper returns the Batch.Stop of a pass that works for the requests of chunks (its own and those of the batch's
// passes after it): the pass stops at its next layer once every one of them has gone (its caller stopped
// waiting), or when Shutdown's context has ended, so that the model is free for what waits instead of running out
// passes nobody will read. Before a layer it goes on to, a short batch may preempt the pass (yield; run is nil
// where none may).
func (e *engine) stopper(chunks []chunk, run *passRun) func(layer int) bool {
	check := e.checker(chunks, run)
	return func(layer int) bool {
		if e.onLayer != nil {
			e.onLayer(layer)
		}
		if check() {
			return true
		}
		e.layersRun.Add(1)
		return false
	}
}

// pauser returns the Batch.Pause of a pass run in pieces (see chunkTokens), which stopper's pass would get: between
// two pieces of a layer the pass stops when every request it works for has gone, and a short batch may preempt it.
func (e *engine) pauser(chunks []chunk, run *passRun) func(layer int) bool {
	check := e.checker(chunks, run)
	return func(layer int) bool {
		e.pauses.Add(1)
		if e.onPause != nil {
			e.onPause(layer)
		}
		return check()
	}
}

// checker returns what stopper and pauser check at each point of a pass: whether the pass stops there (every
// request of chunks has gone, or Shutdown's context has ended), after letting a short batch preempt it (yield)
// when it goes on.
func (e *engine) checker(chunks []chunk, run *passRun) func() bool {
	over := func() bool {
		if e.abort.Load() {
			return true
		}
		for _, ch := range chunks {
			if !ch.c.gone() {
				return false
			}
		}
		return true
	}
	return func() bool {
		stop := over()
		if !stop && run != nil && e.yield(run) {
			stop = over() // they may have gone while the short batch ran
		}
		if stop {
			e.passesStopped.Add(1)
		}
		return stop
	}
}

// loop is the model goroutine: it alone touches the model, the backend and the cached states.
func (e *engine) loop() {
	defer close(e.done)
	for {
		if e.beforeTake != nil {
			e.beforeTake(e.index)
		}
		batch := e.take()
		if batch == nil {
			return
		}
		if e.trimmer != nil {
			e.trimmer.Stop() // not idle: the clock starts again after the batch
		}
		e.runBatch(batch)
		e.armTrim()
	}
}

// defaultTrimIdle is how long a replica waits with no request after a batch before it hands its backend's pooled
// memory back. A pass allocates its activations from the pool; returning them to the driver after every request
// would make the next one allocate them again (cuMemAlloc and cuMemFree cost milliseconds a pass and cuMemFree
// waits for the device), so memory goes back only once the replica has been idle this long.
const defaultTrimIdle = 2 * time.Second

// armTrim (model goroutine) starts the idle clock after a batch: the backend's pooled memory goes back once no
// batch has run for trimIdle.
func (e *engine) armTrim() {
	if _, ok := e.backend.(tensor.Trimmer); !ok || e.trimIdle < 0 {
		return
	}
	e.mu.Lock()
	e.trimDue = false
	e.mu.Unlock()
	if e.trimmer == nil {
		e.trimmer = time.AfterFunc(e.trimIdle, func() {
			e.mu.Lock()
			e.trimDue = true
			e.cond.Broadcast()
			e.mu.Unlock()
		})
		return
	}
	e.trimmer.Reset(e.trimIdle)
}

// trim (model goroutine) hands the backend's pooled memory back, so memory after a burst returns to what the
// weights and the cached states hold.
func (e *engine) trim() {
	if t, ok := e.backend.(tensor.Trimmer); ok {
		if err := t.Trim(); err != nil {
			e.log.Warn("kev: trim", "replica", e.index, "error", err)
		}
	}
}

// abortNow makes the running pass stop at its next layer and fails the requests queued (Shutdown's context has
// ended).
func (e *engine) abortNow() {
	e.abort.Store(true)
	e.mu.Lock()
	e.cond.Broadcast()
	e.mu.Unlock()
}

// close stops taking requests, lets the model goroutine finish every request queued, frees the cached states and
// closes the backend.
func (e *engine) close() error {
	e.mu.Lock()
	e.closed = true
	e.cond.Broadcast()
	e.mu.Unlock()
	<-e.done
	if e.trimmer != nil {
		e.trimmer.Stop()
	}
	for s := range e.held {
		s.Free()
	}
	e.held = nil
	e.cache.Clear()
	e.model, e.pointer = nil, nil
	var errs []error
	if e.files != nil {
		errs = append(errs, e.files.Close()) // after the model: the CPU backend's weights point into these files
		e.files = nil
	}
	if c, ok := e.backend.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// stats returns the engine's counters.
func (e *engine) stats() ReplicaStats {
	cs := e.cache.Stats()
	e.mu.Lock()
	b := BatchStats{Count: e.batches, Requests: e.requests, Queued: len(e.queue), Slices: e.slices}
	tokens := e.tokens
	e.mu.Unlock()
	return ReplicaStats{
		Device: e.device,
		PrefixCache: PrefixCacheStats{Size: cs.Size, MinStateTokens: cs.MinTokens, MaxTokens: cs.MaxTokens,
			Hits: cs.Hits, Misses: cs.Misses, CachedStates: cs.Entries, OOMRetries: cs.OOMRetries},
		Batches:      b,
		QueuedTokens: tokens,
	}
}

// deviceMemory reports the memory the engine's backend holds from its device, as Predictor.deviceMemory does.
func (e *engine) deviceMemory() (held, free int64, ok bool) {
	m, ok := e.backend.(interface{ MemStats() (held, cached int64) })
	if !ok {
		return 0, 0, false
	}
	held, free = m.MemStats()
	return held, free, true
}
