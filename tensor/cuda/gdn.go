//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// The chunked delta rule on tensor cores (kernels/gdn.cu): for d_k = 128, value widths that are a multiple of 32 and
// bf16 input rows, segments run as a parallel precompute over (64-token chunk, value head) — T = (I + A)⁻¹ and the
// intra-chunk attention M in a workspace; large launches with two value heads a key head take one block per (chunk,
// key head), the two side by side — then one sequential pass per (32 value columns, value head, segment) with mma.sync
// bf16 products. Rows — segments of at most one chunk that continue a state and keep none of their own, such as a
// request's question rows — run in the block of the state they continue, after that state's own chunks, so the state
// slice is loaded (or computed) once for all of them; or, on Hopper (d_v a multiple of 128; KEV_GDN_ROWS=off keeps the
// former), in a launch of their own after the state pass, gdn_rows: warpgroup products (wgmma) with the state they
// continue held in registers, persistent blocks running the rows one after another, every product only as wide as the
// launch's longest row (gdnRowWidth), and new segments of one chunk computed there before their rows (gdnFold). Either
// way a row's outputs come from the same code whichever rows share its block. Other shapes and segments shorter than
// gdnMinLen keep the register kernels of delta.go. The choice is made per segment from its own length, so a segment's
// result never depends on the segments it is batched with.

// gdnOn selects the tensor-core kernels for the segments they take; false keeps the register kernels for every
// segment (tests and benchmarks compare the two).
var gdnOn = true

// gdnMinLen is the shortest segment the tensor-core kernels take; shorter ones (and empty ones) run on the
// register kernels. The choice depends on the segment alone, never on its batch-mates.
var gdnMinLen = 1

// gdnTakes reports whether a segment of n tokens runs on the tensor-core kernels (when the call's shape allows).
func gdnTakes(n int) bool { return n > 0 && n >= gdnMinLen }

// gdnNS forces the state kernel with one (1) or two (2) stages of chunk inputs, or the one of 64 value columns a
// block (3, gdn_state_w2, where d_v allows); 0 chooses by the launch's size. Tests run all three.
var gdnNS = 0

// gdnPairs forces gdn_state_w2's rows two at a time (1) or one at a time (-1); 0 chooses by the launch's size:
// two at a time where the launch has more blocks than multiprocessors (a row then takes a group of 8 warps twice as
// long, which pays only where other blocks wait for the multiprocessor). Tests run both: the same bits.
var gdnPairs = 0

// gdnRowLen is the longest row (one chunk).
const gdnRowLen = 64

// gdnIsRow reports whether a segment of n tokens that keeps no state (and continues one) runs as a row, on a device
// whose rows of d_v value columns gdn_rows runs (rows).
func gdnIsRow(n int, keep, rows bool) bool {
	return (gdnGroup || rows) && !keep && n <= gdnRowLen && gdnTakes(n)
}

// gdnFold computes, where gdn_rows runs the rows, every new segment (FromZero) of one chunk in gdn_rows, before the
// rows that continue it (its state updated in registers), instead of in gdn_state, whose final state the rows would
// read back; KEV_GDN_FOLD=off keeps them in gdn_state. The choice depends only on the segment.
var gdnFold = !envIs("KEV_GDN_FOLD", "off")

// gdnRowsOn selects gdn_rows for the rows where it runs (Hopper, d_v a multiple of 128): on unless KEV_GDN_ROWS=off,
// which runs them in the blocks of gdn_state as on other GPUs. Tests and benchmarks run both.
var gdnRowsOn = !envIs("KEV_GDN_ROWS", "off")

// gdnRowsShared is gdn_rows's dynamic shared memory: three stages of a row's inputs (68,608 bytes each), 1,024 bytes
// to align them, and a 40-byte record of each stage's row.
const gdnRowsShared = 3*68608 + 1024 + 3*40

// gdnRowsFit reports whether gdn_rows runs the rows of a call with d_v value columns: Hopper, d_v a multiple of 128.
func (d *Device) gdnRowsFit(dv int) bool {
	return gdnRowsOn && d.hopper() && dv%128 == 0 && d.info.SharedOptin >= gdnRowsShared
}

