//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// Error bounds of the tensor-core delta rule against the fp32 recurrence, relative to the reference's RMS.
// Every product of gdn.cu reads bf16 operands with fp32 accumulation: q, k and v are bf16 already (their
// normalisations are fp32 row factors), S enters X = K S and P = Q S as two bf16 parts (≈ 2⁻¹⁶ relative), and
// R, Δ, fk·Δ, T and M are rounded once to bf16 (≤ 2⁻⁹ relative each, ≈ 2⁻⁹/√3 RMS). An output chains three such
// roundings (R → Δ → O) and the state one more per chunk (fk·Δ, decayed by later chunks), so the expected RMS
// error is ≈ √4 · 2⁻⁹/√3 ≈ 2.3e-3 of the magnitude: bound 8e-3. The worst element over 10⁵–10⁷ values of a
// roughly normal error sits ≈ 5σ out, and the error scales with the size of the element's terms (up to ~5× the
// RMS): bound 8e-2 of the RMS.
//
// With ill-conditioned keys (TestGDN's corr cases: one shared key plus 5 % noise, β near 1) T = (I + A)⁻¹ has large
// entries that amplify the roundings of single elements: over the 42 recorded runs of those cases the worst element
// was 0.027–0.079 of the RMS, once 0.111 (the RMS error 4.3e-3, within its bound): bound 0.15 there.
const (
	gdnRMSTol       = 8e-3
	gdnWorstTol     = 8e-2
	gdnWorstCorrTol = 0.15
)

// relErrors returns the RMS of got − want and its largest magnitude, both over the RMS of want.
func relErrors(got, want []float32) (rmsRel, worst float64) {
	var se, sw float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		if math.IsNaN(d) {
			return math.Inf(1), math.Inf(1)
		}
		se += d * d
		sw += float64(want[i]) * float64(want[i])
		worst = math.Max(worst, math.Abs(d))
	}
	r := math.Sqrt(sw / float64(len(want)))
	return math.Sqrt(se/float64(len(want))) / r, worst / r
}

func checkRel(t *testing.T, what string, got, want []float32, rmsTol, worstTol float64) {
	t.Helper()
	rel, worst := relErrors(got, want)
	t.Logf("%s: %d values, rms error %.2e, worst %.2e (of the reference's rms)", what, len(want), rel, worst)
	if !(rel <= rmsTol) || !(worst <= worstTol) {
		t.Errorf("%s: rms error %.3g (bound %.3g), worst %.3g (bound %.3g)", what, rel, rmsTol, worst, worstTol)
	}
}

// i32Bytes returns v as little-endian bytes.
func i32Bytes(v []int32) []byte {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = math.Float32frombits(uint32(x))
	}
	return bytesOf32(f)
}

// rowsFit reports whether gdn_rows runs on this device for d_v value columns when selected.
func rowsFit(dv int) bool {
	defer func(on bool) { gdnRowsOn = on }(gdnRowsOn)
	gdnRowsOn = true
	return dev.gdnRowsFit(dv)
}

// forRowModes runs f with the rows in the blocks of gdn_state and, where it runs (d_v = 128), on gdn_rows.
func forRowModes(t *testing.T, f func(t *testing.T)) {
	defer func(on bool) { gdnRowsOn = on }(gdnRowsOn)
	for _, on := range []bool{false, true} {
		if on && !rowsFit(128) {
			continue
		}
		gdnRowsOn = on
		t.Run(map[bool]string{false: "inblock", true: "gdn_rows"}[on], f)
	}
}

