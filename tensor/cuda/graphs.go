//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
)

// Passes as CUDA graphs. Inside Run (a model pass) the queue records its launches, copies and fills instead of
// issuing them, and stages its small uploads (index arrays) in host memory, assigning each a fixed offset in a
// device staging buffer. The record ends where the host must see the device (Sync, Download, Free, Stream) or at
// the end of Run; then the staged bytes are copied to the staging buffer in one asynchronous copy, and the
// recorded work is issued: as the graph kept for records of its shape (graphCache: the same kernels with the same
// parameter layouts, copies and fills in the same order), its nodes first set to this record's launch shapes,
// parameters, addresses and sizes where they differ from the last replay's (cuGraphExec*NodeSetParams), or
// captured into one when the shape is seen the second time, or else eagerly. A replay so issues exactly what the
// eager path would: the same kernels with the same parameters, in the same order (a new ticket's state lands at new
// addresses in the prefix cache, and a pass of other token counts launches other grids, without a new capture).
// The uploaded contents (token ids, segment starts) are copied before the work runs either way. Allocations come
// from the pool while recording, never during capture. Kernels are launched as programmatic dependents in a
// graph as they are eagerly (Device.pdl), unless KEV_CUDA_GRAPH_PDL=off.

// defaultGraphs is the number of graphs a device keeps when KEV_CUDA_GRAPHS=on. Graphs are off unless that
// variable turns them on: measured in Kev's serving cases on the H200 (docs/design-log.md, v18), recording every pass
// costs more host time than replaying the passes that recur saves (0.3–2 ms per request).
const defaultGraphs = 64

// dstageBytes is the size of the device staging buffer: one half of the pinned staging ring, through which a
// record's staged bytes are copied. A record stages at most dstageLimit bytes (the last stageAlign bytes are
// slack for kernels that read a little past an index array, as they may past a pool buffer's end).
const (
	dstageBytes = stageBytes / 2
	dstageLimit = dstageBytes - stageAlign
)

// Records end at an operation's start once they hold segmentOps operations or half of the staging limit, so
// that the device runs one part of a pass while the host records the next (a whole pass recorded before any of
// it runs would add the recording time to the pass's latency). Variables so that tests can shrink them.
var (
	segmentOps = 128
	stageLimit = dstageLimit
)

// graphsFromEnv reads KEV_CUDA_GRAPHS: unset, empty, "0" or "off" leaves pass graphs off, "on" keeps
// defaultGraphs of them, a positive number sets how many are kept.
func graphsFromEnv() (int, error) {
	v := strings.TrimSpace(os.Getenv("KEV_CUDA_GRAPHS"))
	switch strings.ToLower(v) {
	case "", "off", "false":
		return 0, nil
	case "on", "true":
		return defaultGraphs, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cuda: KEV_CUDA_GRAPHS=%q: want on, off or a number of graphs ≥ 0", v)
	}
	return n, nil
}

// restoreGraphs sets the device's graph count back to what KEV_CUDA_GRAPHS asks for (tests that turn graphs on).
func (d *Device) restoreGraphs() error {
	n, err := graphsFromEnv()
	if err != nil {
		return err
	}
	return d.SetGraphs(n)
}

// SetGraphs sets how many pass graphs the device keeps (0 turns them off: every pass is issued eagerly, and the
// kept graphs are destroyed). Passes inside Run are recorded and replayed as graphs only while it is > 0 and no
// launch profile runs.
func (d *Device) SetGraphs(max int) error {
	if max < 0 {
		return fmt.Errorf("cuda: SetGraphs(%d): want ≥ 0", max)
	}
	return d.Do(func(q *Queue) error {
		if err := q.Sync(); err != nil {
			return err
		}
		if d.graphs != nil {
			d.graphs.clear()
			d.graphs.max = max
		}
		d.graphMax = max
		d.publishGraphs()
		return nil
	})
}

// GraphCounts returns the pass-graph counters, and whether pass graphs are on. Safe on any goroutine.
func (d *Device) GraphCounts() (GraphCounts, bool) {
	d.gmu.Lock()
	defer d.gmu.Unlock()
	return d.gcounts, d.gon
}

