package kev

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/kevgo/kev/internal/prefixcache"
	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// call is one request: its encoding, and where the model goroutine sends the result. The engine that runs it keeps
// the rest of its fields.
type call struct {
	ctx       context.Context
	enc       *systemone.Encoding
	rows      []systemone.Row
	key       prefixcache.Key // the state's key, for the dispatcher's prefix affinity
	rowTokens int             // tokens of all the rows
	done      chan result     // buffered: the model goroutine never waits for the caller
	cancelled atomic.Bool     // the caller stopped waiting
	part      bool            // one part of a Separate or Permute request (see smallFirst)

	charged int  // tokens charged to the engine's queue for it (the engine's mu)
	pending bool // counted in the engine's pending states (the engine's mu)
	// overtaken is the tokens of the batches taken ahead of it, since it last ran, by requests that the batcher let
	// go first because it could have preempted their pass (the engine's mu; see smallFirst).
	overtaken int
	// ahead and waited are the batcher's record of how long it waited, in tokens (the engine's mu): ahead is
	// engine.takenTokens less the running batch's tokens when it was queued, waited the tokens of the batches
	// taken after that point and before its first (the batch running when it arrived included).
	ahead, waited int

	// Model goroutine only.
	next    int           // rows answered so far
	state   *layers.State // the state its later rows continue, once it has run a slice
	probs   [][]float32   // per row, as answered
	hit     bool          // its state's prefix was cached when it started
	latency time.Duration // model time of the batches it ran in
}

// newCall returns the call of an encoded request.
func newCall(ctx context.Context, enc *systemone.Encoding) *call {
	c := &call{ctx: ctx, enc: enc, rows: enc.Rows(), key: prefixcache.NewKey(enc.StateIDs(), false),
		done: make(chan result, 1)}
	c.rowTokens = c.rowsTokens(0, len(c.rows))
	c.probs = make([][]float32, len(c.rows))
	return c
}

// gone reports whether c's caller has stopped waiting for it.
func (c *call) gone() bool { return c.cancelled.Load() || c.ctx.Err() != nil }

// rowsTokens returns the tokens of rows from..to-1.
func (c *call) rowsTokens(from, to int) int {
	n := 0
	for _, r := range c.rows[from:to] {
		n += len(r.IDs)
	}
	return n
}

// chunk is a request's part of a batch: its rows from..to-1 (all of them, or a slice), and the tokens the batcher
// counted for it (the rows', and its state's when that runs).
type chunk struct {
	c        *call
	from, to int
	tokens   int
}

// batchTokens returns the tokens the batcher counted for a batch.
func batchTokens(batch []chunk) int {
	n := 0
	for _, ch := range batch {
		n += ch.tokens
	}
	return n
}

// result is what the model goroutine hands back for one call.
type result struct {
	probs   [][]float32   // per question, in option order
	latency time.Duration // model time of the batches it ran in
	hit     bool          // the state's prefix was cached
	waited  int           // tokens the model ran after the request was queued and before its first batch
	err     error
}

// outOfMemory is implemented by backend errors that report device memory exhaustion (an OutOfMemory() bool
// method). A batch failing with one while states are cached runs once more with the prefix cache emptied, as Kev's
// server does.
type outOfMemory interface {
	OutOfMemory() bool
}

func isOOM(err error) bool {
	var o outOfMemory
	return errors.As(err, &o) && o.OutOfMemory()
}