// gdnRowGroup is a set of rows (first row, length, chunk) continuing one state: s of type dt (0: zero), or, with
// seg, a segment of one chunk (its first row, length, chunk) that continues s, computed in gdn_rows before the rows
// (none or more), which continue its final state; that state goes to fin (0: nowhere).
type gdnRowGroup struct {
	s    cu.DevicePtr
	dt   tensor.DType
	rows []int32
	seg  []int32
	fin  cu.DevicePtr
}

// gdnPeel moves the rows of ls into groups for gdn_rows: the rows of a descriptor without chunks continue its
// initial state; a descriptor marked fold (one chunk) becomes a group with its rows, its chunk computed in gdn_rows
// before them; the rows of the others continue their final state, which the caller has the descriptor store. It
// returns the descriptors left for gdn_state, without their rows, and the groups.
func gdnPeel(ls []*gdnLong) ([]*gdnLong, []*gdnRowGroup) {
	var keep []*gdnLong
	var gs []*gdnRowGroup
	for _, g := range ls {
		fold := g.fold && g.d[1] > 0 && g.d[1] <= gdnRowLen
		if len(g.rows) > 0 || fold {
			rg := &gdnRowGroup{s: ptrOf(g.d[6], g.d[7]), dt: tensor.DType(g.d[3]), rows: g.rows}
			switch {
			case fold:
				rg.seg, rg.fin = []int32{g.d[0], g.d[1], g.first}, ptrOf(g.d[8], g.d[9])
			case g.d[1] > 0:
				rg.s, rg.dt = ptrOf(g.d[8], g.d[9]), tensor.F32
			}
			gs, g.rows = append(gs, rg), nil
		}
		if g.d[1] > 0 && !fold {
			keep = append(keep, g)
		}
	}
	return keep, gs
}

// ptrOf joins the two halves of a device pointer in a descriptor.
func ptrOf(lo, hi int32) cu.DevicePtr {
	return cu.DevicePtr(uint64(uint32(lo)) | uint64(uint32(hi))<<32)
}

// gdnRowBlocks returns gdn_rows's group table (gdnRowBlk int32 a group: the state pointer's halves, its type, its
// first entry, its number of items — a segment, first, and the rows — a sixth that gdnRowSplit sets, 1 where a
// segment comes first, 0, the final state's pointer) and its row table (the entries numbered from row0).
func gdnRowBlocks(gs []*gdnRowGroup, row0 int) (blks, rows []int32) {
	for _, g := range gs {
		blks = append(blks, int32(uint32(g.s)), int32(uint32(uint64(g.s)>>32)), int32(g.dt), int32(row0+len(rows)/3), int32(len(g.seg)/3+len(g.rows)/3), 0,
			b2i(g.seg != nil), 0, int32(uint32(g.fin)), int32(uint32(uint64(g.fin)>>32)))
		rows = append(append(rows, g.seg...), g.rows...)
	}
	return blks, rows
}

// gdnRows enqueues gdn_rows over the q items of the groups of blks and rows (as gdnRowBlocks and gdnRowSplit leave
// them, on the device; ng groups), g blocks of per items each, split by runs or not (gdnRowSplit), its products
// over width pieces of 8 tokens (gdnRowWidth of the row table).
func (q *Queue) gdnRows(o, qkv Operand, blks, rows, work Buffer, ng, items, g, per int, runs bool, width, hk, hv, dv int) error {
	if width < 1 || width > 8 {
		return fmt.Errorf("cuda: gdn_rows over %d pieces of 8 tokens (1 to 8)", width)
	}
	if row := 2*hk*128 + hv*dv; 64*int64(row) >= 1<<31 {
		return fmt.Errorf("cuda: gdn_rows over rows of %d values (a chunk's offsets are 32-bit: at most %d)", row, (1<<31)/64-1)
	}
	q.args.Reset()
	q.put(o)
	q.args.Ptr(qkv.Ptr).Ptr(blks.Ptr).Ptr(rows.Ptr).I32(int32(ng)).I32(int32(per)).I32(int32(items)).I32(b2i(runs))
	q.args.I32(int32(hk)).I32(int32(hv)).I32(int32(dv)).Ptr(work.Ptr)
	return q.launch("gdn_sm90a", gdnRowsNames[width-1], cudrv.Dim3{X: g, Y: 1, Z: 1}, block256, gdnRowsShared)
}

