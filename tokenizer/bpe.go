package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

// merge is the result of merging one pair: its rank in the merges list and
// the id of the merged token.
type merge struct {
	rank int32
	id   int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// bpe is a byte-level BPE model. Words are raw UTF-8 bytes: byteID maps
// each byte to the id of its byte-level character.
type bpe struct {
	byteID       [256]int32 // -1 when the byte's character is not in the vocabulary
	merges       map[uint64]merge
	unk          int32 // -1 when there is no unk_token
	fuseUnk      bool
	ignoreMerges bool
	rawVocab     map[string]int32 // raw bytes -> id, only with ignoreMerges
	cache        wordCache
}

// Words up to cacheMaxLen bytes are cached in a direct-mapped table of
// cacheSlots entries. A slot holds an immutable entry behind an atomic
// pointer, so lookups take no lock; a colliding word replaces it.
const (
	cacheSlots  = 1 << 15
	cacheMaxLen = 128
)

type cacheEntry struct {
	word string
	ids  []int
}

type wordCache struct {
	seed  maphash.Seed
	slots []atomic.Pointer[cacheEntry]
}

func (c *wordCache) init() {
	c.seed = maphash.MakeSeed()
	c.slots = make([]atomic.Pointer[cacheEntry], cacheSlots)
}

// appendWord appends the ids of one pre-tokenized word.
func (m *bpe) appendWord(out []int, w string) []int {
	if len(w) == 1 {
		if id := m.byteID[w[0]]; id >= 0 {
			return append(out, int(id))
		}
	}
	if m.ignoreMerges {
		if id, ok := m.rawVocab[w]; ok {
			return append(out, int(id))
		}
	}
	if len(w) > cacheMaxLen {
		return m.mergeWord(out, w)
	}
	slot := &m.cache.slots[maphash.String(m.cache.seed, w)&(cacheSlots-1)]
	if e := slot.Load(); e != nil && e.word == w {
		return append(out, e.ids...)
	}
	n := len(out)
	out = m.mergeWord(out, w)
	ids := make([]int, len(out)-n)
	copy(ids, out[n:])
	slot.Store(&cacheEntry{word: strings.Clone(w), ids: ids})
	return out
}

type symbol struct {
	id         int32
	prev, next int32
	gone       bool
}

type heapItem struct {
	rank, pos, id int32
}

func (a heapItem) less(b heapItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

// mergeWord applies the merges to w exactly as Hugging Face's BPE does: a
// min-heap of candidate pairs ordered by (rank, position of the left
// symbol); a popped pair is applied only if it is still current.
func (m *bpe) mergeWord(out []int, w string) []int {
	var symBuf [64]symbol
	var heapBuf [192]heapItem
	syms := symBuf[:0]
	h := heapBuf[:0]
	if len(w) > len(symBuf) {
		syms = make([]symbol, 0, len(w))
		h = make([]heapItem, 0, 3*len(w))
	}
	// Symbols: one per byte; unknown bytes become unk (fused if asked) or
	// are dropped when there is no unk token.
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			syms = append(syms, symbol{id: m.unk})
			pendingUnk = false
		}
	}
	for i := 0; i < len(w); i++ {
		id := m.byteID[w[i]]
		if id >= 0 {
			flushUnk()
			syms = append(syms, symbol{id: id})
			continue
		}
		if m.unk < 0 {
			continue
		}
		if !m.fuseUnk {
			flushUnk()
		}
		pendingUnk = true
	}
	flushUnk()
	for i := range syms {
		syms[i].prev = int32(i) - 1
		syms[i].next = int32(i) + 1
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	push := func(it heapItem) {
		h = append(h, it)
		for j := len(h) - 1; j > 0; {
			p := (j - 1) / 2
			if !h[j].less(h[p]) {
				break
			}
			h[j], h[p] = h[p], h[j]
			j = p
		}
	}
	pop := func() heapItem {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for j := 0; ; {
			l := 2*j + 1
			if l >= len(h) {
				break
			}
			c := l
			if r := l + 1; r < len(h) && h[r].less(h[l]) {
				c = r
			}
			if !h[c].less(h[j]) {
				break
			}
			h[j], h[c] = h[c], h[j]
			j = c
		}
		return top
	}
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			push(heapItem{mg.rank, int32(i), mg.id})
		}
	}
	for len(h) > 0 {
		top := pop()
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		nx := cur.next
		right := syms[nx]
		if mg, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mg.id != top.id {
			continue // stale entry
		}
		cur.id = top.id
		cur.next = right.next
		syms[nx].gone = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				push(heapItem{mg.rank, cur.prev, mg.id})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				push(heapItem{mg.rank, top.pos, mg.id})
			}
		}
	}
	for _, s := range syms {
		if !s.gone {
			out = append(out, int(s.id))
		}
	}
	return out
}