// TestGDN checks the tensor-core delta rule (gdn_prep, gdn_state_ns{1,2}, gdn_state_w2) against the one-warp fp32
// recurrent kernel on fresh random inputs, fp32 outputs: Kev-4B heads (16 key, 32 value heads of 128) and GVA 2 and 3
// with value widths 64 and 96, and rows with one, three and four value heads a key head and value width 256;
// segments of 1, 40, 64, 65, 130, 2,392 tokens, from zero and from a cached state; several segments continuing one
// state; ill-conditioned keys (one shared key plus 5 % noise, β near 1); slow decays (g ∈ (−0.02, 0], the state
// remembering many chunks); rows (segments of one chunk at most) run in one block after
// the state's own chunks, or on Hopper with d_v a multiple of 128 on gdn_rows. Final states are compared for single
// segments. Every state kernel runs every case (gdn_state_ns1 after gdn_prep_kh where hv = 2·hk; ns2 and, where d_v
// is a multiple of 64, w2 after gdn_prep, w2 with its rows one and two at a time) and all must agree bit for bit;
// where gdn_rows runs, the four again with the rows on gdn_rows (on 1, 2, 7 or about one block a multiprocessor),
// which must agree bit for bit among themselves.
func TestGDN(t *testing.T) {
	cases := []struct {
		hk, hv, dv              int
		lens                    []int
		state, corr, slow, rows bool
	}{
		{16, 32, 128, []int{1}, true, false, false, false},
		{16, 32, 128, []int{40}, true, false, false, false},
		{16, 32, 128, []int{64}, false, false, false, false},
		{16, 32, 128, []int{65}, false, false, false, false},
		{16, 32, 128, []int{130}, true, false, false, false},
		{16, 32, 128, []int{130}, true, true, false, false},
		{16, 32, 128, []int{700}, true, false, true, false},
		{16, 32, 128, []int{2392}, false, false, true, false},
		{16, 32, 128, []int{40, 40, 40, 40, 40, 40}, true, false, false, false},
		{16, 32, 128, []int{256, 1, 200, 64, 65, 77}, true, false, true, false},
		{2, 4, 64, []int{150}, true, false, true, false},
		{1, 3, 96, []int{70, 3}, true, true, false, false},
		{16, 32, 128, []int{40, 1, 64, 17, 40, 33}, true, false, false, true},
		{1, 3, 96, []int{130, 40, 3, 64, 65, 17}, true, false, true, true},
		{2, 4, 64, []int{21, 64, 9}, false, true, false, true},
		// gdn_rows's items over two column blocks a head (d_v 256) and three value heads a key head, from a cached
		// state; one and four value heads a key head, from zero
		{1, 3, 256, []int{40, 1, 64, 17, 40, 33}, true, false, false, true},
		{4, 4, 128, []int{13, 40, 7, 64, 33}, false, false, false, true},
		{2, 8, 128, []int{40, 3, 64, 21}, true, false, true, true},
	}
	r := newRand(t)
	for _, c := range cases {
		const dk = 128
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dv=%d/lens=%v/state=%v/corr=%v/slow=%v/rows=%v", c.hk, c.hv, c.dv, c.lens, c.state, c.corr, c.slow, c.rows), func(t *testing.T) {
			_, starts, ls, n := segInts(c.lens)
			xs, gs, bs, ss := deltaInputs(r, n, c.hk, c.hv, dk, c.dv, c.corr)
			if c.slow {
				for i := range gs {
					gs[i] *= 0.02
				}
			}
			single := len(c.lens) == 1
			on, sn := n*c.hv*c.dv*4, c.hv*dk*c.dv*4
			// reference; tensor cores with the rows in the state's blocks (ns1, ns2, w2 with rows one and two at a
			// time); with the rows on gdn_rows (1, 2, 7, about one block a multiprocessor) where it runs
			var outs, finals [9][]float32
			kinds := 5
			if rowsFit(c.dv) {
				kinds = 9
			}
			do(t, func(q *Queue) error {
				X, G, B := upload(t, q, bytesOf16(xs), 0), upload(t, q, bytesOf32(gs), 0), upload(t, q, bytesOf32(bs), 0)
				St, Ls := upload(t, q, starts, 0), upload(t, q, ls, 0)
				var S0 Buffer
				if c.state {
					S0 = upload(t, q, bytesOf32(ss), 0)
				}
				bufs := []Buffer{X, G, B, St, Ls, S0}
				defer func() { freeAll(q, bufs) }()
				defer func(on bool) { gdnRowsOn = on }(gdnRowsOn)
				for k := range kinds {
					gdnRowsOn = k >= 5
					O := poisoned(t, q, on)
					var F Buffer
					if single {
						F = poisoned(t, q, sn)
					}
					bufs = append(bufs, O, F)
					if k == 0 {
						a := DeltaRule{O: Operand{O, tensor.F32}, Final: F, QKV: Operand{X, tensor.BF16}, G: Operand{G, tensor.F32},
							Beta: Operand{B, tensor.F32}, S0: Operand{S0, tensor.F32}, SegStart: St, SegLen: Ls, Segs: len(c.lens),
							N: n, HK: c.hk, HV: c.hv, DK: dk, DV: c.dv, simple: true}
						if err := q.DeltaRule(a); err != nil {
							return err
						}
					} else {
						var tab []int32
						var long []*gdnLong
						var group *gdnLong
						start := 0
						for _, l := range c.lens {
							if c.rows && l <= gdnRowLen {
								if group == nil {
									group = &gdnLong{}
									group.d.set(0, 0, 0, tensor.F32, 0, tensor.F32, S0.Ptr, 0)
									long = append(long, group)
								}
								tab = group.addRow(tab, start, l)
							} else {
								g := &gdnLong{}
								tab, g.first = gdnChunks(tab, start, l)
								g.d.set(start, l, 0, tensor.F32, 0, tensor.F32, S0.Ptr, F.Ptr)
								long = append(long, g)
							}
							start += l
						}
						var rgs []*gdnRowGroup
						if q.d.gdnRowsFit(c.dv) { // the rows on gdn_rows (k ≥ 5)
							long, rgs = gdnPeel(long)
						}
						descs, base, rows := gdnFlat(long, 0)
						blks, rrows := gdnRowBlocks(rgs, len(rows)/3)
						// blocks of gdn_rows: 1, 2, 7, as the launches split them
						rowBlocks, rowPer, items, runs := gdnRowSplit(blks, c.hv*c.dv/128, []int{5: 1, 6: 2, 7: 7, 8: 0}[k], q.d.info.SMs)
						rows = append(append(rows, rrows...), 0) // never empty
						descs, base, blks = append(descs, 0, 0), append(base, 0), append(blks, 0, 0)
						cb, db, bb, rb := upload(t, q, i32Bytes(tab), 0), upload(t, q, i32Bytes(descs), 0), upload(t, q, i32Bytes(base), 0), upload(t, q, i32Bytes(rows), 0)
						kb := upload(t, q, i32Bytes(blks), 0)
						work, err := q.Alloc(int64(len(tab)/2) * int64(c.hv) * gdnWork)
						if err != nil {
							return err
						}
						bufs = append(bufs, cb, db, bb, rb, kb, work)
						gdnPrepKH, gdnPrepAll = k == 1 || k == 5, k == 1 || k == 5
						err = q.gdnPrep(Operand{X, tensor.BF16}, Operand{G, tensor.F32}, Operand{B, tensor.F32}, cb, work, len(tab)/2, c.hk, c.hv, c.dv)
						gdnPrepKH, gdnPrepAll = true, false
						if err != nil {
							return err
						}
						if len(long) > 0 {
							gdnNS, gdnPairs = min(1+(k-1)%4, 3), map[int]int{3: -1, 4: 1}[1+(k-1)%4]
							err = q.gdnState(Operand{O, tensor.F32}, Operand{X, tensor.BF16}, db, bb, rb, work, len(long), c.hk, c.hv, c.dv, gdnDeep(long))
							gdnNS, gdnPairs = 0, 0
							if err != nil {
								return err
							}
						}
						if rowBlocks > 0 {
							if err := q.gdnRows(Operand{O, tensor.F32}, Operand{X, tensor.BF16}, kb, rb, work, len(rgs), items, rowBlocks, rowPer, runs, gdnRowWidth(rrows), c.hk, c.hv, c.dv); err != nil {
								return err
							}
						}
					}
					outs[k] = from32(download(t, q, O, on))
					if single {
						finals[k] = from32(download(t, q, F, sn))
					}
				}
				return nil
			})
			worst := gdnWorstTol
			if c.corr {
				worst = gdnWorstCorrTol
			}
			checkRel(t, "o", outs[1], outs[0], gdnRMSTol, worst)
			if single {
				checkRel(t, "final", finals[1], finals[0], gdnRMSTol, worst)
			}
			if kinds > 5 {
				checkRel(t, "o (gdn_rows)", outs[5], outs[0], gdnRMSTol, worst)
			}
			names := []string{2: "ns2", 3: "w2", 4: "w2 (rows two at a time)", 6: "gdn_rows on 2 blocks", 7: "gdn_rows on 7 blocks", 8: "gdn_rows on a block a multiprocessor"}
			for k := 2; k < kinds; k++ {
				if k == 5 {
					continue
				}
				b := 1 + 4*(k/5) // the first of k's family
				for i := range outs[b] {
					if math.Float32bits(outs[b][i]) != math.Float32bits(outs[k][i]) {
						t.Fatalf("o[%d]: %g by gdn_prep_kh and gdn_state_ns1, %g by gdn_prep and %s", i, outs[b][i], outs[k][i], names[k])
					}
				}
				for i := range finals[b] {
					if math.Float32bits(finals[b][i]) != math.Float32bits(finals[k][i]) {
						t.Fatalf("final[%d]: %g by gdn_prep_kh and gdn_state_ns1, %g by gdn_prep and %s", i, finals[b][i], finals[k][i], names[k])
					}
				}
			}
		})
	}
}

