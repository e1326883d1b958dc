// Package prefixcache keeps computed state prefixes across requests, as Kev's server does: a request whose state
// (its token ids) was seen recently only pays for its question rows.
//
// The cache is least-recently-used with two bounds, a number of states and a sum of state tokens; a state shorter
// than the minimum or longer than the token bound is never cached. A batch of requests goes through Plan (which
// cached prefix each request gets, and which new prefixes are worth keeping: only those that will still be cached
// after the batch), MakeRoom (evict now what the batch would evict anyway, so an old prefix is not held through
// the passes that replace it), the model pass, and Store. Run does all of it, with the out-of-memory retry.
package prefixcache

import (
	"encoding/binary"
	"sync"
)

// DefaultMaxTokens is Kev's default bound on the state tokens cached in all: one 64k state, or four 16k ones.
const DefaultMaxTokens = 65536

// Key identifies a state: its token ids (the <state> token included) and whether options are isolated.
type Key struct {
	ids      string
	n        int
	isolated bool
}

// NewKey returns the key of a state.
func NewKey(stateIDs []int, optionIsolation bool) Key {
	b := make([]byte, 0, 4*len(stateIDs))
	for _, id := range stateIDs {
		b = binary.LittleEndian.AppendUint32(b, uint32(id))
	}
	return Key{ids: string(b), n: len(stateIDs), isolated: optionIsolation}
}

// Len returns the state's token count.
func (k Key) Len() int { return k.n }

// Slot is one request's part of a plan.
type Slot[V any] struct {
	Key    Key
	Keyed  bool // the state is cacheable (its length within the bounds, the cache enabled)
	Cached V    // the cached prefix, when Hit
	Hit    bool
	Keep   bool // a prefix computed for this state is to be stored: it will survive the batch

	prefix    V
	hasPrefix bool
}

// SetPrefix records the prefix the model pass returned for this request (a hit's own, or a kept new one); Store
// inserts it.
func (s *Slot[V]) SetPrefix(v V) {
	s.prefix, s.hasPrefix = v, true
}

// Plan is a batch's view of the cache, one slot per request in batch order.
type Plan[V any] struct {
	Slots []Slot[V]
}

// Stats are the cache's bounds, contents and counters.
type Stats struct {
	Size, MinTokens, MaxTokens int
	Entries, Tokens            int // states cached and their tokens
	Hits, Misses               int // per request with a cacheable state, not per distinct state
	OOMRetries                 int // batches that ran out of memory with states held and ran again uncached
}

// Cache is a prefix cache over values of type V. It is safe for concurrent use; a plan is used by one goroutine.
type Cache[V any] struct {
	mu                         sync.Mutex
	size, minTokens, maxTokens int
	order                      []Key // least recently used first
	entries                    map[Key]V
	hits, misses, oomRetries   int
}

// New returns a cache of at most size states and maxTokens state tokens in all, caching states of at least
// minTokens tokens. Size 0 disables it.
func New[V any](size, minTokens, maxTokens int) *Cache[V] {
	return &Cache[V]{size: size, minTokens: minTokens, maxTokens: maxTokens, entries: make(map[Key]V)}
}

// Plan returns, per request, its key (when cacheable), its cached prefix, and whether to keep a new prefix. The
// kept states are the batch's last distinct cacheable ones, walking back from the last request while both bounds
// hold: the ones Store would not evict again before the batch ends.
func (c *Cache[V]) Plan(states [][]int, optionIsolation bool) *Plan[V] {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := &Plan[V]{Slots: make([]Slot[V], len(states))}
	for i, ids := range states {
		n := len(ids)
		if c.size > 0 && c.minTokens <= n && n <= c.maxTokens {
			s := &p.Slots[i]
			s.Key, s.Keyed = NewKey(ids, optionIsolation), true
			s.Cached, s.Hit = c.entries[s.Key]
		}
	}
	survivors := map[Key]bool{}
	seen := map[Key]bool{}
	tokens := 0
	for i := len(p.Slots) - 1; i >= 0; i-- {
		s := p.Slots[i]
		if !s.Keyed || seen[s.Key] {
			continue
		}
		seen[s.Key] = true
		if len(survivors) == c.size || tokens+s.Key.n > c.maxTokens {
			break
		}
		survivors[s.Key] = true
		tokens += s.Key.n
	}
	for i := range p.Slots {
		p.Slots[i].Keep = p.Slots[i].Keyed && survivors[p.Slots[i].Key]
	}
	return p
}

