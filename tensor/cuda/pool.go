//go:build cuda

package cuda

import (
	"fmt"
	"math/bits"
	"sort"
	"sync"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
)

// pool recycles device memory by size class, so that operations allocate from free lists rather than the driver.
// Classes are 256 bytes and up, four per power of two (2^k, 1.25·2^k, 1.5·2^k, 1.75·2^k), wasting at most a
// fifth. Each free list is sorted by address and get takes the lowest, so that the same free buffers and the same
// sequence of requests give the same addresses (a pass graph's record names its buffers). Because every kernel runs on the device's one stream and every host copy waits for it, a buffer handed
// back may be reused by the next operation at once.
type pool struct {
	mu     sync.Mutex
	free   map[int64][]cu.DevicePtr
	cached int64 // bytes on the free lists
	held   int64 // bytes obtained from the driver and not yet returned to it
	allocs int64 // cuMemAlloc calls
}

// sizeClass rounds n up to its class.
func sizeClass(n int64) int64 {
	if n <= 256 {
		return 256
	}
	e := 63 - bits.LeadingZeros64(uint64(n-1)) // 2^e < n ≤ 2^(e+1)
	step := int64(1) << (e - 2)
	return (n + step - 1) / step * step
}

// get returns a buffer of at least n bytes (n > 0): the lowest-addressed one on its free list, or else one from
// the driver. Call it on the device goroutine.
func (p *pool) get(n int64) (Buffer, error) {
	c := sizeClass(n)
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		ptr := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.cached -= c
		p.mu.Unlock()
		return Buffer{ptr, c}, nil
	}
	p.mu.Unlock()
	ptr, err := cu.MemAlloc(c)
	if err != nil {
		return Buffer{}, cudrv.Wrap(fmt.Sprintf("cuMemAlloc(%d)", c), err)
	}
	p.mu.Lock()
	p.held += c
	p.allocs++
	p.mu.Unlock()
	return Buffer{ptr, c}, nil
}

// put hands b back to its free list; a zero Buffer is ignored. Safe on any goroutine.
func (p *pool) put(b Buffer) {
	if b.Ptr == 0 {
		return
	}
	p.mu.Lock()
	if p.free == nil {
		p.free = map[int64][]cu.DevicePtr{}
	}
	l := p.free[b.Bytes] // sorted by descending address: the last is the lowest
	i := sort.Search(len(l), func(i int) bool { return l[i] < b.Ptr })
	l = append(l, 0)
	copy(l[i+1:], l[i:])
	l[i] = b.Ptr
	p.free[b.Bytes] = l
	p.cached += b.Bytes
	p.mu.Unlock()
}

// trim returns every cached buffer to the driver and reports the bytes released. Call it on the device goroutine
// after the stream has finished with them (cuMemFree waits for the device).
func (p *pool) trim() int64 {
	p.mu.Lock()
	free := p.free
	p.free = map[int64][]cu.DevicePtr{}
	released := p.cached
	p.cached = 0
	p.held -= released
	p.mu.Unlock()
	for _, l := range free {
		for _, ptr := range l {
			cu.MemFree(ptr)
		}
	}
	return released
}

// stats reports the bytes held from the driver and the part of them on the free lists.
func (p *pool) stats() (held, cached int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held, p.cached
}

// driverAllocs reports the allocations made from the driver so far.
func (p *pool) driverAllocs() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.allocs
}