// gdnSegsInputs uploads a Kev-4B-headed delta-rule problem of n rows and two cached states.
func gdnSegsInputs(t *testing.T, r *rand.Rand, gb *Backend, c tensor.DeltaConfig, xs []uint16, gs, bs []float32) (x, g, beta tensor.Tensor, states []tensor.Tensor) {
	t.Helper()
	n := len(gs) / c.ValueHeads
	var err error
	if x, err = gb.FromBits(tensor.BF16, []int{n, 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim}, xs); err != nil {
		t.Fatal(err)
	}
	if g, err = gb.FromFloat32([]int{n, c.ValueHeads}, gs); err != nil {
		t.Fatal(err)
	}
	if beta, err = gb.FromFloat32([]int{n, c.ValueHeads}, bs); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		st, err := gb.FromFloat32([]int{c.ValueHeads, c.KeyDim, c.ValueDim}, randVals(r, c.ValueHeads*c.KeyDim*c.ValueDim, 0.5))
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, st)
	}
	return x, g, beta, states
}

// TestGDNSegments runs GatedDeltaRuleSegments and GatedDeltaRule with the tensor-core kernels and with the
// register kernels on the same inputs — new segments, kept states, empty segments, rows continuing cached states
// and rows continuing segments of the call — and compares outputs (bf16: one more rounding of 2⁻⁹, so the bounds
// grow by that) and kept states.
// Both with the rows in the blocks of gdn_state and, where it runs, on gdn_rows.
func TestGDNSegments(t *testing.T) { forRowModes(t, testGDNSegments) }

