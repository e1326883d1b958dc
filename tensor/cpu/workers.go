package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// A Backend's operations fork-join on a pool of worker goroutines started
// once, on the first operation that splits its work. A call cuts its range
// into parts, posts the call to the pool and works through the parts itself
// alongside the workers that pick it up, so it finishes even when every
// worker is busy with other calls (several goroutines may run operations at
// once, and an operation's part may itself split). Workers spin briefly
// after their last part before they park, so back-to-back operations find
// them awake.

// spinRounds is how many times an idle worker (or a caller waiting for the
// last parts) polls before parking.
const spinRounds = 2000

// forkJoin is one parallel call: parts parts of [0, n), each a run of per
// aligned blocks.
type forkJoin struct {
	f         func(lo, hi int)
	n, step   int
	parts     int
	next      atomic.Int64 // next part to claim
	remaining atomic.Int64 // parts not yet finished
	done      chan struct{}
}

// run claims and runs parts until none is left; it reports whether it
// finished the last one.
func (c *forkJoin) run() bool {
	last := false
	for {
		i := int(c.next.Add(1) - 1)
		if i >= c.parts {
			return last
		}
		lo := i * c.step
		c.f(lo, min(lo+c.step, c.n))
		last = c.remaining.Add(-1) == 0
	}
}

// workerPool is a set of parked-or-spinning goroutines that run the parts of
// posted calls.
type workerPool struct {
	mu      sync.Mutex
	workers atomic.Int32 // started; grows under mu
	calls   chan *forkJoin
	stop    chan struct{}
}

func newWorkerPool() *workerPool {
	return &workerPool{calls: make(chan *forkJoin, 256), stop: make(chan struct{})}
}

// grow starts workers until there are n.
func (p *workerPool) grow(n int) {
	if int(p.workers.Load()) >= n {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for int(p.workers.Load()) < n {
		p.workers.Add(1)
		go p.work()
	}
}

func (p *workerPool) work() {
	for {
		var c *forkJoin
		for i := 0; i < spinRounds && c == nil; i++ {
			select {
			case c = <-p.calls:
			default:
				if i&63 == 63 {
					runtime.Gosched()
				}
			}
		}
		if c == nil {
			select {
			case c = <-p.calls:
			case <-p.stop:
				return
			}
		}
		if c.run() {
			c.done <- struct{}{}
		}
	}
}

// close ends the workers (once the Backend is unreachable).
func (p *workerPool) close() { close(p.stop) }

// workerPool returns the backend's worker pool, starting it on first use.
func (b *Backend) workerPool() *workerPool {
	b.poolOnce.Do(func() {
		b.pool = newWorkerPool()
		runtime.AddCleanup(b, func(p *workerPool) { p.close() }, b.pool)
	})
	return b.pool
}

// parallel runs f over [0, n) split into at most b.Threads contiguous ranges
// whose bounds are multiples of align (except the last). The calling
// goroutine runs ranges too; the others run on the backend's workers, or
// on the caller when they are busy: ranges must not wait for one another.
func (b *Backend) parallel(n, align int, f func(lo, hi int)) {
	threads := b.Threads
	if threads < 1 {
		threads = 1
	}
	if align < 1 {
		align = 1
	}
	blocks := (n + align - 1) / align
	if threads > blocks {
		threads = blocks
	}
	if threads <= 1 {
		if n > 0 {
			f(0, n)
		}
		return
	}
	per := (blocks + threads - 1) / threads
	b.forkJoin(n, per*align, threads, f)
}

// jobs runs f(i, i+1) for every i in [0, n), each job claimed by whichever
// of up to b.Threads goroutines is free next (the caller among them), so a
// slow thread holds back no more than the job it runs. Jobs must not wait
// for one another.
func (b *Backend) jobs(n int, f func(lo, hi int)) {
	threads := min(max(b.Threads, 1), n)
	if threads <= 1 {
		for i := range n {
			f(i, i+1)
		}
		return
	}
	b.forkJoin(n, 1, threads, f)
}

// forkJoin runs f over [0, n) in parts of step, claimed in order by the
// caller and up to threads−1 workers.
func (b *Backend) forkJoin(n, step, threads int, f func(lo, hi int)) {
	parts := (n + step - 1) / step
	c := &forkJoin{f: f, n: n, step: step, parts: parts, done: make(chan struct{}, 1)}
	c.remaining.Store(int64(parts))
	p := b.workerPool()
	p.grow(threads - 1)
	for range min(parts, threads) - 1 {
		select {
		case p.calls <- c:
		default: // the queue is full: this goroutine runs the part itself
		}
	}
	if c.run() {
		return
	}
	for i := 0; i < spinRounds; i++ {
		if c.remaining.Load() == 0 {
			return
		}
		if i&63 == 63 {
			runtime.Gosched()
		}
	}
	<-c.done
}