// gdnRowsNames are gdn_rows's kernels by the launch's width.
var gdnRowsNames = [8]string{"gdn_rows_e1", "gdn_rows_e2", "gdn_rows_e3", "gdn_rows_e4", "gdn_rows_e5", "gdn_rows_e6", "gdn_rows_e7", "gdn_rows_e8"}

// gdnLong is a descriptor of gdn_state with its first chunk and its rows (first row, length, chunk).
type gdnLong struct {
	d     segDesc
	first int32
	rows  []int32
	fold  bool // a new segment of one chunk that gdn_rows computes, before its rows (gdnFold)
}

// addRow appends the chunk of a row of n tokens at start to tab and the row to g.
func (g *gdnLong) addRow(tab []int32, start, n int) []int32 {
	tab, ck := gdnChunks(tab, start, n)
	g.rows = append(g.rows, int32(start), int32(n), ck)
	return tab
}

// gdnSpread splits the groups of rows that have no chunks of their own (rows of a cached state) in halves while
// the launch holds fewer descriptors than one wave of two blocks per multiprocessor (wave): a small launch then runs
// fewer rows one after the other in each block. Any split computes the same bits.
func gdnSpread(ls []*gdnLong, wave int) []*gdnLong {
	for len(ls) < wave {
		k := -1
		for i, g := range ls {
			if g.d[1] == 0 && len(g.rows) > 3 && (k < 0 || len(g.rows) > len(ls[k].rows)) {
				k = i
			}
		}
		if k < 0 {
			break
		}
		g := ls[k]
		h := len(g.rows) / 6 * 3
		a, b := &gdnLong{d: g.d, rows: g.rows[:h:h]}, &gdnLong{d: g.d, rows: g.rows[h:]}
		ls = append(ls[:k], append([]*gdnLong{a, b}, ls[k+1:]...)...)
	}
	return ls
}

// gdnWave is the number of descriptors of a gdn_state launch in one wave of two blocks per multiprocessor.
func (d *Device) gdnWave(hv, dv int) int { return 2 * d.info.SMs / max(1, hv*dv/32) }

// gdnFlat returns the descriptors (their row counts and offsets set, rows numbered from row0), their first
// chunks and their rows, for upload.
func gdnFlat(ls []*gdnLong, row0 int) (descs, firsts, rows []int32) {
	for _, g := range ls {
		d := g.d
		d[2], d[4] = int32(len(g.rows)/3), int32(row0+len(rows)/3)
		descs, firsts, rows = append(descs, d[:]...), append(firsts, g.first), append(rows, g.rows...)
	}
	return descs, firsts, rows
}

// gdnWork is the workspace per (chunk, value head): T and M as bf16 [64][64], five fp32 [64] row factors.
const gdnWork = 17664

// gdnPrepShared is the precompute's dynamic shared memory for p value heads side by side (gdn_prep: 1,
// gdn_prep_kh: 2): q, k [64][136] bf16, then A, T [64][68] fp32 of each head in their place (and after them for
// two heads); Γ and β [p][64], rq and rk [64]. Four blocks of gdn_prep fit a multiprocessor, three of gdn_prep_kh
// (its registers, and 3 × 71 KB of shared memory).
func gdnPrepShared(p int) int { return max(2*64*136*2, p*2*64*68*4) + (2*p+2)*64*4 }

// gdnStateShared is gdn_state's dynamic shared memory for ns stages of chunk inputs and cg groups of 32 value
// columns (gdn_state_ns{1,2}: cg 1; gdn_state_w2: ns 2, cg 2, with a fourth [64][vw] buffer for its rows, which
// its two groups run two at a time).
func gdnStateShared(ns, cg int) int {
	vw := 32*cg + 8 // padded rows of V, R, Δ and S
	stage := 2*64*136*2 + 64*vw*2 + 2*64*72*2 + 5*64*4
	bufs := 3
	if cg == 2 {
		bufs = 4
	}
	return ns*stage + 2*128*vw*2 + bufs*64*vw*2
}

