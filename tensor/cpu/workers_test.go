package cpu

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestParallelCoversRange checks that parallel runs every index once, in
// at most Threads ranges whose bounds are multiples of align.
func TestParallelCoversRange(t *testing.T) {
	for _, threads := range []int{0, 1, 2, 3, 8} {
		b := &Backend{Threads: threads}
		for _, n := range []int{0, 1, 7, 64, 1000} {
			for _, align := range []int{0, 1, 4, 16} {
				seen := make([]atomic.Int32, n)
				var ranges atomic.Int32
				b.parallel(n, align, func(lo, hi int) {
					ranges.Add(1)
					if a := max(align, 1); lo%a != 0 || (hi%a != 0 && hi != n) || lo >= hi {
						t.Errorf("threads %d n %d align %d: range [%d, %d)", threads, n, align, lo, hi)
					}
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
				})
				for i := range seen {
					if c := seen[i].Load(); c != 1 {
						t.Fatalf("threads %d n %d align %d: index %d ran %d times", threads, n, align, i, c)
					}
				}
				if r := int(ranges.Load()); r > max(threads, 1) {
					t.Fatalf("threads %d n %d align %d: %d ranges", threads, n, align, r)
				}
			}
		}
	}
}

// TestParallelConcurrentCallers runs parallel calls from several goroutines
// at once, each part starting nested calls, on one pool. Run with -race.
func TestParallelConcurrentCallers(t *testing.T) {
	b := &Backend{Threads: 4}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for it := range 100 {
				n := 10 + (g*37+it*11)%90
				out := make([]int, n)
				b.parallel(n, 1, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						var s atomic.Int64
						b.parallel(i+1, 1, func(lo, hi int) {
							for j := lo; j < hi; j++ {
								s.Add(int64(j))
							}
						})
						out[i] = int(s.Load())
					}
				})
				for i, v := range out {
					if v != i*(i+1)/2 {
						t.Errorf("goroutine %d: out[%d] = %d, want %d", g, i, v, i*(i+1)/2)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkParallel measures one fork-join of Threads near-empty parts
// (the pool's per-call overhead).
func BenchmarkParallel(bn *testing.B) {
	b := New()
	var sink atomic.Int64
	for bn.Loop() {
		b.parallel(b.Threads, 1, func(lo, hi int) { sink.Add(int64(hi - lo)) })
	}
}
