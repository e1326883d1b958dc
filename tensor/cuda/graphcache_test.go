package cuda

import (
	"bytes"
	"fmt"
	"testing"
)

// record builds a pass record of n launches whose parameters depend on ptr and scalar.
func record(n int, ptr uint64, scalar uint32) *passRecord {
	r := &passRecord{}
	for i := range n {
		args := appendU64(nil, ptr+uint64(i)*256)
		args = appendU32(args, scalar)
		args = append(args, 0, 0, 0, 0) // padding
		args = appendU64(args, 7)
		r.launch(i, 0x1000+uint64(i%3), [3]uint32{uint32(i + 1), 1, 1}, [3]uint32{128, 1, 1}, 0, args, []int32{0, 8, 16})
	}
	r.copy(ptr, ptr+4096, 512)
	r.memset16(ptr+8192, 0xffff, 64)
	return r
}

// TestPassRecordKey checks that a record's key is its shape: records that differ in launch shapes, parameter
// values, addresses or sizes share it; another kernel, parameter layout or sequence of operations does not.
func TestPassRecordKey(t *testing.T) {
	base := record(5, 1<<20, 3)
	same := map[string]*passRecord{
		"equal":           record(5, 1<<20, 3),
		"another address": record(5, 1<<21, 3),
		"another scalar":  record(5, 1<<20, 4),
		"another grid": func() *passRecord {
			r := record(5, 1<<20, 3)
			r.ops[4].grid[0] = 9
			return r
		}(),
	}
	for name, r := range same {
		if !bytes.Equal(base.key, r.key) {
			t.Errorf("%s: another key", name)
		}
	}
	differ := map[string]*passRecord{
		"one launch fewer": record(4, 1<<20, 3),
		"another kernel": func() *passRecord {
			r := &passRecord{}
			for i := range 5 {
				op := base.ops[i]
				r.launch(i, 0x2000, op.grid, op.block, op.shared, base.args[op.argLo:op.argHi], base.offs[op.offLo:op.offHi])
			}
			r.copy(1, 2, 3)
			r.memset16(4, 5, 6)
			return r
		}(),
		"another parameter layout": func() *passRecord {
			r := &passRecord{}
			for i := range 5 {
				op := base.ops[i]
				r.launch(i, 0x1000+uint64(i%3), op.grid, op.block, op.shared, base.args[op.argLo:op.argHi], []int32{0, 12, 16})
			}
			r.copy(1, 2, 3)
			r.memset16(4, 5, 6)
			return r
		}(),
		"copy and fill swapped": func() *passRecord {
			r := record(5, 1<<20, 3)
			r.key[len(r.key)-1], r.key[len(r.key)-2] = r.key[len(r.key)-2], r.key[len(r.key)-1]
			return r
		}(),
	}
	for name, r := range differ {
		if bytes.Equal(base.key, r.key) {
			t.Errorf("%s: same key", name)
		}
	}
	if len(base.ops) != 7 || base.ops[5].kind != opCopy || base.ops[6].kind != opMemset16 {
		t.Fatalf("ops %+v", base.ops)
	}
	op := base.ops[2]
	if got := base.args[op.argLo:op.argHi]; len(got) != 24 || got[0] != 0 || got[1] != 2 || got[2] != 16 {
		t.Errorf("launch 2's parameters %v", got)
	}
	if got := base.offs[op.offLo:op.offHi]; len(got) != 3 || got[2] != 16 {
		t.Errorf("launch 2's offsets %v", got)
	}
	base.reset()
	if !base.empty() || len(base.key) != 0 {
		t.Error("reset left work")
	}
}

// TestPassRecordChanged checks which nodes of a graph a record of its key must set: exactly the operations whose
// launch shape, parameter bytes, addresses, size or fill value differ, and none once applied.
func TestPassRecordChanged(t *testing.T) {
	base := record(5, 1<<20, 3)
	p := base.snapshot()
	for i := range base.ops {
		if base.changed(i, &p) {
			t.Errorf("op %d changed against its own snapshot", i)
		}
	}
	r := record(5, 1<<20, 3)
	r.ops[1].grid[1] = 2         // a launch shape
	r.ops[2].shared = 1024       // its shared memory
	r.args[r.ops[3].argLo+8] = 9 // a parameter value
	r.ops[5].n = 256             // the copy's size
	r.ops[6].v = 0               // the fill value
	want := map[int]bool{1: true, 2: true, 3: true, 5: true, 6: true}
	for i := range r.ops {
		if got := r.changed(i, &p); got != want[i] {
			t.Errorf("op %d: changed %v, want %v", i, got, want[i])
		}
	}
	moved := record(5, 1<<21, 3) // every address: every launch's first parameter, the copy and the fill
	for i := range moved.ops {
		if !moved.changed(i, &p) {
			t.Errorf("op %d at other addresses: not changed", i)
		}
	}
	for i := range r.ops {
		r.apply(i, &p)
	}
	for i := range r.ops {
		if r.changed(i, &p) {
			t.Errorf("op %d changed after apply", i)
		}
	}
	if base.changed(3, &p) != true || base.changed(0, &p) {
		t.Error("apply did not take op 3's parameters, or changed op 0's")
	}
	if len(p.args) != len(base.args) || p.ops[3].argLo != base.ops[3].argLo {
		t.Errorf("apply moved the parameter bytes: %d bytes, op 3 at %d", len(p.args), p.ops[3].argLo)
	}
}

