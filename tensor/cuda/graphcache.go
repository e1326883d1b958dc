package cuda

import (
	"bytes"
	"container/list"
	"hash/maphash"
)

// graphCache keeps executable graphs under the shape of the work they do: a key is the sequence of a record's
// operations with their kernels and parameter layouts but not their values (passRecord.key), so a kept graph is
// replayed for any record of the same shape once its nodes have been given that record's launch shapes,
// parameters, addresses and sizes (passRecord.changed: only the nodes that differ). Keys are compared byte for
// byte; the hash only finds candidates. A key is captured when it is seen the second time (once is not a pattern
// worth the capture's cost); at most max graphs are kept, the least recently replayed destroyed first, and at most
// 4·max keys wait for their second sighting, the oldest forgotten first. Capture failures are remembered per key
// (their passes run eagerly) and counted, as are graphs whose nodes could not be set (drop). G is the graph
// handle; destroy frees one. Not safe for concurrent use (the device goroutine owns it); counts is.
type graphCache[G any] struct {
	max     int
	destroy func(G)
	hash    func([]byte) uint64 // a key's hash (maphash; tests force collisions)
	byHash  map[uint64][]*graphEntry[G]
	kept    list.List // *graphEntry with a graph, most recently used first
	waiting list.List // *graphEntry seen once, or whose capture failed, newest first

	captured, failed, evicted, dropped int
	failedWaiting                      int // entries on waiting whose capture failed
}

// graphEntry is one key: its graph once captured.
type graphEntry[G any] struct {
	key    []byte
	hash   uint64
	graph  G
	has    bool // graph is set
	failed bool // capture failed: run eagerly
	elem   *list.Element
}

// graphAction says what to do with a recorded pass.
type graphAction int

const (
	graphEager   graphAction = iota // issue the work as recorded
	graphCapture                    // capture it, keep the graph (captured or failed), launch it
	graphReplay                     // launch the kept graph
)

func newGraphCache[G any](max int, destroy func(G)) *graphCache[G] {
	seed := maphash.MakeSeed()
	return &graphCache[G]{max: max, destroy: destroy, hash: func(b []byte) uint64 { return maphash.Bytes(seed, b) },
		byHash: map[uint64][]*graphEntry[G]{}}
}

// lookup finds key's entry and says what to do with the pass; the entry is nil for graphEager. key is copied
// when kept.
func (c *graphCache[G]) lookup(key []byte) (*graphEntry[G], graphAction) {
	h := c.hash(key)
	for _, e := range c.byHash[h] {
		if !bytes.Equal(e.key, key) {
			continue
		}
		switch {
		case e.has:
			c.kept.MoveToFront(e.elem)
			return e, graphReplay
		case e.failed:
			c.waiting.MoveToFront(e.elem)
			return nil, graphEager
		}
		return e, graphCapture
	}
	e := &graphEntry[G]{key: bytes.Clone(key), hash: h}
	c.byHash[h] = append(c.byHash[h], e)
	e.elem = c.waiting.PushFront(e)
	for c.waiting.Len() > 4*max(c.max, 1) {
		c.remove(c.waiting.Back().Value.(*graphEntry[G]), &c.waiting)
	}
	return nil, graphEager
}

// done records the outcome of capturing e: its graph (ok), or a failure. Keeping a graph may destroy the least
// recently used one.
func (c *graphCache[G]) done(e *graphEntry[G], g G, ok bool) {
	if !ok {
		e.failed = true
		c.failed++
		c.failedWaiting++
		c.waiting.MoveToFront(e.elem)
		return
	}
	c.waiting.Remove(e.elem)
	e.graph, e.has = g, true
	e.elem = c.kept.PushFront(e)
	c.captured++
	for c.kept.Len() > c.max {
		c.evicted++
		c.remove(c.kept.Back().Value.(*graphEntry[G]), &c.kept)
	}
}

// drop destroys the graph of kept entry e, whose nodes could not be set for a record: like a failed capture, its
// key runs eagerly from then on (rather than be captured and dropped again and again).
func (c *graphCache[G]) drop(e *graphEntry[G]) {
	c.dropped++
	c.kept.Remove(e.elem)
	c.destroy(e.graph)
	var zero G
	e.graph, e.has, e.failed = zero, false, true
	c.failedWaiting++
	e.elem = c.waiting.PushFront(e)
}