// gdnFits reports whether the tensor-core kernels take a call of this shape and input: d_k = 128, d_v a multiple
// of 32, 16-byte aligned bf16 rows, and enough opt-in shared memory for one stage.
func (d *Device) gdnFits(dk, dv int, x Operand, width int) bool {
	return gdnOn && dk == 128 && dv%32 == 0 && x.DType == tensor.BF16 && width%8 == 0 && x.Ptr%16 == 0 &&
		d.info.Major >= 8 && d.info.SharedOptin >= gdnStateShared(1, 1)
}

// gdnChunks appends the 64-token chunks of a segment of n rows starting at row start to tab (first row, length)
// and returns the new table and the index of the segment's first chunk.
func gdnChunks(tab []int32, start, n int) ([]int32, int32) {
	first := int32(len(tab) / 2)
	for c := 0; c < n; c += 64 {
		tab = append(tab, int32(start+c), int32(min(64, n-c)))
	}
	return tab, first
}

// gdnPrepKH selects the precompute with one block per (chunk, key head) for both of the key head's value heads
// (gdn_prep_kh, for two value heads a key head: q and k loaded, normalised and multiplied once) for launches that
// fill at least one wave of it (three blocks per multiprocessor); otherwise, and always when false, one block per
// (chunk, value head) (gdn_prep), which keeps small launches wider. Both compute the same bits; tests compare the
// two.
var gdnPrepKH = true

// gdnPrepAll takes gdn_prep_kh (when gdnPrepKH) whatever the launch's size; tests set it.
var gdnPrepAll = false

// gdnPrep enqueues gdn_prep or gdn_prep_kh over nc chunks (chunks: int32 [nc][2] on the device) into work
// (nc·hv·gdnWork bytes).
func (q *Queue) gdnPrep(qkv, g, beta Operand, chunks, work Buffer, nc, hk, hv, dv int) error {
	q.args.Reset()
	q.args.Ptr(qkv.Ptr)
	q.put(g).put(beta)
	q.args.Ptr(chunks.Ptr).I32(int32(hk)).I32(int32(hv)).I32(int32(dv)).Ptr(work.Ptr)
	if gdnPrepKH && hv == 2*hk && (gdnPrepAll || nc*hk >= 3*q.d.info.SMs) {
		return q.launch("gdn", "gdn_prep_kh", cudrv.Dim3{X: nc, Y: hk, Z: 1}, block256, gdnPrepShared(2))
	}
	return q.launch("gdn", "gdn_prep", cudrv.Dim3{X: nc, Y: hv, Z: 1}, block256, gdnPrepShared(1))
}

// gdnDeep reports whether a launch of gdn_state over ls has rows in its blocks or more than one chunk a segment on
// average: work that gdn_state_w2's two groups share (its loads and barriers), which one-chunk segments alone do not
// repay (two blocks of gdn_state_ns1 a multiprocessor run them sooner).
func gdnDeep(ls []*gdnLong) bool {
	chunks := 0
	for _, g := range ls {
		if len(g.rows) > 0 {
			return true
		}
		chunks += (int(g.d[1]) + 63) / 64
	}
	return chunks >= 2*len(ls)
}

// gdnState enqueues gdn_state over segs segments (desc: SegDesc [segs], with row counts and offsets as gdnFlat
// sets them, every segment non-empty or with rows; base: int32 [segs], each segment's first chunk in work; rows:
// int32 [R][3]; deep as gdnDeep reports). Launches of at most one block per multiprocessor load the next chunk while
// one runs (one block per multiprocessor, ns2); larger deep ones run 64 value columns a block, sharing each chunk's
// loads and barriers between two groups of 8 warps (w2, when d_v is a multiple of 64; with more than one wave of its
// blocks, also running the rows two at a time, one a group: gdnPairs), others two blocks per multiprocessor (ns1).
// All compute the same bits.
func (q *Queue) gdnState(o, qkv Operand, desc, base, rows, work Buffer, segs, hk, hv, dv int, deep bool) error {
	q.args.Reset()
	q.put(o)
	q.args.Ptr(qkv.Ptr).Ptr(desc.Ptr).Ptr(base.Ptr).Ptr(rows.Ptr).I32(int32(hk)).I32(int32(hv)).I32(int32(dv)).Ptr(work.Ptr)
	blocks := segs * hv * dv / 32
	optin := q.d.info.SharedOptin
	switch {
	case (gdnNS == 2 || gdnNS == 0 && blocks <= q.d.info.SMs) && optin >= gdnStateShared(2, 1):
		return q.launch("gdn", "gdn_state_ns2", cudrv.Dim3{X: dv / 32, Y: hv, Z: segs}, block256, gdnStateShared(2, 1))
	case (gdnNS == 3 || gdnNS == 0 && blocks > q.d.info.SMs && deep) && dv%64 == 0 && optin >= gdnStateShared(2, 2):
		pairs := gdnPairs > 0 || gdnPairs == 0 && blocks/2 > q.d.info.SMs
		q.args.I32(b2i(pairs))
		return q.launch("gdn", "gdn_state_w2", cudrv.Dim3{X: dv / 64, Y: hv, Z: segs}, block512, gdnStateShared(2, 2))
	}
	return q.launch("gdn", "gdn_state_ns1", cudrv.Dim3{X: dv / 32, Y: hv, Z: segs}, block256, gdnStateShared(1, 1))
}