// over reports whether keys exceed a bound.
func (c *Cache[V]) over(keys []Key) bool {
	if len(keys) > c.size {
		return true
	}
	t := 0
	for _, k := range keys {
		t += k.n
	}
	return t > c.maxTokens
}

// MakeRoom evicts, before the batch runs, the entries Store would evict after it: every hit and kept state moves
// to the most recent end of the order, and the least recent are dropped while over a bound. A dropped hit stays
// valid for this batch in its slot.
func (c *Cache[V]) MakeRoom(p *Plan[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	order := append([]Key(nil), c.order...)
	for _, s := range p.Slots {
		if s.Keyed && (s.Hit || s.Keep) {
			order = moveToEnd(order, s.Key)
		}
	}
	for c.over(order) {
		delete(c.entries, order[0])
		c.removeKey(order[0])
		order = order[1:]
	}
}

func moveToEnd(order []Key, k Key) []Key {
	out := order[:0:0]
	for _, o := range order {
		if o != k {
			out = append(out, o)
		}
	}
	return append(out, k)
}

func (c *Cache[V]) removeKey(k Key) {
	for i, o := range c.order {
		if o == k {
			c.order = append(c.order[:i:i], c.order[i+1:]...)
			return
		}
	}
}

// Store counts each cacheable request as a hit or a miss and inserts, in batch order, every prefix set on a slot
// as the most recent, evicting the least recent while over a bound.
func (c *Cache[V]) Store(p *Plan[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range p.Slots {
		if !s.Keyed {
			continue
		}
		if s.Hit {
			c.hits++
		} else {
			c.misses++
		}
		if !s.hasPrefix {
			continue
		}
		if _, ok := c.entries[s.Key]; ok {
			c.removeKey(s.Key)
		}
		c.entries[s.Key] = s.prefix
		c.order = append(c.order, s.Key)
		for c.over(c.order) {
			delete(c.entries, c.order[0])
			c.order = c.order[1:]
		}
	}
}

// Contains reports whether a state with key k is cached now. It counts no hit or miss and moves nothing.
func (c *Cache[V]) Contains(k Key) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.entries[k]
	return ok
}

// Clear drops every entry; the counters stay.
func (c *Cache[V]) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order = nil
	c.entries = make(map[Key]V)
}

// Entries returns the cached prefixes, least recently used first.
func (c *Cache[V]) Entries() []V {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]V, len(c.order))
	for i, k := range c.order {
		out[i] = c.entries[k]
	}
	return out
}

// Stats returns the bounds, the contents and the counters.
func (c *Cache[V]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, k := range c.order {
		t += k.n
	}
	return Stats{Size: c.size, MinTokens: c.minTokens, MaxTokens: c.maxTokens, Entries: len(c.order), Tokens: t,
		Hits: c.hits, Misses: c.misses, OOMRetries: c.oomRetries}
}

// Run answers one batch through the cache: Plan, MakeRoom, then pass, which runs the model and calls SetPrefix on
// the slots whose prefix it returns; then Store. When pass fails with an error isOOM accepts while any state is
// held (cached, or a hit of this batch), the whole cache is dropped, OOMRetries counted, and the batch runs once
// more with nothing cached. A second failure, an out-of-memory error with nothing held, or any other error is
// returned, and nothing is stored. The plan of the pass that succeeded is returned (its slots say which requests
// hit the cache).
func (c *Cache[V]) Run(states [][]int, optionIsolation bool, pass func(*Plan[V]) error, isOOM func(error) bool) (*Plan[V], error) {
	for retry := false; ; retry = true {
		p := c.Plan(states, optionIsolation)
		c.MakeRoom(p)
		err := pass(p)
		if err == nil {
			c.Store(p)
			return p, nil
		}
		if retry || !c.held(p) || isOOM == nil || !isOOM(err) {
			return p, err
		}
		c.Clear()
		c.mu.Lock()
		c.oomRetries++
		c.mu.Unlock()
	}
}

func (c *Cache[V]) held(p *Plan[V]) bool {
	c.mu.Lock()
	n := len(c.order)
	c.mu.Unlock()
	if n > 0 {
		return true
	}
	for _, s := range p.Slots {
		if s.Hit {
			return true
		}
	}
	return false
}