func TestPassRecordStage(t *testing.T) {
	var r passRecord
	before := append([]byte(nil), record(2, 1<<20, 1).key...)
	tests := []struct {
		n, off int
		ok     bool
	}{{10, 0, true}, {300, 256, true}, {1, 768, true}, {300, 0, false}, {255, 1024, true}}
	for i, tc := range tests {
		b := bytes.Repeat([]byte{byte(i + 1)}, tc.n)
		off, ok := r.stage(b, 1280)
		if ok != tc.ok || (ok && off != tc.off) {
			t.Fatalf("stage %d (%d bytes): offset %d ok %v, want %d %v", i, tc.n, off, ok, tc.off, tc.ok)
		}
		if ok && !bytes.Equal(r.data[off:off+tc.n], b) {
			t.Fatalf("stage %d: bytes not kept", i)
		}
	}
	if len(r.key) != 0 {
		t.Error("staged bytes went into the key")
	}
	// Staged contents never enter the key: records differing only in them share it.
	r2 := record(2, 1<<20, 1)
	r2.stage([]byte{9, 9, 9}, 1<<10)
	if !bytes.Equal(before, r2.key) {
		t.Error("staging changed the key")
	}
}

// fakeGraph is a graph handle for the cache tests; destroyed records which were destroyed.
type fakeGraph int

func TestGraphCache(t *testing.T) {
	var destroyed []fakeGraph
	c := newGraphCache(2, func(g fakeGraph) { destroyed = append(destroyed, g) })
	key := func(i int) []byte { return record(i, 1<<20, 0).key } // i launches: a shape of its own
	type step struct {
		key  int
		want graphAction
		ok   bool // capture outcome when want is graphCapture
	}
	steps := []step{
		{1, graphEager, false}, {1, graphCapture, true}, {1, graphReplay, false}, // seen twice: captured, replayed
		{2, graphEager, false}, {2, graphCapture, true}, {1, graphReplay, false}, // 1 is now the most recent
		{3, graphEager, false}, {3, graphCapture, true}, // kept 3 > 2: graph 2 (least recent) destroyed
		{2, graphEager, false}, {1, graphReplay, false}, {3, graphReplay, false},
		{4, graphEager, false}, {4, graphCapture, false}, {4, graphEager, false}, // failed: eager for good
	}
	for i, s := range steps {
		k := key(s.key)
		e, act := c.lookup(k)
		if act != s.want {
			t.Fatalf("step %d (key %d): action %d, want %d", i, s.key, act, s.want)
		}
		if act == graphCapture {
			c.done(e, fakeGraph(s.key), s.ok)
		}
		if act == graphReplay && e.graph != fakeGraph(s.key) {
			t.Fatalf("step %d: replayed graph %d for key %d", i, e.graph, s.key)
		}
		k[0] ^= 0xff // the cache must have kept its own copy
	}
	if fmt.Sprint(destroyed) != "[2]" {
		t.Errorf("destroyed %v, want [2]", destroyed)
	}
	got := c.counts()
	want := GraphCounts{Captured: 3, Kept: 2, Pending: 1, Failed: 1, Evicted: 1} // pending: key 2 seen again once
	if got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	c.clear()
	if fmt.Sprint(destroyed) != "[2 3 1]" && fmt.Sprint(destroyed) != "[2 1 3]" {
		t.Errorf("destroyed %v after clear", destroyed)
	}
	if got := c.counts(); got.Kept != 0 || got.Pending != 0 || got.Captured != 3 || len(c.byHash) != 0 {
		t.Errorf("after clear: %+v, %d keys", got, len(c.byHash))
	}
}

// TestGraphCacheCollision puts every key in one hash bucket: each must still find its own graph.
func TestGraphCacheCollision(t *testing.T) {
	c := newGraphCache(4, func(fakeGraph) {})
	c.hash = func([]byte) uint64 { return 42 }
	keys := [][]byte{record(1, 1<<20, 1).key, record(2, 1<<20, 1).key, record(3, 1<<20, 1).key}
	for i, k := range keys[:2] {
		c.lookup(k)
		e, act := c.lookup(k)
		if act != graphCapture {
			t.Fatalf("key %d: action %d, want capture", i, act)
		}
		c.done(e, fakeGraph(i), true)
	}
	for i, k := range keys[:2] {
		if e, act := c.lookup(k); act != graphReplay || e.graph != fakeGraph(i) {
			t.Errorf("key %d: action %d, graph %v", i, act, e)
		}
	}
	if _, act := c.lookup(keys[2]); act != graphEager {
		t.Errorf("a new key in the same bucket: action %d, want eager", act)
	}
	if len(c.byHash[42]) != 3 {
		t.Errorf("bucket holds %d entries, want 3", len(c.byHash[42]))
	}
}