// remove forgets e (on list l), destroying its graph.
func (c *graphCache[G]) remove(e *graphEntry[G], l *list.List) {
	l.Remove(e.elem)
	if e.failed {
		c.failedWaiting--
	}
	es := c.byHash[e.hash]
	for i, x := range es {
		if x == e {
			es = append(es[:i], es[i+1:]...)
			break
		}
	}
	if len(es) == 0 {
		delete(c.byHash, e.hash)
	} else {
		c.byHash[e.hash] = es
	}
	if e.has {
		c.destroy(e.graph)
		e.has = false
	}
}

// clear destroys every graph and forgets every key (the counters stay).
func (c *graphCache[G]) clear() {
	for c.kept.Len() > 0 {
		c.remove(c.kept.Front().Value.(*graphEntry[G]), &c.kept)
	}
	for c.waiting.Len() > 0 {
		c.remove(c.waiting.Front().Value.(*graphEntry[G]), &c.waiting)
	}
}

// GraphCounts are the counters of a device's pass graphs, as Kev's model card reports them.
type GraphCounts struct {
	Captured int // graphs captured so far (evicted ones included)
	Kept     int // graphs kept now
	Pending  int // pass records seen once, waiting for a second sighting to be captured
	Failed   int // captures that failed (those passes run eagerly)
	Replays  int // passes replayed from a kept graph
	Eager    int // recorded passes issued eagerly (first sightings, failures)
	Evicted  int // graphs destroyed to stay within the bound
	Updated  int // graph nodes set to a replayed record's parameters (those that differed from the last replay's)
	Dropped  int // graphs destroyed because a replay could not set their nodes (those passes ran eagerly)

	LastError string // why the last capture failed or the last graph was dropped ("" when none has been)
}

// counts returns the cache's counters (Replays and Eager are the caller's).
func (c *graphCache[G]) counts() GraphCounts {
	return GraphCounts{Captured: c.captured, Kept: c.kept.Len(), Pending: c.waiting.Len() - c.failedWaiting,
		Failed: c.failed, Evicted: c.evicted, Dropped: c.dropped}
}

// passRecord is the work of a pass recorded instead of issued: its operations, the key that names their shape,
// and the bytes its uploads stage. The key holds each operation's kind, and a launch's kernel and parameter layout
// (how many parameters, their offsets and bytes); not the values that change from pass to pass (launch shapes,
// parameter values, addresses, sizes), which a replay sets in the graph's nodes (changed, apply), nor the uploaded
// contents, copied to the device before the work runs (eagerly or as a graph).
type passRecord struct {
	key  []byte  // the operations' shape, encoded
	ops  []recOp // the operations in order
	args []byte  // kernel parameter bytes of the launches
	offs []int32 // kernel parameter offsets of the launches
	data []byte  // staged upload bytes, each upload at a 256-byte aligned offset (its offset in the staging buffer)
	sent int     // data[:sent] is on the device already (staged by an operation still running at the last flush)
}

// recOp is one recorded operation.
type recOp struct {
	kind         byte // opLaunch, opCopy, opMemset16
	fn           int  // launch: the kernel's index in the recorder's list
	grid, block  [3]uint32
	shared       uint32
	argLo, argHi int // launch: its parameter bytes in passRecord.args
	offLo, offHi int // launch: its parameter offsets in passRecord.offs
	dst, src     uint64
	n            int64
	v            uint16
}

const (
	opLaunch   = 'L'
	opCopy     = 'C' // device to device (uploads read their bytes from the staging buffer)
	opMemset16 = 'M'
)

// stageAlign aligns each staged upload, as the pool aligns its buffers.
const stageAlign = 256

// next starts a new record once this one has been issued. keepData keeps the staged bytes where they are (an
// operation that staged some is still running: its later launches, in the new record, read them), so new
// uploads are staged after them; otherwise staging starts over at offset 0.
func (r *passRecord) next(keepData bool) {
	r.key, r.ops, r.args, r.offs = r.key[:0], r.ops[:0], r.args[:0], r.offs[:0]
	if keepData {
		r.sent = len(r.data)
	} else {
		r.data, r.sent = r.data[:0], 0
	}
}