// deltaLong enqueues the segments of a (starts, ls) that the tensor-core kernels take (gdn.go) and returns the
// others, for the register kernels.
func (s *scope) deltaLong(a DeltaRule, starts, ls []int32, width int) ([]int32, []int32, error) {
	dev := s.b.dev
	if !dev.gdnFits(a.DK, a.DV, a.QKV, width) {
		return starts, ls, nil
	}
	rowsTC := dev.gdnRowsFit(a.DV)
	var tab, ss, sl []int32
	var long []*gdnLong
	var group *gdnLong // the rows (segments keep no state when there are several)
	for i := range starts {
		n := int(ls[i])
		switch {
		case !gdnTakes(n):
			ss, sl = append(ss, starts[i]), append(sl, ls[i])
		case len(starts) > 1 && gdnIsRow(n, false, rowsTC):
			if group == nil {
				group = &gdnLong{}
				group.d.set(0, 0, 0, a.S0.DType, 0, tensor.F32, a.S0.Ptr, 0)
				long = append(long, group)
			}
			tab = group.addRow(tab, int(starts[i]), n)
		default:
			g := &gdnLong{}
			tab, g.first = gdnChunks(tab, int(starts[i]), n)
			g.d.set(int(starts[i]), n, 0, a.S0.DType, 0, tensor.F32, a.S0.Ptr, a.Final.Ptr)
			long = append(long, g)
		}
	}
	if len(long) == 0 {
		return starts, ls, nil
	}
	var rgs []*gdnRowGroup
	if rowsTC {
		long, rgs = gdnPeel(long)
	} else {
		long = gdnSpread(long, dev.gdnWave(a.HV, a.DV))
	}
	descs, lb, rows := gdnFlat(long, 0)
	blks, rrows := gdnRowBlocks(rgs, len(rows)/3)
	rowBlocks, rowPer, items, runs := gdnRowSplit(blks, a.HV*a.DV/128, 0, dev.info.SMs)
	rows = append(rows, rrows...)
	// one upload: row groups and descriptors (8-byte aligned), chunks, first chunks, rows
	at, err := s.intParts(blks, descs, tab, lb, rows)
	if err != nil {
		return nil, nil, err
	}
	nc := len(tab) / 2
	work, err := s.temp(int64(nc) * int64(a.HV) * gdnWork)
	if err != nil {
		return nil, nil, err
	}
	if err := s.q.gdnPrep(a.QKV, a.G, a.Beta, at[2], work, nc, a.HK, a.HV, a.DV); err != nil {
		return nil, nil, err
	}
	if len(long) > 0 {
		if err := s.q.gdnState(a.O, a.QKV, at[1], at[3], at[4], work, len(long), a.HK, a.HV, a.DV, gdnDeep(long)); err != nil {
			return nil, nil, err
		}
	}
	if rowBlocks > 0 {
		if err := s.q.gdnRows(a.O, a.QKV, at[0], at[4], work, len(rgs), items, rowBlocks, rowPer, runs, gdnRowWidth(rrows), a.HK, a.HV, a.DV); err != nil {
			return nil, nil, err
		}
	}
	return ss, sl, nil
}
