package kev

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/kevgo/kev/internal/prefixcache"
	"github.com/kevgo/kev/layers"
)

// call is one queued request: its encoding, and where the model goroutine sends the result.
type call struct {
	ctx       context.Context
	enc       *Encoding
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

// OutOfMemory is implemented by backend errors that report device memory exhaustion. A batch failing with one
// while states are cached runs once more with the prefix cache emptied, as Kev's server does.
type OutOfMemory interface {
	OutOfMemory() bool
}

func isOOM(err error) bool {
	var o OutOfMemory
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
		local := map[string]*layers.State{}
		for i, c := range batch {
			if probs[i], err = p.answer(c, &pl.Slots[i], local, &created); err != nil {
				return err
			}
		}
		return nil
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
	p.log.Debug("kev: batch", "requests", len(batch), "ms", float64(elapsed.Microseconds())/1000)
	for i, c := range batch {
		c.done <- result{probs: probs[i], latency: elapsed, hit: plan.Slots[i].Hit}
	}
}

// answer runs one request: its state from the cache, from an earlier request of the batch with the same state,
// or by a Prefill; then its question rows continuing that state, RowsPerPass rows a pass, and the pointer head
// on each row.
func (p *Predictor) answer(c *call, slot *prefixcache.Slot[*layers.State], local map[string]*layers.State, created *[]*layers.State) ([][]float32, error) {
	ids := c.enc.StateIDs()
	key := idsKey(ids)
	st := local[key]
	switch {
	case slot.Hit:
		st = slot.Cached
	case st == nil:
		s, h, err := p.model.Prefill(int32s(ids))
		if err != nil {
			return nil, err
		}
		p.backend.Free(h)
		*created = append(*created, s)
		st = s
	}
	local[key] = st
	if slot.Hit || slot.Keep {
		slot.SetPrefix(st)
	}
	rows := c.enc.Rows()
	per := c.enc.RowsPerPass()
	out := make([][]float32, len(rows))
	for lo := 0; lo < len(rows); lo += per {
		hi := min(lo+per, len(rows))
		chunk := make([][]int32, hi-lo)
		for k := lo; k < hi; k++ {
			chunk[k-lo] = int32s(rows[k].IDs)
		}
		h, err := p.model.ContinueRows(st, chunk)
		if err != nil {
			return nil, err
		}
		off := 0
		for k := lo; k < hi; k++ {
			r := rows[k]
			opts := make([]int, len(r.Opts))
			for j, o := range r.Opts {
				opts[j] = off + o
			}
			if out[k], err = p.pointer.Probabilities(h, off+r.Decide, opts); err != nil {
				p.backend.Free(h)
				return nil, err
			}
			off += len(r.IDs)
		}
		p.backend.Free(h)
	}
	return out, nil
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