// TestGraphCachePendingBound keeps at most 4·max keys waiting for a second sighting.
func TestGraphCachePendingBound(t *testing.T) {
	c := newGraphCache(2, func(fakeGraph) {})
	for i := range 20 {
		c.lookup(record(i+1, 1<<20, 0).key)
	}
	if got := c.counts().Pending; got != 8 {
		t.Errorf("pending %d, want 8", got)
	}
	if _, act := c.lookup(record(1, 0, 0).key); act != graphEager { // forgotten: first sighting again
		t.Errorf("oldest key: action %d, want eager", act)
	}
	if _, act := c.lookup(record(20, 0, 0).key); act != graphCapture {
		t.Errorf("newest key: action %d, want capture", act)
	}
}

// TestGraphCacheDrop destroys a kept graph whose nodes could not be set, counts it, and runs its key eagerly from
// then on.
func TestGraphCacheDrop(t *testing.T) {
	var destroyed []fakeGraph
	c := newGraphCache(4, func(g fakeGraph) { destroyed = append(destroyed, g) })
	k := record(2, 1<<20, 0).key
	c.lookup(k)
	e, act := c.lookup(k)
	if act != graphCapture {
		t.Fatalf("second sighting: action %d", act)
	}
	c.done(e, 7, true)
	e, act = c.lookup(record(2, 1<<21, 5).key) // another record of the same shape
	if act != graphReplay || e.graph != 7 {
		t.Fatalf("same shape: action %d, graph %v", act, e.graph)
	}
	c.drop(e)
	if got := c.counts(); got.Dropped != 1 || got.Kept != 0 || got.Pending != 0 || fmt.Sprint(destroyed) != "[7]" {
		t.Errorf("after drop: %+v, destroyed %v", got, destroyed)
	}
	for i := range 3 {
		if _, act := c.lookup(k); act != graphEager {
			t.Errorf("sighting %d after drop: action %d, want eager", i+1, act)
		}
	}
	c.clear()
	if fmt.Sprint(destroyed) != "[7]" {
		t.Errorf("clear destroyed a dropped graph again: %v", destroyed)
	}
}

// TestPassRecordNext keeps the staged bytes of a running operation across a flush, and only those.
func TestPassRecordNext(t *testing.T) {
	r := record(2, 1<<20, 1)
	if off, _ := r.stage(make([]byte, 100), 4096); off != 0 {
		t.Fatalf("first upload at %d", off)
	}
	r.next(true)
	if len(r.ops) != 0 || len(r.key) != 0 || !r.empty() || r.sent != 100 {
		t.Fatalf("after next(true): %d ops, %d key bytes, empty %v, sent %d", len(r.ops), len(r.key), r.empty(), r.sent)
	}
	off, ok := r.stage(make([]byte, 10), 4096)
	if !ok || off != 256 || r.empty() {
		t.Fatalf("upload after a kept flush at %d (ok %v), empty %v; want 256 and not empty", off, ok, r.empty())
	}
	r.next(false)
	if off, _ := r.stage(make([]byte, 10), 4096); off != 0 || r.sent != 0 {
		t.Fatalf("after next(false): upload at %d, sent %d", off, r.sent)
	}
}

// TestPassRecordAtOpStart: a record is cut at an operation's start when long enough, and an empty one stages
// from offset 0 again even where a finished operation's bytes were kept.
func TestPassRecordAtOpStart(t *testing.T) {
	r := record(3, 1<<20, 1)
	if r.atOpStart(6, 1<<10) || !r.atOpStart(5, 1<<10) || !r.atOpStart(3, 1<<10) {
		t.Error("5 operations: cut at 3 and 5, not at 6")
	}
	r.reset()
	r.stage(make([]byte, 600), 1<<10)
	if !r.atOpStart(100, 1<<10) {
		t.Error("600 staged bytes of 1024: not cut")
	}
	r.next(true) // issued inside an operation: its bytes kept
	if r.sent != 600 {
		t.Fatalf("sent %d", r.sent)
	}
	if r.atOpStart(100, 1<<10) || r.sent != 0 || len(r.data) != 0 {
		t.Errorf("empty record at an operation's start: sent %d, %d staged bytes; want 0, 0", r.sent, len(r.data))
	}
	if off, _ := r.stage([]byte{1}, 1<<10); off != 0 {
		t.Errorf("next upload at %d, want 0", off)
	}
}