// atOpStart is called as an operation starts with no other running: it reports whether the record should be
// issued first (it holds segOps operations, or more than half of limit staged bytes). An empty record starts its
// staging over at offset 0 (bytes kept for an operation that has finished are read by nobody now), so that where
// a pass stages its uploads depends only on the pass, not on what ran before it.
func (r *passRecord) atOpStart(segOps, limit int) (flush bool) {
	if r.empty() {
		r.reset()
		return false
	}
	return len(r.ops) >= segOps || len(r.data) > limit/2
}

// reset empties r.
func (r *passRecord) reset() { r.next(false) }

// empty reports whether nothing was recorded.
func (r *passRecord) empty() bool { return len(r.ops) == 0 && len(r.data) == r.sent }

func appendU64(b []byte, v uint64) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}

func appendU32(b []byte, v uint32) []byte {
	return append(b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
}

// launch records kernel fn (its index fnIndex, its driver handle fnID) with its shape and parameters.
func (r *passRecord) launch(fnIndex int, fnID uint64, grid, block [3]uint32, shared uint32, args []byte, offs []int32) {
	op := recOp{kind: opLaunch, fn: fnIndex, grid: grid, block: block, shared: shared,
		argLo: len(r.args), offLo: len(r.offs)}
	r.args = append(r.args, args...)
	r.offs = append(r.offs, offs...)
	op.argHi, op.offHi = len(r.args), len(r.offs)
	r.ops = append(r.ops, op)
	k := append(r.key, opLaunch)
	k = appendU64(k, fnID)
	k = appendU32(k, uint32(len(offs)))
	k = appendU32(k, uint32(len(args)))
	for _, o := range offs {
		k = appendU32(k, uint32(o))
	}
	r.key = k
}

// copy records a device-to-device copy of n bytes.
func (r *passRecord) copy(dst, src uint64, n int64) {
	r.ops = append(r.ops, recOp{kind: opCopy, dst: dst, src: src, n: n})
	r.key = append(r.key, opCopy)
}

// memset16 records filling n 16-bit words at dst with v.
func (r *passRecord) memset16(dst uint64, v uint16, n int64) {
	r.ops = append(r.ops, recOp{kind: opMemset16, dst: dst, v: v, n: n})
	r.key = append(r.key, opMemset16)
}

// graphParams are the parameters the nodes of a kept graph hold: a snapshot of the operations and launch
// parameter bytes of the record it was captured from, each node's updated as a replay sets it (apply).
type graphParams struct {
	ops  []recOp
	args []byte
}

// snapshot returns a copy of r's operations and parameter bytes.
func (r *passRecord) snapshot() graphParams {
	return graphParams{ops: append([]recOp(nil), r.ops...), args: append([]byte(nil), r.args...)}
}

// changed reports whether operation i of r differs from what node i of a graph of r's key holds (p): another
// launch shape or parameter value, another address, size or fill value. The kind, the kernel and the parameter
// layout are the key's, the same in both.
func (r *passRecord) changed(i int, p *graphParams) bool {
	a, b := &r.ops[i], &p.ops[i]
	switch a.kind {
	case opLaunch:
		return a.grid != b.grid || a.block != b.block || a.shared != b.shared ||
			!bytes.Equal(r.args[a.argLo:a.argHi], p.args[b.argLo:b.argHi])
	case opCopy:
		return a.dst != b.dst || a.src != b.src || a.n != b.n
	}
	return a.dst != b.dst || a.v != b.v || a.n != b.n
}

// apply notes in p that node i now holds operation i of r.
func (r *passRecord) apply(i int, p *graphParams) {
	a := r.ops[i]
	b := &p.ops[i]
	copy(p.args[b.argLo:b.argHi], r.args[a.argLo:a.argHi])
	a.argLo, a.argHi, a.offLo, a.offHi = b.argLo, b.argHi, b.offLo, b.offHi
	*b = a
}

// stage appends b to the staged bytes at the next aligned offset and returns it; ok is false when the staged bytes
// would pass limit (nothing is appended then).
func (r *passRecord) stage(b []byte, limit int) (off int, ok bool) {
	off = (len(r.data) + stageAlign - 1) &^ (stageAlign - 1)
	if off+len(b) > limit {
		return 0, false
	}
	for len(r.data) < off {
		r.data = append(r.data, 0)
	}
	r.data = append(r.data, b...)
	return off, true
}