// publishGraphs copies the cache's counters for GraphCounts.
func (d *Device) publishGraphs() {
	var c GraphCounts
	if d.graphs != nil {
		c = d.graphs.counts()
	}
	c.Replays, c.Eager, c.Updated = d.replays, d.eagerPasses, d.updated
	if d.graphErr != "" {
		c.LastError = d.graphErr
	}
	d.gmu.Lock()
	d.gcounts, d.gon = c, d.graphMax > 0
	d.gmu.Unlock()
}

// runRecorded runs f with the queue recording, then issues what it recorded.
func (d *Device) runRecorded(f func() error) (err error) {
	q := &d.q
	if d.dstage.Ptr == 0 {
		if d.dstage, err = q.Alloc(dstageBytes); err != nil {
			return err
		}
	}
	if d.graphs == nil {
		d.graphs = newGraphCache(d.graphMax, (*passGraph).destroy)
	}
	q.rec, q.opDepth = true, 0
	d.rec.reset() // every pass stages from offset 0 (see passRecord.atOpStart)
	defer func() {
		q.opDepth = 0
		ferr := q.flush()
		q.rec = false
		d.rec.reset()
		if ferr == nil {
			ferr = q.takeErr()
		}
		if err == nil {
			err = ferr
		}
	}()
	return f()
}

// opStart is called as a Backend operation starts (op ends it): at the outermost one, a record long enough is
// issued first (see segmentOps); while one runs, a flush keeps the bytes it staged.
func (q *Queue) opStart() (end func(), err error) {
	if !q.rec {
		return func() {}, nil
	}
	if q.opDepth == 0 && q.d.rec.atOpStart(segmentOps, stageLimit) {
		if err := q.flush(); err != nil {
			return func() {}, err
		}
	}
	q.opDepth++
	return func() { q.opDepth-- }, nil
}

// recording reports whether q records instead of issuing.
func (q *Queue) recording() bool { return q.rec && q.d.prof == nil }

// takeErr returns and clears an error left by a flush that could not report it (Stream).
func (q *Queue) takeErr() error {
	err := q.d.recErr
	q.d.recErr = nil
	return err
}

// recordLaunch records kernel f (key k) with q.args.
func (q *Queue) recordLaunch(k fnKey, f cu.Function, grid, block cudrv.Dim3, shared int) error {
	buf, offs, err := q.args.Raw()
	if err != nil {
		return err
	}
	for _, v := range [...]int{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		if v <= 0 || v > 1<<31-1 {
			return fmt.Errorf("cuda: %s.%s: launch dimensions grid %v block %v must be positive", k.mod, k.name, grid, block)
		}
	}
	if shared < 0 {
		return fmt.Errorf("cuda: %s.%s: negative shared memory %d", k.mod, k.name, shared)
	}
	d := q.d
	d.recFns = append(d.recFns, recFn{k, f})
	d.rec.launch(len(d.recFns)-1, cudrv.FunctionID(f),
		[3]uint32{uint32(grid.X), uint32(grid.Y), uint32(grid.Z)},
		[3]uint32{uint32(block.X), uint32(block.Y), uint32(block.Z)}, uint32(shared), buf, offs)
	return nil
}

// recFn is a recorded launch's kernel.
type recFn struct {
	key fnKey
	f   cu.Function
}

// stageInts stages v for the recorded work and returns its place in the device staging buffer; ok is false when
// it does not fit even in an empty record (the caller uploads it eagerly).
func (q *Queue) stageInts(v []int32) (Buffer, bool, error) {
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
	off, ok, err := q.stage(raw)
	if !ok || err != nil {
		return Buffer{}, ok, err
	}
	return Buffer{q.d.dstage.Ptr + cu.DevicePtr(off), int64(len(raw))}, true, nil
}

// stage appends b to the record's staged bytes, issuing the record first when they would overflow.
func (q *Queue) stage(b []byte) (off int, ok bool, err error) {
	d := q.d
	if off, ok = d.rec.stage(b, stageLimit); ok {
		d.staged.Add(1)
		return off, true, nil
	}
	if len(b) > stageLimit {
		return 0, false, nil
	}
	if err := q.flush(); err != nil {
		return 0, false, err
	}
	off, ok = d.rec.stage(b, stageLimit) // may fail: bytes an operation still running staged are kept
	if ok {
		d.staged.Add(1)
	}
	return off, ok, nil
}