// runBatch answers a batch through the prefix cache. Requests whose last rows ran are resolved, with their
// probabilities and the model time of every batch they ran in; a request with rows left keeps its state and goes
// back to the end of the queue. When the batch fails, every request of it gets the error. It also runs the batches
// that preempt one of its passes (see yield), inside that pass.
func (e *engine) runBatch(batch []chunk) {
	tokens := batchTokens(batch)
	// Only requests starting in this batch go through the cache: one lookup, one hit or miss each.
	var fresh []int
	var states [][]int
	for i, ch := range batch {
		if ch.from == 0 {
			fresh = append(fresh, i)
			states = append(states, ch.c.enc.StateIDs())
		}
	}
	var created []*layers.State
	var keep []*layers.State
	var stopped bool // passes were stopped: every request they worked for had gone
	var pt passTimes
	start := time.Now()
	plan, err := e.cache.Run(states, false, func(pl *prefixcache.Plan[*layers.State]) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("kev: model pass panicked: %v\n%s", r, debug.Stack())
			}
		}()
		pt = passTimes{lookup: time.Since(start)}
		slots := make([]*prefixcache.Slot[*layers.State], len(batch))
		for k, i := range fresh {
			slots[i] = &pl.Slots[k]
		}
		keep, stopped, err = e.runPasses(batch, slots, &created, &pt)
		return err
	}, isOOM)
	elapsed := time.Since(start)
	if errors.Is(err, layers.ErrStopped) { // Shutdown's context has ended (runPasses takes the other stops)
		e.log.Debug("kev: batch stopped: shutting down", "replica", e.index, "requests", len(batch))
		err = ErrClosed
	} else if err != nil {
		e.log.Error("kev: batch failed", "replica", e.index, "requests", len(batch), "error", err)
	}
	if err != nil {
		e.mu.Lock()
		for _, ch := range batch {
			e.finish(ch.c)
		}
		e.runningTokens -= tokens
		e.mu.Unlock()
		e.sweep(created)
		for _, ch := range batch {
			ch.c.done <- result{err: err}
		}
		return
	}
	for k, i := range fresh {
		batch[i].c.hit = plan.Slots[k].Hit
	}
	var done []*call
	e.mu.Lock()
	e.batches++
	sliced := false
	dropped, answeredTokens := 0, 0
	for i, ch := range batch {
		c := ch.c
		if stopped && c.gone() { // its caller has gone, and the passes for it may have been stopped
			e.finish(c)
			dropped++
			continue
		}
		c.latency += elapsed
		c.next = ch.to
		e.unpend(c)
		if c.next == len(c.rows) {
			answeredTokens += c.charged
			e.finish(c)
			e.requests++
			done = append(done, c)
			continue
		}
		sliced = true
		c.state = keep[i]
		e.started[c] = true
		charge := c.rowsTokens(c.next, len(c.rows))
		e.tokens += charge - c.charged
		c.charged = charge
		e.queue = append(e.queue, c) // behind what arrived meanwhile
	}
	if sliced {
		e.slices++
	}
	if !e.nested { // gathering follows the loop's batches, not those that ran inside one of their passes
		e.lastAnswered, e.arrivalsAtEnd, e.lastPass = len(done), e.arrivals, elapsed
		e.lastAnsweredTokens = answeredTokens
	}
	e.runningTokens -= tokens
	var waited []int
	for _, c := range done {
		waited = append(waited, c.waited)
	}
	e.mu.Unlock()
	e.sweep(created)
	if stopped {
		e.log.Debug("kev: batch stopped early: the requests of its later passes had gone", "replica", e.index,
			"requests", len(batch), "dropped", dropped)
	}
	if f := e.onBatch.Load(); f != nil && dropped < len(batch) {
		(*f)(len(batch) - dropped)
	}
	e.log.Debug("kev: batch", "replica", e.index, "requests", len(batch), "answered", len(done),
		"ms", msec(elapsed), "lookup_ms", msec(pt.lookup), "issue_ms", msec(pt.issue), "point_ms", msec(pt.point))
	for i, c := range done {
		c.done <- result{probs: c.probs, latency: c.latency, hit: c.hit, waited: waited[i]}
	}
	if !e.nested {
		e.mu.Lock()
		e.lastEnd = time.Now() // the answers are out: gather's window starts
		e.mu.Unlock()
	}
}

// finish uncharges a request that leaves the engine, answered or failed (the engine's mu held), and unpins its
// state.
func (e *engine) finish(c *call) {
	e.tokens -= c.charged
	c.charged = 0
	e.unpend(c)
	delete(e.started, c)
	c.state = nil
}

// unpend removes a request's state from the states of requests not started yet, once (the engine's mu held).
func (e *engine) unpend(c *call) {
	if !c.pending {
		return
	}
	c.pending = false
	if e.pending[c.key]--; e.pending[c.key] <= 0 {
		delete(e.pending, c.key)
	}
}

// newRef is a state a batch computes: the pass and position in that pass's Batch.New, and its State once that
// pass has returned it (when kept for the cache, for rows of a later pass, or for a later batch).
type newRef struct {
	pass, idx int
	st        *layers.State
}

// rowRef is a question row of a pass: the chunk and question it answers, and the new state of an earlier pass it
// continues (nil when it continues a cached state or one of its own pass).
type rowRef struct {
	req, q int
	after  *newRef
}

// passPlan is one model pass of a batch.
type passPlan struct {
	batch  layers.Batch
	rows   []rowRef  // one per batch.Rows entry
	news   []*newRef // one per batch.New entry
	chunks []int     // the chunks whose new states or rows it runs, in order, perhaps repeated
}

// tokens returns the tokens the pass runs: its new states' and its rows'.
func (ps *passPlan) tokens() int {
	n := 0
	for _, ns := range ps.batch.New {
		n += len(ns.IDs)
	}
	for _, r := range ps.batch.Rows {
		n += len(r.IDs)
	}
	return n
}

