package cpu

import (
	"math/bits"
	"sync"
)

// Float32 buffers of freed tensors are recycled for new results. A fresh
// allocation of a large result is memory the process has never touched, and
// the first write to each page then takes a fault (on a model with a large
// heap the collector runs rarely, so most results are fresh); a recycled
// buffer is already mapped. Buffers live in sync.Pools, one per size class,
// so the collector still reclaims those left unused.

// minPooled is the smallest buffer (in float32s) worth recycling.
const minPooled = 1 << 14

var (
	poolMu sync.Mutex
	pools  = map[int]*sync.Pool{}
)

// sizeClass rounds n up to a capacity with at most three significant bits,
// so classes are at most 25% apart.
func sizeClass(n int) int {
	shift := max(bits.Len(uint(n))-3, 0)
	return (n + 1<<shift - 1) >> shift << shift
}

func poolFor(class int) *sync.Pool {
	poolMu.Lock()
	defer poolMu.Unlock()
	p := pools[class]
	if p == nil {
		p = &sync.Pool{}
		pools[class] = p
	}
	return p
}

// allocF32 returns n zeroed float32s, recycled when a freed buffer of the
// size class is at hand.
func allocF32(n int) []float32 {
	if n < minPooled {
		return make([]float32, n)
	}
	c := sizeClass(n)
	if v, ok := poolFor(c).Get().(*[]float32); ok {
		s := (*v)[:n]
		clear(s)
		return s
	}
	return make([]float32, n, c)
}

// recycle hands the buffer of a freed tensor back for reuse; the caller
// gives up every reference to it.
func recycle(s []float32) {
	c := cap(s)
	if c < minPooled || sizeClass(c) != c {
		return
	}
	s = s[:c]
	poolFor(c).Put(&s)
}