func testGDNSegments(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	segs := []tensor.Segment{
		{Len: 300, From: tensor.FromZero, Keep: true},
		{Len: 40, From: tensor.FromPrefix, Index: 1},
		{Len: 9, From: tensor.FromSegment, Index: 0},
		{Len: 64, From: tensor.FromZero},
		{Len: 0, From: tensor.FromPrefix, Index: 0, Keep: true},
		{Len: 65, From: tensor.FromSegment, Index: 3, Keep: true},
		{Len: 1, From: tensor.FromPrefix, Index: 0},
		{Len: 130, From: tensor.FromSegment, Index: 0, Keep: true},
		{Len: 40, From: tensor.FromPrefix, Index: 1, Keep: true},
	}
	n := 0
	for _, s := range segs {
		n += s.Len
	}
	c := tensor.DeltaConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	xs, gs, bs, _ := deltaInputs(r, n, c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim, false)
	for i := range gs {
		gs[i] *= 0.05
	}
	x, g, beta, states := gdnSegsInputs(t, r, gb, c, xs, gs, bs)
	defer gb.Free(append(states, x, g, beta)...)
	var outs [2]tensor.Tensor
	var kept [2][]tensor.Tensor
	var single [2]tensor.Tensor
	var singleState [2]tensor.Tensor
	for k, on := range []bool{false, true} {
		gdnOn = on
		var err error
		outs[k], kept[k], err = gb.GatedDeltaRuleSegments(x, g, beta, states, segs, c)
		if err == nil {
			single[k], singleState[k], err = gb.GatedDeltaRule(x, g, beta, states[1], nil, c)
		}
		gdnOn = true
		if err != nil {
			t.Fatal(err)
		}
	}
	const bf = 1.0 / 512
	checkRel(t, "o", f32s(t, gb, outs[1]), f32s(t, gb, outs[0]), gdnRMSTol+bf, gdnWorstTol+4*bf)
	for i := range segs {
		if (kept[0][i] == nil) != (kept[1][i] == nil) {
			t.Fatalf("segment %d: kept %v by the register kernels, %v by the tensor-core ones", i, kept[0][i] != nil, kept[1][i] != nil)
		}
		if kept[0][i] != nil {
			checkRel(t, fmt.Sprintf("state%d", i), f32s(t, gb, kept[1][i]), f32s(t, gb, kept[0][i]), gdnRMSTol, gdnWorstTol)
		}
	}
	checkRel(t, "GatedDeltaRule/o", f32s(t, gb, single[1]), f32s(t, gb, single[0]), gdnRMSTol+bf, gdnWorstTol+4*bf)
	checkRel(t, "GatedDeltaRule/state", f32s(t, gb, singleState[1]), f32s(t, gb, singleState[0]), gdnRMSTol, gdnWorstTol)
	for k := range 2 {
		gb.Free(append(kept[k], outs[k], single[k], singleState[k])...)
	}
}