// planPasses splits a batch into passes of at most budget tokens (new state tokens plus row tokens; a pass takes
// at least one row, so a longer state or row runs in a pass of its own). Chunks are taken in order. A chunk with a
// slot starts its request: its rows continue the slot's cached prefix on a hit, else a new state, which runs once
// per batch, in the pass of the first row that needs it (rows of later passes continue it as a kept State); the
// new state is kept when the slot keeps it or the request has rows left after the chunk. A chunk without a slot
// continues the state its request kept from an earlier batch. It returns the passes and, by state key, the states
// the batch computes.
func planPasses(batch []chunk, slots []*prefixcache.Slot[*layers.State], budget int) ([]*passPlan, map[string]*newRef) {
	news := map[string]*newRef{}
	passes := []*passPlan{{}}
	tokens := 0
	for i, ch := range batch {
		c, slot := ch.c, slots[i]
		cached := c.state
		var ids []int
		var key string
		keep := false
		if slot != nil {
			ids = c.enc.StateIDs()
			key = idsKey(ids)
			keep = slot.Keep || ch.to < len(c.rows)
			if slot.Hit {
				cached = slot.Cached
			}
		}
		needState := func() bool { return cached == nil && news[key] == nil }
		place := func(cost int) *passPlan {
			if tokens > 0 && tokens+cost > budget {
				passes = append(passes, &passPlan{})
				tokens = 0
			}
			cur := passes[len(passes)-1]
			if needState() {
				ref := &newRef{pass: len(passes) - 1, idx: len(cur.batch.New)}
				cur.batch.New = append(cur.batch.New, layers.NewState{IDs: int32s(ids), Keep: keep})
				cur.chunks = append(cur.chunks, i)
				cur.news = append(cur.news, ref)
				news[key] = ref
				tokens += len(ids)
			}
			return cur
		}
		if ch.from == ch.to && needState() {
			place(len(ids))
		}
		for q := ch.from; q < ch.to; q++ {
			r := c.rows[q]
			cost := len(r.IDs)
			if needState() {
				cost += len(ids)
			}
			cur := place(cost)
			row := layers.Row{IDs: int32s(r.IDs)}
			ref := rowRef{req: i, q: q}
			if cached != nil {
				row.Cached = cached
			} else if nr := news[key]; nr.pass == len(passes)-1 {
				row.New = nr.idx
			} else {
				passes[nr.pass].batch.New[nr.idx].Keep = true
				ref.after = nr
			}
			cur.batch.Rows = append(cur.batch.Rows, row)
			cur.chunks = append(cur.chunks, i)
			cur.rows = append(cur.rows, ref)
			tokens += len(r.IDs)
		}
		if keep && cached == nil { // a state an earlier chunk of the batch brought in
			nr := news[key]
			passes[nr.pass].batch.New[nr.idx].Keep = true
		}
	}
	return passes, news
}

// passTimes splits a batch's model time for the debug log: the prefix cache's lookup before the passes, the host's
// time queuing the passes' layers (the device runs meanwhile), and the pointer head's time, which waits for the
// device and reads the probabilities back. The rest is the host's work after the passes.
type passTimes struct{ lookup, issue, point time.Duration }

