package kev

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/kevgo/kev/internal/prefixcache"
	"github.com/kevgo/kev/internal/systemone"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// call is one queued request: its encoding, and where the model goroutine sends the result.
type call struct {
	ctx       context.Context
	enc       *systemone.Encoding
	done      chan result // buffered: the model goroutine never waits for the caller
	cancelled atomic.Bool // the caller stopped waiting
}

// result is what the model goroutine hands back for one call.
type result struct {
	probs   [][]float32   // per question, in option order
	latency time.Duration // model time of the whole batch
	hit     bool          // the state's prefix was cached
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

// enqueue puts c at the end of the queue, unless the predictor is closed.
func (p *Predictor) enqueue(c *call) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.queue = append(p.queue, c)
	p.accepted++
	p.cond.Signal()
	return nil
}

// take waits for a request and returns it with whatever else waits, up to MaxBatch, oldest first, skipping
// requests whose caller has gone. It returns nil once the predictor is closed and the queue is empty.
func (p *Predictor) take() []*call {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for len(p.queue) == 0 && !p.closed {
			p.cond.Wait()
		}
		if len(p.queue) == 0 {
			return nil
		}
		var batch []*call
		n := 0
		for n < len(p.queue) && len(batch) < p.opts.MaxBatch {
			c := p.queue[n]
			n++
			if c.cancelled.Load() || c.ctx.Err() != nil {
				continue
			}
			batch = append(batch, c)
		}
		clear(p.queue[:n])
		p.queue = p.queue[n:]
		if len(batch) > 0 {
			return batch
		}
	}
}

// loop is the model goroutine: it alone touches the model, the backend and the cached states.
func (p *Predictor) loop() {
	defer close(p.done)
	for {
		if p.beforeTake != nil {
			p.beforeTake()
		}
		batch := p.take()
		if batch == nil {
			return
		}
		p.runBatch(batch)
		p.trimWhenIdle()
	}
}

// trimWhenIdle hands the backend's pooled memory back when no request waits, so memory after a burst returns to
// what the weights and the cached states hold.
func (p *Predictor) trimWhenIdle() {
	t, ok := p.backend.(tensor.Trimmer)
	if !ok {
		return
	}
	p.mu.Lock()
	idle := len(p.queue) == 0
	p.mu.Unlock()
	if idle {
		if err := t.Trim(); err != nil {
			p.log.Warn("kev: trim", "error", err)
		}
	}
}

// runBatch answers a batch through the prefix cache and resolves every request of it: with the probabilities
// and the batch's model time, or with the batch's error.
func (p *Predictor) runBatch(batch []*call) {
	states := make([][]int, len(batch))
	for i, c := range batch {
		states[i] = c.enc.StateIDs()
	}
	probs := make([][][]float32, len(batch))
	var created []*layers.State
	start := time.Now()
	plan, err := p.cache.Run(states, false, func(pl *prefixcache.Plan[*layers.State]) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("kev: model pass panicked: %v\n%s", r, debug.Stack())
			}
		}()
		return p.runPasses(batch, pl.Slots, probs, &created)
	}, isOOM)
	elapsed := time.Since(start)
	p.sweep(created)
	if err != nil {
		p.log.Error("kev: batch failed", "requests", len(batch), "error", err)
		for _, c := range batch {
			c.done <- result{err: err}
		}
		return
	}
	p.mu.Lock()
	p.batches++
	p.requests += len(batch)
	p.mu.Unlock()
	if f := p.onBatch.Load(); f != nil {
		(*f)(len(batch))
	}
	p.log.Debug("kev: batch", "requests", len(batch), "ms", float64(elapsed.Microseconds())/1000)
	for i, c := range batch {
		c.done <- result{probs: probs[i], latency: elapsed, hit: plan.Slots[i].Hit}
	}
}

// newRef is a state a batch computes: the pass and position in that pass's Batch.New, and its State once that
// pass has returned it (when kept for the cache or for rows of a later pass).
type newRef struct {
	pass, idx int
	st        *layers.State
}

// rowRef is a question row of a pass: the request and question it answers, and the new state of an earlier pass
// it continues (nil when it continues a cached state or one of its own pass).
type rowRef struct {
	req, q int
	after  *newRef
}

// passPlan is one model pass of a batch.
type passPlan struct {
	batch layers.Batch
	rows  []rowRef  // one per batch.Rows entry
	news  []*newRef // one per batch.New entry
}