// TestGDNBatchInvariant checks that a segment's outputs and kept state do not depend on the segments it is
// batched with: a 300-token new segment alone (one block per multiprocessor: the two-stage kernel) and in a batch
// of other new and continuing segments before and after it (the one-stage kernel), bit for bit.
// Both with the rows in the blocks of gdn_state and, where it runs, on gdn_rows.
func TestGDNBatchInvariant(t *testing.T) { forRowModes(t, testGDNBatchInvariant) }

func testGDNBatchInvariant(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	c := tensor.DeltaConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	width := 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim
	const lone = 300
	batch := []tensor.Segment{
		{Len: 40, From: tensor.FromPrefix, Index: 0},
		{Len: 500, From: tensor.FromZero, Keep: true},
		{Len: lone, From: tensor.FromZero, Keep: true},
		{Len: 130, From: tensor.FromPrefix, Index: 1, Keep: true},
		{Len: 9, From: tensor.FromSegment, Index: 2},
	}
	off, n := 0, 0
	for i, s := range batch {
		if i == 2 {
			off = n
		}
		n += s.Len
	}
	xs, gs, bs, _ := deltaInputs(r, n, c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim, false)
	x, g, beta, states := gdnSegsInputs(t, r, gb, c, xs, gs, bs)
	defer gb.Free(append(states, x, g, beta)...)
	xl, gl, bl, sts := gdnSegsInputs(t, r, gb, c, xs[off*width:(off+lone)*width], gs[off*c.ValueHeads:(off+lone)*c.ValueHeads], bs[off*c.ValueHeads:(off+lone)*c.ValueHeads])
	defer gb.Free(append(sts, xl, gl, bl)...)
	ob, kb, err := gb.GatedDeltaRuleSegments(x, g, beta, states, batch, c)
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Free(append(kb, ob)...)
	ol, kl, err := gb.GatedDeltaRuleSegments(xl, gl, bl, nil, []tensor.Segment{{Len: lone, From: tensor.FromZero, Keep: true}}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer gb.Free(append(kl, ol)...)
	vb, vl := f32s(t, gb, ob), f32s(t, gb, ol)
	w := c.ValueHeads * c.ValueDim
	diff := 0
	for i := range vl {
		if math.Float32bits(vl[i]) != math.Float32bits(vb[off*w+i]) {
			diff++
		}
	}
	sb, sl := f32s(t, gb, kb[2]), f32s(t, gb, kl[0])
	for i := range sl {
		if math.Float32bits(sl[i]) != math.Float32bits(sb[i]) {
			diff++
		}
	}
	if diff != 0 {
		t.Errorf("%d output and state values differ between the segment alone and in a batch", diff)
	}
}

// BenchmarkGDN times the delta rule of one Kev-4B DeltaNet layer (16 key and 32 value heads of 128, bf16 rows)
// through GatedDeltaRuleSegments with the tensor-core kernels ("tc"; "tc-ungrouped": every row a segment of its own,
// or on gdn_rows one row a block; "tc-rows": the rows on gdn_rows (KEV_GDN_ROWS=on makes it the default, "tc");
// "tc-prep1": one precompute block per (chunk, value head) whatever the launch's size; "tc-ns1", "tc-ns2", "tc-w2":
// the state kernel of one or two stages of 32 value columns, or of 64, whatever the launch's size) and the register
// kernels ("reg"): device time of the whole call (uploads of its small tables included), the stream held behind a
// gate until the call is queued, median of 21 after warm-up. Cases: new segments of 2,392, 2,048 tokens, 8 × 1,024
// and 64 × 256 (kept states); 6 and 2 question rows of 40 continuing a cached state; Kev's 64-request pass (64 new
// 13-token states, kept, each continued by 6 rows of 40). KEV_GDN_MIN sets gdnMinLen for the "tc" runs; KEV_GDN_CASES
// and KEV_GDN_KINDS (comma-separated names) limit the cases and kinds, e.g. for a profiler.
func BenchmarkGDN(b *testing.B) {
	c := tensor.DeltaConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	width := 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim
	rep := func(k int, s tensor.Segment) []tensor.Segment {
		v := make([]tensor.Segment, k)
		for i := range v {
			v[i] = s
		}
		return v
	}
	var req64 []tensor.Segment
	for i := range 64 {
		req64 = append(req64, tensor.Segment{Len: 13, From: tensor.FromZero, Keep: true})
		for range 6 {
			req64 = append(req64, tensor.Segment{Len: 40, From: tensor.FromSegment, Index: 7 * i})
		}
	}
	cases := []struct {
		name string
		segs []tensor.Segment
	}{
		{"1x2392 new", rep(1, tensor.Segment{Len: 2392, Keep: true})},
		{"1x2048 new", rep(1, tensor.Segment{Len: 2048, Keep: true})},
		{"8x1024 new", rep(8, tensor.Segment{Len: 1024, Keep: true})},
		{"64x256 new", rep(64, tensor.Segment{Len: 256, Keep: true})},
		{"6x40 cached", rep(6, tensor.Segment{Len: 40, From: tensor.FromPrefix})},
		{"2x40 cached", rep(2, tensor.Segment{Len: 40, From: tensor.FromPrefix})},
		{"64 requests 13+6x40", req64},
	}
	if v := os.Getenv("KEV_GDN_MIN"); v != "" {
		m, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		defer func(old int) { gdnMinLen = old }(gdnMinLen)
		gdnMinLen = m
	}
	r := rand.New(rand.NewPCG(7, 8))
	gb := NewOn(dev)
	defer gb.Trim()
	g := openGate(b)
	for _, cs := range cases {
		if !benchOnly("KEV_GDN_CASES", cs.name) {
			continue
		}
		n := 0
		for _, s := range cs.segs {
			n += s.Len
		}
		xs := randBF16(r, n*width, 1)
		gs, bs := make([]float32, n*c.ValueHeads), make([]float32, n*c.ValueHeads)
		for i := range gs {
			gs[i] = float32(-0.1 * r.Float64())
			bs[i] = float32(r.Float64())
		}
		x, err := gb.FromBits(tensor.BF16, []int{n, width}, xs)
		if err != nil {
			b.Fatal(err)
		}
		gt, _ := gb.FromFloat32([]int{n, c.ValueHeads}, gs)
		bt, _ := gb.FromFloat32([]int{n, c.ValueHeads}, bs)
		st, err := gb.FromFloat32([]int{c.ValueHeads, c.KeyDim, c.ValueDim}, randVals(r, c.ValueHeads*c.KeyDim*c.ValueDim, 0.5))
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range []string{"reg", "tc-ungrouped", "tc-prep1", "tc-ns1", "tc-ns2", "tc-w2", "tc-inblock", "tc-rows", "tc"} {
			if !benchOnly("KEV_GDN_KINDS", kind) {
				continue
			}
			gdnOn, gdnGroup, gdnPrepKH = kind != "reg", kind != "tc-ungrouped", kind != "tc-prep1"
			rowsOn := gdnRowsOn
			gdnRowsOn = gdnRowsOn && kind != "tc-inblock" || kind == "tc-rows"
			gdnNS = map[string]int{"tc-ns1": 1, "tc-ns2": 2, "tc-w2": 3}[kind]
			pass := func() (tensor.Tensor, func(), error) {
				o, kept, err := gb.GatedDeltaRuleSegments(x, gt, bt, []tensor.Tensor{st}, cs.segs, c)
				return o, func() { gb.Free(append(kept, o)...) }, err
			}
			for range 3 {
				if err := gb.Run(func() error {
					_, done, err := pass()
					if done != nil {
						done()
					}
					return err
				}); err != nil {
					b.Fatal(err)
				}
			}
			sec, _, err := gatedTimes(g, gb.Run, pass, 21, 0.02)
			gdnOn, gdnGroup, gdnPrepKH, gdnNS, gdnRowsOn = true, true, true, 0, rowsOn
			if err != nil {
				b.Fatal(err)
			}
			fmt.Printf("KEVBENCH gdn %q %s ms=%.4f tokens=%d\n", cs.name, kind, sec*1e3, n)
		}
		gb.Free(x, gt, bt, st)
	}
}

// TestGDNRows checks the rows that run in the block of the state they continue (question rows: one chunk at most,
// no state kept): a batch of new states continued by rows of 1 to 64 tokens, rows of cached states, rows of an
// empty new state (a group of their own), next to segments that are not rows (65 tokens, a kept row), and new
// segments of one chunk, which gdn_rows computes before their rows (folded), continued by rows, by rows and a
// segment, or by nothing. Every output and kept state must be bit-identical with the grouping off (each row a
// segment of its own) and with each row computed alone (a call holding only the row and the state it continues; a
// folded segment alone too: on gdn_rows such calls run products 8 to 64 tokens wide where the batch's are 64, so a
// row's bits must not depend on the width), and within the bounds of TestGDNSegments against the register kernels.
// Both with the rows in the blocks of gdn_state and, where it runs, on gdn_rows (grouping off: one row a block).
func TestGDNRows(t *testing.T) { forRowModes(t, testGDNRows) }

// TestGDNRowsLimits checks that gdn_rows refuses what its kernel cannot run, before launching anything: widths
// outside 1 to 8 and rows too long for its 32-bit offsets within a chunk.
func TestGDNRowsLimits(t *testing.T) {
	if !rowsFit(128) {
		t.Skip("gdn_rows does not run on this device")
	}
	cases := []struct {
		width, hk, hv, dv int
		want              string
	}{
		{0, 16, 32, 128, "pieces of 8 tokens"},
		{9, 16, 32, 128, "pieces of 8 tokens"},
		{5, 16, 32, 1 << 20, "32-bit"},
		{5, 1 << 17, 1 << 17, 128, "32-bit"},
	}
	do(t, func(q *Queue) error {
		for _, c := range cases {
			err := q.gdnRows(Operand{DType: tensor.F32}, Operand{DType: tensor.BF16}, Buffer{}, Buffer{}, Buffer{}, 1, 1, 1, 1, false, c.width, c.hk, c.hv, c.dv)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("width %d, hk %d, hv %d, dv %d: error %v, want one about %q", c.width, c.hk, c.hv, c.dv, err, c.want)
			}
		}
		return nil
	})
}

