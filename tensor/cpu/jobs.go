package cpu

import "sync/atomic"

// each runs n jobs on up to Threads goroutines, handing the next job to
// whichever goroutine frees up first, so jobs of unequal cost keep every
// goroutine busy. work is called once per goroutine and returns the
// function that runs one job with that goroutine's scratch buffers; jobs
// must write disjoint outputs, so the result does not depend on which
// goroutine ran what.
func (b *Backend) each(n int, work func() func(job int)) {
	if n <= 0 {
		return
	}
	var next atomic.Int64
	b.parallel(min(max(b.Threads, 1), n), 1, func(lo, hi int) {
		run := work()
		for {
			j := int(next.Add(1)) - 1
			if j >= n {
				return
			}
			run(j)
		}
	})
}