// planPasses splits a batch into passes of at most budget tokens (new state tokens plus row tokens; a pass takes
// at least one row, so a longer state or row runs in a pass of its own). Requests are taken in order; a new state
// runs once per batch, in the pass of the first row that needs it, and rows of later passes continue it as a kept
// State. It returns the passes and, by state key, the states the batch computes.
func planPasses(batch []*call, slots []prefixcache.Slot[*layers.State], budget int) ([]*passPlan, map[string]*newRef) {
	news := map[string]*newRef{}
	passes := []*passPlan{{}}
	tokens := 0
	for i, c := range batch {
		slot := &slots[i]
		ids := c.enc.StateIDs()
		key := idsKey(ids)
		needState := func() bool { return !slot.Hit && news[key] == nil }
		place := func(cost int) *passPlan {
			if tokens > 0 && tokens+cost > budget {
				passes = append(passes, &passPlan{})
				tokens = 0
			}
			cur := passes[len(passes)-1]
			if needState() {
				ref := &newRef{pass: len(passes) - 1, idx: len(cur.batch.New)}
				cur.batch.New = append(cur.batch.New, layers.NewState{IDs: int32s(ids), Keep: slot.Keep})
				cur.news = append(cur.news, ref)
				news[key] = ref
				tokens += len(ids)
			}
			return cur
		}
		rows := c.enc.Rows()
		if len(rows) == 0 && needState() {
			place(len(ids))
		}
		for q, r := range rows {
			cost := len(r.IDs)
			if needState() {
				cost += len(ids)
			}
			cur := place(cost)
			row := layers.Row{IDs: int32s(r.IDs)}
			ref := rowRef{req: i, q: q}
			if slot.Hit {
				row.Cached = slot.Cached
			} else if nr := news[key]; nr.pass == len(passes)-1 {
				row.New = nr.idx
			} else {
				passes[nr.pass].batch.New[nr.idx].Keep = true
				ref.after = nr
			}
			cur.batch.Rows = append(cur.batch.Rows, row)
			cur.rows = append(cur.rows, ref)
			tokens += len(r.IDs)
		}
	}
	return passes, news
}

// runPasses answers a batch: its passes in order, each inside tensor.Run, with the pointer head on every row of a
// pass in one call; then the prefixes for the cache (a hit's own, the kept new states). Every State a pass returns
// is appended to created.
func (p *Predictor) runPasses(batch []*call, slots []prefixcache.Slot[*layers.State], probs [][][]float32, created *[]*layers.State) error {
	passes, news := planPasses(batch, slots, p.passTokens)
	rows := make([][]systemone.Row, len(batch))
	for i, c := range batch {
		rows[i] = c.enc.Rows()
		probs[i] = make([][]float32, len(rows[i]))
	}
	for _, ps := range passes {
		for k, rr := range ps.rows {
			if rr.after != nil {
				ps.batch.Rows[k].Cached = rr.after.st
			}
		}
		err := tensor.Run(p.backend, func() error {
			out, err := p.model.Forward(&ps.batch)
			if err != nil {
				return err
			}
			for k, st := range out.States {
				if st != nil {
					ps.news[k].st = st
					*created = append(*created, st)
				}
			}
			err = p.point(out, ps, rows, probs)
			out.Free()
			return err
		})
		if err != nil {
			return err
		}
	}
	for i := range slots {
		slot := &slots[i]
		switch {
		case slot.Hit:
			slot.SetPrefix(slot.Cached)
		case slot.Keep:
			slot.SetPrefix(news[idsKey(batch[i].enc.StateIDs())].st)
		}
	}
	return nil
}

// point runs the pointer head on a pass's rows, one call per part of its hidden states.
func (p *Predictor) point(out *layers.Output, ps *passPlan, rows [][]systemone.Row, probs [][][]float32) error {
	qs := make([][]tensor.PointerQuery, len(out.Hidden))
	refs := make([][]rowRef, len(out.Hidden))
	for k, rr := range ps.rows {
		r, at := rows[rr.req][rr.q], out.At[k]
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
		ps, err := p.pointer.ProbabilitiesBatch(h, qs[part])
		if err != nil {
			return err
		}
		for k, rr := range refs[part] {
			probs[rr.req][rr.q] = ps[k]
		}
	}
	return nil
}

// sweep frees every state that the cache no longer holds: those made in this batch and not stored, and those
// evicted.
func (p *Predictor) sweep(created []*layers.State) {
	keep := map[*layers.State]bool{}
	for _, s := range p.cache.Entries() {
		keep[s] = true
	}
	for s := range p.held {
		if !keep[s] {
			s.Free()
		}
	}
	for _, s := range created {
		if !keep[s] {
			s.Free()
		}
	}
	p.held = keep
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