func testGDNRows(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	segs := []tensor.Segment{
		{Len: 13, From: tensor.FromZero, Keep: true},
		{Len: 40, From: tensor.FromSegment, Index: 0},
		{Len: 1, From: tensor.FromSegment, Index: 0},
		{Len: 64, From: tensor.FromSegment, Index: 0},
		{Len: 65, From: tensor.FromSegment, Index: 0},
		{Len: 40, From: tensor.FromSegment, Index: 0, Keep: true},
		{Len: 70, From: tensor.FromZero},
		{Len: 40, From: tensor.FromPrefix, Index: 0},
		{Len: 40, From: tensor.FromSegment, Index: 6},
		{Len: 17, From: tensor.FromSegment, Index: 6},
		{Len: 33, From: tensor.FromPrefix, Index: 1},
		{Len: 40, From: tensor.FromPrefix, Index: 0},
		{Len: 0, From: tensor.FromZero, Keep: true},
		{Len: 20, From: tensor.FromSegment, Index: 12},
		{Len: 130, From: tensor.FromZero, Keep: true},
		{Len: 50, From: tensor.FromSegment, Index: 14},
		{Len: 2, From: tensor.FromPrefix, Index: 1},
		// new segments of one chunk (on gdn_rows, computed there before their rows: segment 0 too), kept or not,
		// continued by rows only, by rows and a segment, or by nothing
		{Len: 13, From: tensor.FromZero, Keep: true}, // 17
		{Len: 40, From: tensor.FromSegment, Index: 17},
		{Len: 7, From: tensor.FromSegment, Index: 17},
		{Len: 30, From: tensor.FromZero}, // 20
		{Len: 40, From: tensor.FromSegment, Index: 20},
		{Len: 64, From: tensor.FromZero, Keep: true}, // 22
		{Len: 1, From: tensor.FromSegment, Index: 22},
		{Len: 64, From: tensor.FromSegment, Index: 22},
		{Len: 65, From: tensor.FromSegment, Index: 22},
		{Len: 50, From: tensor.FromZero, Keep: true}, // 26
	}
	starts := make([]int, len(segs))
	n := 0
	for i, s := range segs {
		starts[i] = n
		n += s.Len
	}
	c := tensor.DeltaConfig{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	width := 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim
	xs, gs, bs, _ := deltaInputs(r, n, c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim, false)
	for i := range gs {
		gs[i] *= 0.05
	}
	x, g, beta, states := gdnSegsInputs(t, r, gb, c, xs, gs, bs)
	defer gb.Free(append(states, x, g, beta)...)
	// run returns the outputs and kept states of a call on the rows of the given segments of segs (re-indexed).
	run := func(idx []int) ([]float32, [][]float32) {
		t.Helper()
		var sx []uint16
		var sg, sb []float32
		var ss []tensor.Segment
		pos := map[int]int{}
		for _, i := range idx {
			s := segs[i]
			if s.From == tensor.FromSegment {
				s.Index = pos[s.Index]
			}
			pos[i] = len(ss)
			ss = append(ss, s)
			a, b := starts[i], starts[i]+segs[i].Len
			sx, sg, sb = append(sx, xs[a*width:b*width]...), append(sg, gs[a*c.ValueHeads:b*c.ValueHeads]...), append(sb, bs[a*c.ValueHeads:b*c.ValueHeads]...)
		}
		m := len(sg) / c.ValueHeads
		xt, err := gb.FromBits(tensor.BF16, []int{m, width}, sx)
		if err != nil {
			t.Fatal(err)
		}
		gt, _ := gb.FromFloat32([]int{m, c.ValueHeads}, sg)
		bt, _ := gb.FromFloat32([]int{m, c.ValueHeads}, sb)
		defer gb.Free(xt, gt, bt)
		o, kept, err := gb.GatedDeltaRuleSegments(xt, gt, bt, states, ss, c)
		if err != nil {
			t.Fatal(err)
		}
		defer gb.Free(append(kept, o)...)
		var ks [][]float32
		for _, k := range kept {
			if k == nil {
				ks = append(ks, nil)
				continue
			}
			ks = append(ks, f32s(t, gb, k))
		}
		return f32s(t, gb, o), ks
	}
	all := make([]int, len(segs))
	for i := range all {
		all[i] = i
	}
	same := func(what string, a, b []float32) {
		t.Helper()
		if len(a) != len(b) {
			t.Fatalf("%s: %d values against %d", what, len(a), len(b))
		}
		diff := 0
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				diff++
			}
		}
		if diff != 0 {
			t.Errorf("%s: %d of %d values differ", what, diff, len(a))
		}
	}
	ob, kb := run(all)
	gdnGroup = false
	ou, ku := run(all)
	gdnGroup = true
	same("grouped/ungrouped o", ob, ou)
	for i := range kb {
		if (kb[i] == nil) != (ku[i] == nil) {
			t.Fatalf("segment %d: kept %v grouped, %v ungrouped", i, kb[i] != nil, ku[i] != nil)
		}
		if kb[i] != nil {
			same(fmt.Sprintf("grouped/ungrouped state%d", i), kb[i], ku[i])
		}
	}
	w := c.ValueHeads * c.ValueDim
	for i, s := range segs {
		folded := s.From == tensor.FromZero && s.Len <= gdnRowLen && dev.gdnRowsFit(c.ValueDim) && gdnFold // on gdn_rows
		if s.From == tensor.FromZero && !folded || s.Len == 0 {
			continue
		}
		idx := []int{i}
		if s.From == tensor.FromSegment {
			idx = []int{s.Index, i}
		}
		oa, ka := run(idx)
		if folded && s.Keep {
			same(fmt.Sprintf("segment %d alone/batched state", i), ka[0], kb[i])
		}
		la := segs[idx[0]].Len
		if len(idx) == 1 {
			la = 0
		}
		same(fmt.Sprintf("segment %d alone/batched", i), oa[la*w:], ob[starts[i]*w:(starts[i]+s.Len)*w])
	}
	// two rows of one cached state alone in a call: the group is split between blocks (gdnSpread)
	o2, _ := run([]int{7, 11})
	same("rows 7, 11 of one cached state", o2, append(append([]float32(nil), ob[starts[7]*w:(starts[7]+segs[7].Len)*w]...), ob[starts[11]*w:(starts[11]+segs[11].Len)*w]...))
	gdnOn = false
	or, kr := run(all)
	gdnOn = true
	const bf = 1.0 / 512
	checkRel(t, "o", ob, or, gdnRMSTol+bf, gdnWorstTol+4*bf)
	for i := range kb {
		if kb[i] != nil && kr[i] != nil && segs[i].Len > 0 { // an empty new segment keeps zeros
			checkRel(t, fmt.Sprintf("state%d", i), kb[i], kr[i], gdnRMSTol, gdnWorstTol)
		}
	}
	// GatedDeltaRule with several segments of one state: the rows among them share one block.
	lens := []int{40, 64, 1, 33, 65, 20}
	rest := n
	for _, l := range lens {
		rest -= l
	}
	lens = append(lens, rest)
	var single [3][]float32 // grouped, ungrouped, register kernels
	for k := range 3 {
		gdnGroup, gdnOn = k == 0, k < 2
		o, _, err := gb.GatedDeltaRule(x, g, beta, states[1], lens, c)
		gdnGroup, gdnOn = true, true
		if err != nil {
			t.Fatal(err)
		}
		single[k] = f32s(t, gb, o)
		gb.Free(o)
	}
	same("GatedDeltaRule grouped/ungrouped", single[0], single[1])
	checkRel(t, "GatedDeltaRule/o", single[0], single[2], gdnRMSTol+bf, gdnWorstTol+4*bf)
}