// msec is d in milliseconds, to the microsecond.
func msec(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runPasses answers a batch's chunks: its passes in order, each inside tensor.Run, with the pointer head on every
// row of a pass in one call, the probabilities written to each request; then the prefixes for the cache (a hit's
// own, the kept new states). Every State a pass returns is appended to created. It returns, per chunk whose
// request has rows left, the state those rows continue. pt collects the time queuing the passes and the pointer
// head's. Short batches may preempt its passes between two layers (see yield); they do not touch the states it
// reads.
func (e *engine) runPasses(batch []chunk, slots []*prefixcache.Slot[*layers.State], created *[]*layers.State, pt *passTimes) (keep []*layers.State, stopped bool, err error) {
	passes, news := planPasses(batch, slots, e.passTokens)
	// later[k]: the chunks that passes k… work for. A live chunk's rows, and the new states they continue, all
	// run in passes before the first pass whose later chunks have all gone.
	later := make([][]chunk, len(passes))
	seen := make([]bool, len(batch))
	var acc []chunk
	for k := len(passes) - 1; k >= 0; k-- {
		for _, i := range passes[k].chunks {
			if !seen[i] {
				seen[i] = true
				acc = append(acc, batch[i])
			}
		}
		later[k] = slices.Clone(acc)
	}
	// The states the batch reads that are not its own passes' (cached prefixes it hit, states its requests kept
	// from earlier batches): a batch that preempts a pass must not free them, even when it evicts them.
	var pins []*layers.State
	if e.preempt && !e.nested {
		for i, ch := range batch {
			if ch.c.state != nil {
				pins = append(pins, ch.c.state)
			}
			if s := slots[i]; s != nil && s.Hit {
				pins = append(pins, s.Cached)
			}
		}
	}
	for k, ps := range passes {
		var run *passRun
		if e.preempt && !e.nested {
			run = &passRun{tokens: ps.tokens(), pins: pins}
			run.size = run.tokens
			if !slices.ContainsFunc(ps.chunks, func(i int) bool { return !batch[i].c.part }) {
				run.size *= preemptRatio // parts only: weighed as smallFirst weighs them
			}
		}
		ps.batch.Stop = e.stopper(later[k], run)
		if run != nil {
			ps.batch.Chunk, ps.batch.Pause = e.chunk, e.pauser(later[k], run)
		}
		for k, rr := range ps.rows {
			if rr.after != nil {
				ps.batch.Rows[k].Cached = rr.after.st
			}
		}
		err := tensor.Run(e.backend, func() error {
			t0 := time.Now()
			out, err := e.model.Forward(&ps.batch)
			t1 := time.Now()
			pt.issue += t1.Sub(t0)
			if err != nil {
				return err
			}
			for k, st := range out.States {
				if st != nil {
					ps.news[k].st = st
					*created = append(*created, st)
				}
			}
			err = e.point(out, ps, batch)
			pt.point += time.Since(t1)
			out.Free()
			return err
		})
		if errors.Is(err, layers.ErrStopped) && !e.abort.Load() {
			stopped = true // every request passes k… work for has gone: the batch ends here
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	keep = make([]*layers.State, len(batch))
	for i, ch := range batch {
		slot := slots[i]
		var st *layers.State
		switch {
		case slot == nil:
			st = ch.c.state
		case slot.Hit:
			st = slot.Cached
			slot.SetPrefix(slot.Cached)
		default:
			if nr := news[idsKey(ch.c.enc.StateIDs())]; nr != nil {
				st = nr.st
			}
			if slot.Keep && st != nil { // nil: its pass was stopped
				slot.SetPrefix(st)
			}
		}
		if ch.to < len(ch.c.rows) {
			if st == nil {
				if stopped && ch.c.gone() {
					continue // dropped by runBatch
				}
				return nil, false, fmt.Errorf("kev: internal error: no state kept for a request with %d rows left", len(ch.c.rows)-ch.to)
			}
			keep[i] = st
		}
	}
	return keep, stopped, nil
}

// point runs the pointer head on a pass's rows, one call per part of its hidden states.
func (e *engine) point(out *layers.Output, ps *passPlan, batch []chunk) error {
	qs := make([][]tensor.PointerQuery, len(out.Hidden))
	refs := make([][]rowRef, len(out.Hidden))
	for k, rr := range ps.rows {
		r, at := batch[rr.req].c.rows[rr.q], out.At[k]
		opts := make([]int, len(r.Opts))
		for j, o := range r.Opts {
			opts[j] = at.Off + o
		}
		qs[at.Part] = append(qs[at.Part], tensor.PointerQuery{Decide: at.Off + r.Decide, Opts: opts})
		refs[at.Part] = append(refs[at.Part], rr)
	}
	for part, h := range out.Hidden {
		if len(qs[part]) == 0 {
			continue
		}
		ps, err := e.pointer.ProbabilitiesBatch(h, qs[part])
		if err != nil {
			return err
		}
		for k, rr := range refs[part] {
			batch[rr.req].c.probs[rr.q] = ps[k]
		}
	}
	return nil
}

// sweep frees every state that neither the cache nor a started request holds: those made in this batch and not
// kept, those evicted, and those of requests that have finished. Inside a preempted pass, the states that pass's
// batch reads (pinned) are kept too: its own sweep frees them once it is done with them.
func (e *engine) sweep(created []*layers.State) {
	keep := map[*layers.State]bool{}
	for _, s := range e.cache.Entries() {
		keep[s] = true
	}
	for _, s := range e.pinned {
		keep[s] = true
	}
	for c := range e.started {
		if c.state != nil {
			keep[c.state] = true
		}
	}
	for s := range e.held {
		if !keep[s] {
			s.Free()
		}
	}
	for _, s := range created {
		if !keep[s] {
			s.Free()
		}
	}
	e.held = keep
}

func int32s(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// idsKey is a map key for a token sequence.
func idsKey(ids []int) string {
	b := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		b = append(b, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return string(b)
}
