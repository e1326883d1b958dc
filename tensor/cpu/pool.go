package cpu

import (
	"math"
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
	s, recycled := allocF32Dirty(n)
	if recycled || poisonDirty {
		clear(s)
	}
	return s
}

// allocF32Dirty returns n float32s for a result its operation overwrites in
// full: a recycled buffer keeps what it held (clearing a result of tens of
// megabytes on one thread costs milliseconds beside a parallel operation).
// It reports whether the buffer was recycled.
func allocF32Dirty(n int) (s []float32, recycled bool) {
	defer func() {
		if poisonDirty {
			for i := range s {
				s[i] = float32(math.NaN())
			}
		}
	}()
	if n < minPooled {
		return make([]float32, n), false
	}
	c := sizeClass(n)
	if v, ok := poolFor(c).Get().(*[]float32); ok {
		return (*v)[:n], true
	}
	return make([]float32, n, c), false
}

// poisonDirty makes allocF32Dirty fill every buffer with NaN, so that the
// tests see any element an operation fails to write.
var poisonDirty = false

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