// flush issues the recorded work, if q records: the staged bytes to the device staging buffer, then the work as
// a kept graph, a new capture, or eagerly.
func (q *Queue) flush() error {
	d := q.d
	if !q.rec || d.rec.empty() {
		return nil
	}
	q.rec = false // what flush issues goes to the stream
	defer func() {
		d.rec.next(q.opDepth > 0)
		clear(d.recFns)
		d.recFns = d.recFns[:0]
		q.rec = true
		d.publishGraphs()
	}()
	if from, n := d.rec.sent, len(d.rec.data)-d.rec.sent; n > 0 {
		dst := d.dstage.Ptr + cu.DevicePtr(from)
		at, ok, err := q.stageAlloc(n)
		if err != nil {
			return err
		}
		if ok {
			copy(d.stage[at:], d.rec.data[from:])
			if err := cu.MemcpyHtoDAsync(dst, unsafe.Pointer(&d.stage[at]), int64(n), q.s); err != nil {
				return cudrv.Wrap("cuMemcpyHtoDAsync", err)
			}
		} else {
			d.direct.Add(1)
			if err := q.Sync(); err != nil {
				return err
			}
			if err := cu.MemcpyHtoD(dst, unsafe.Pointer(&d.rec.data[from]), int64(n)); err != nil {
				return cudrv.Wrap("cuMemcpyHtoD", err)
			}
		}
	}
	if len(d.rec.ops) == 0 {
		return nil
	}
	e, act := d.graphs.lookup(d.rec.key)
	switch act {
	case graphReplay:
		pg := e.graph
		if err := q.update(pg); err != nil {
			d.graphErr = "set: " + err.Error()
			d.graphs.drop(e)
			break // issued eagerly
		}
		d.replays++
		return pg.exec.Launch(q.s)
	case graphCapture:
		pg, err := q.capture()
		if err == nil {
			d.replays++
			lerr := pg.exec.Launch(q.s) // before done, which may destroy it (SetGraphs(0) inside Run)
			d.graphs.done(e, pg, true)
			return lerr
		}
		d.graphErr = "capture: " + err.Error()
		d.graphs.done(e, nil, false)
	}
	d.eagerPasses++
	return q.issue()
}

// passGraph is a kept graph: the captured graph (whose nodes name the executable's), the executable, its nodes in
// the record's order, and the parameters they hold.
type passGraph struct {
	graph  cudrv.Graph
	exec   cudrv.GraphExec
	nodes  []cudrv.GraphNode
	params graphParams
}

// destroy frees the executable and the graph (nil: nothing).
func (pg *passGraph) destroy() {
	if pg != nil {
		pg.exec.Destroy()
		pg.graph.Destroy()
	}
}

// capture captures the recorded work into a kept graph (nothing runs).
func (q *Queue) capture() (*passGraph, error) {
	if err := cudrv.BeginCapture(q.s, cudrv.CaptureThreadLocal); err != nil {
		return nil, err
	}
	ierr := q.issue()
	g, err := cudrv.EndCapture(q.s)
	if ierr != nil || err != nil {
		if err == nil {
			g.Destroy()
			err = ierr
		}
		return nil, err
	}
	r := &q.d.rec
	nodes, err := g.Chain(len(r.ops) + 1)
	if err == nil && len(nodes) != len(r.ops) {
		err = fmt.Errorf("cuda: %d operations captured as %d graph nodes", len(r.ops), len(nodes))
	}
	if err != nil {
		g.Destroy()
		return nil, err
	}
	exec, err := g.Instantiate()
	if err != nil {
		g.Destroy()
		return nil, err
	}
	return &passGraph{graph: g, exec: exec, nodes: nodes, params: r.snapshot()}, nil
}

// update sets the nodes of pg whose parameters differ from the record's to the record's (pg has the record's key).
func (q *Queue) update(pg *passGraph) error {
	d := q.d
	r := &d.rec
	if len(pg.nodes) != len(r.ops) || len(pg.params.ops) != len(r.ops) {
		return fmt.Errorf("cuda: a graph of %d nodes for a record of %d operations", len(pg.nodes), len(r.ops))
	}
	for i := range r.ops {
		if !r.changed(i, &pg.params) {
			continue
		}
		op := &r.ops[i]
		var err error
		switch op.kind {
		case opLaunch:
			fn := d.recFns[op.fn]
			if err = d.issueArgs.SetRaw(r.args[op.argLo:op.argHi], r.offs[op.offLo:op.offHi]); err == nil {
				grid := cudrv.Dim3{X: int(op.grid[0]), Y: int(op.grid[1]), Z: int(op.grid[2])}
				block := cudrv.Dim3{X: int(op.block[0]), Y: int(op.block[1]), Z: int(op.block[2])}
				if err = pg.exec.SetKernel(pg.nodes[i], fn.f, grid, block, int(op.shared), &d.issueArgs); err != nil {
					err = fmt.Errorf("%s.%s grid %v block %v: %w", fn.key.mod, fn.key.name, grid, block, err)
				}
			}
		case opCopy:
			err = pg.exec.SetCopy(pg.nodes[i], cu.DevicePtr(op.dst), cu.DevicePtr(op.src), op.n)
		case opMemset16:
			err = pg.exec.SetMemset(pg.nodes[i], cu.DevicePtr(op.dst), uint32(op.v), op.n)
		}
		if err != nil {
			return fmt.Errorf("node %d of %d: %w", i, len(r.ops), err)
		}
		r.apply(i, &pg.params)
		d.updated++
	}
	return nil
}

// issue enqueues the recorded work on the stream.
func (q *Queue) issue() error {
	d := q.d
	r := &d.rec
	for i := range r.ops {
		op := &r.ops[i]
		switch op.kind {
		case opLaunch:
			fn := d.recFns[op.fn]
			if err := d.issueArgs.SetRaw(r.args[op.argLo:op.argHi], r.offs[op.offLo:op.offHi]); err != nil {
				return err
			}
			grid := cudrv.Dim3{X: int(op.grid[0]), Y: int(op.grid[1]), Z: int(op.grid[2])}
			block := cudrv.Dim3{X: int(op.block[0]), Y: int(op.block[1]), Z: int(op.block[2])}
			if err := d.recLaunch(fn.f, grid, block, int(op.shared), q.s, &d.issueArgs); err != nil {
				return fmt.Errorf("cuda: %s.%s grid %v block %v: %w", fn.key.mod, fn.key.name, grid, block, err)
			}
		case opCopy:
			if err := cu.MemcpyDtoDAsync(cu.DevicePtr(op.dst), cu.DevicePtr(op.src), op.n, q.s); err != nil {
				return cudrv.Wrap("cuMemcpyDtoDAsync", err)
			}
		case opMemset16:
			if err := cu.MemsetD16Async(cu.DevicePtr(op.dst), op.v, op.n, q.s); err != nil {
				return cudrv.Wrap("cuMemsetD16Async", err)
			}
		}
	}
	return nil
}

// recLaunch launches recorded work, eagerly or into a capture: as a programmatic dependent of the launch before it
// where graphPDL says so.
func (d *Device) recLaunch(f cu.Function, grid, block cudrv.Dim3, shared int, s cu.Stream, a *cudrv.Args) error {
	if d.graphPDL {
		return cudrv.LaunchDependent(f, grid, block, shared, s, a)
	}
	return cudrv.Launch(f, grid, block, shared, s, a)
}

// CopyD2D copies n bytes from src to dst in stream order.
func (q *Queue) CopyD2D(dst, src cu.DevicePtr, n int64) error {
	if n <= 0 {
		return nil
	}
	if q.recording() {
		q.d.rec.copy(uint64(dst), uint64(src), n)
		return nil
	}
	return cudrv.Wrap("cuMemcpyDtoDAsync", cu.MemcpyDtoDAsync(dst, src, n, q.s))
}

// closeGraphs destroys the kept graphs and frees the staging buffer (on the device goroutine, at Close).
func (d *Device) closeGraphs() {
	if d.graphs != nil {
		d.graphs.clear()
	}
	if d.dstage.Ptr != 0 {
		cu.MemFree(d.dstage.Ptr)
		d.dstage = Buffer{}
	}
}
