//go:build cuda

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// The backend runs a batch of segments continuing different prefixes as one launch per operation (two for the
// delta rule: segments continuing another segment of the call run after it). Each segment is described to the
// kernels by a segDesc in a small device array uploaded with the call; prefixes, histories and recurrent states
// are read in place through the pointers it holds, never copied per row.
var _ tensor.Batched = (*Backend)(nil)

// The blocks of conv1d_silu_segs_k* (kernels/segs.cu) are convVecs 8-channel vectors (CONV_VX) by convRowThreads
// rows of threads (CONV_WY); past the blocks of the segments' first rows, a thread computes convRows consecutive
// rows (CONV_RB).
const (
	convVecs       = 32
	convRowThreads = 4
	convRows       = 4
)

// segDesc is the kernels' SegDesc (kernels/segs.cu): start, len, p, dt, first, dtb, then the pointers a and b,
// each as two int32 halves (little-endian).
type segDesc [10]int32

func (d *segDesc) set(start, n, p int, dt tensor.DType, first int, dtb tensor.DType, a, b cu.DevicePtr) {
	*d = segDesc{int32(start), int32(n), int32(p), int32(dt), int32(first), int32(dtb),
		int32(uint32(a)), int32(uint32(uint64(a) >> 32)), int32(uint32(b)), int32(uint32(uint64(b) >> 32))}
}

// putDescs writes the descriptors into a kernel parameter (a SegDesc array, little-endian).
func putDescs(dst []byte, ds []segDesc) {
	for i, d := range ds {
		for j, v := range d {
			binary.LittleEndian.PutUint32(dst[40*i+4*j:], uint32(v))
		}
	}
}

// flat returns the descriptors as one int32 slice for upload.
func flat(ds []segDesc) []int32 {
	out := make([]int32, 0, 10*len(ds))
	for _, d := range ds {
		out = append(out, d[:]...)
	}
	return out
}

// checkSegs validates segments against n rows and nPrefix prefixes and returns their start rows.
func checkSegs(op string, segs []tensor.Segment, n, nPrefix int) ([]int, error) {
	starts := make([]int, len(segs))
	sum := 0
	for i, s := range segs {
		if s.Len < 0 {
			return nil, fmt.Errorf("cuda: %s: segs[%d].Len = %d is negative", op, i, s.Len)
		}
		switch s.From {
		case tensor.FromZero:
		case tensor.FromPrefix:
			if s.Index < 0 || s.Index >= nPrefix {
				return nil, fmt.Errorf("cuda: %s: segs[%d] continues prefix %d of %d", op, i, s.Index, nPrefix)
			}
		case tensor.FromSegment:
			if s.Index < 0 || s.Index >= len(segs) {
				return nil, fmt.Errorf("cuda: %s: segs[%d] continues segment %d of %d", op, i, s.Index, len(segs))
			}
			if segs[s.Index].From != tensor.FromZero {
				return nil, fmt.Errorf("cuda: %s: segs[%d] continues segment %d, which starts %v, not FromZero", op, i, s.Index, segs[s.Index].From)
			}
		default:
			return nil, fmt.Errorf("cuda: %s: segs[%d].From = %v", op, i, s.From)
		}
		starts[i] = sum
		sum += s.Len
	}
	if sum != n {
		return nil, fmt.Errorf("cuda: %s: segments hold %d rows, the input %d", op, sum, n)
	}
	return starts, nil
}

// rowSegs returns, for each row, the index of its segment.
func rowSegs(segs []tensor.Segment, n int) []int32 {
	out := make([]int32, 0, n)
	for i, s := range segs {
		for range s.Len {
			out = append(out, int32(i))
		}
	}
	return out
}

// rowPtr returns the address of row r of a matrix of width w stored as dt.
func rowPtr(t *Tensor, r, w int) cu.DevicePtr {
	return t.buf.Ptr + cu.DevicePtr(int64(r)*int64(w)*elemSize(t.dtype))
}

// AttentionSegments is causal grouped-query attention whose segments each continue their own prefix: a
// FromSegment segment reads the keys and values of the segment it continues in place. Bf16 operands with head
// dimension 64, 128 or 256 take the tiled tensor-core kernel (every 64-row block lies in one segment and shares
// its prefix; a long prefix is split over blocks by its own length, segSplits); other cases one warp per (row,
// head) in fp32. Either way a row's output depends on its own segment alone.
func (b *Backend) AttentionSegments(q, k, v tensor.Tensor, kPrefixes, vPrefixes []tensor.Tensor, segs []tensor.Segment, c tensor.AttentionConfig) (tensor.Tensor, error) {
	const op = "AttentionSegments"
	if c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Heads%c.KVHeads != 0 || c.HeadDim > MaxAttentionHeadDim {
		return nil, fmt.Errorf("cuda: %s: bad config %+v (head dimension at most %d)", op, c, MaxAttentionHeadDim)
	}
	d, kvw := c.HeadDim, c.KVHeads*c.HeadDim
	qt, err := b.matrix(op, "q", q, -1, c.Heads*d)
	if err != nil {
		return nil, err
	}
	n := qt.shape[0]
	kt, err := b.matrix(op, "k", k, n, kvw)
	if err != nil {
		return nil, err
	}
	vt, err := b.matrix(op, "v", v, n, kvw)
	if err != nil {
		return nil, err
	}
	if len(kPrefixes) != len(vPrefixes) {
		return nil, fmt.Errorf("cuda: %s: %d key prefixes, %d value prefixes", op, len(kPrefixes), len(vPrefixes))
	}
	starts, err := checkSegs(op, segs, n, len(kPrefixes))
	if err != nil {
		return nil, err
	}
	kps, vps := make([]*Tensor, len(kPrefixes)), make([]*Tensor, len(kPrefixes))
	for i := range kPrefixes {
		if kps[i], err = b.matrix(op, fmt.Sprintf("kPrefixes[%d]", i), kPrefixes[i], -1, kvw); err != nil {
			return nil, err
		}
		if vps[i], err = b.matrix(op, fmt.Sprintf("vPrefixes[%d]", i), vPrefixes[i], kps[i].shape[0], kvw); err != nil {
			return nil, err
		}
	}
	descs := make([]segDesc, len(segs))
	fast := (d == 64 || d == 128 || d == 256) && qt.dtype == tensor.BF16 && kt.dtype == tensor.BF16 && vt.dtype == tensor.BF16
	plens := make([]int, len(segs))
	for i, s := range segs {
		var p int
		var dt, dtb tensor.DType
		var pa, pb cu.DevicePtr
		switch s.From {
		case tensor.FromPrefix:
			kp, vp := kps[s.Index], vps[s.Index]
			p, dt, dtb, pa, pb = kp.shape[0], kp.dtype, vp.dtype, kp.buf.Ptr, vp.buf.Ptr
		case tensor.FromSegment:
			j := s.Index
			p, dt, dtb = segs[j].Len, kt.dtype, vt.dtype
			pa, pb = rowPtr(kt, starts[j], kvw), rowPtr(vt, starts[j], kvw)
		}
		if p == 0 {
			pa, pb = 0, 0
		} else if dt != tensor.BF16 || dtb != tensor.BF16 || pa%16 != 0 || pb%16 != 0 {
			fast = false
		}
		plens[i] = p
		descs[i].set(starts[i], s.Len, p, dt, 0, dtb, pa, pb)
	}
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(qt.dtype), n, c.Heads*d); err != nil || n == 0 {
			return err
		}
		if fast {
			return s.flashSegs(y, qt, kt, vt, descs, segs, starts, plens, c)
		}
		db, err := s.ints(flat(descs))
		if err != nil {
			return err
		}
		rs, err := s.ints(rowSegs(segs, n))
		if err != nil {
			return err
		}
		s.q.args.Reset()
		s.q.put(y.Operand()).put(qt.Operand()).put(kt.Operand()).put(vt.Operand())
		s.q.args.Ptr(db.Ptr).Ptr(rs.Ptr).I32(int32(n)).I32(int32(c.Heads)).I32(int32(c.KVHeads)).I32(int32(d)).F32(c.Scale)
		jobs := n * c.Heads
		return s.q.launch("segs", "attention_segs", cudrv.Dim3{X: (jobs + 3) / 4, Y: 1, Z: 1}, cudrv.Dim3{X: 128, Y: 1, Z: 1}, 0)
	})
	return result(y, err)
}

// segSplits is the number of key splits of every block of a segment with a prefix of p keys: one per 16 prefix key
// tiles (512 keys), at most 16, and none below 32 tiles. It depends on the segment alone, never on the rest of the
// call, so a row's attention output has the same bits whatever segments it is batched with.
func segSplits(p int) int {
	return max(1, min(16, (p+31)/32/16))
}

// flashGroup is the query heads a flash_attn_segs block takes (4, 2 or 1 of a group of heads / kvHeads): each K/V
// tile it loads serves 64/G rows of each, so a short segment pads fewer rows to the block's 64.
func flashGroup(heads, kvHeads int) int {
	if flashOneHead || kvHeads <= 0 || heads%kvHeads != 0 {
		return 1
	}
	for _, g := range []int{4, 2} {
		if (heads/kvHeads)%g == 0 {
			return g
		}
	}
	return 1
}

// flashOneHead makes every flash_attn_segs block take one head (64 rows), as before the grouped blocks; for
// benchmarks that compare both in one run. Set only on the device thread, between launches.
var flashOneHead bool

// flashSegs launches flash_attn_segs_dD (flashGroup's heads a block) over the 64/G-row tiles of every segment
// (segment i starts at row starts[i] and continues plens[i] prefix keys), or flash_segs_wg_d256_g4 over its 32-row
// tiles where flashWGFits, each block splitting its keys segSplits ways, then attn_combine_rows over the rows of the
// split blocks. Up to convParamSegs descriptors travel as a kernel parameter, more are uploaded.
func (s *scope) flashSegs(y, qt, kt, vt *Tensor, descs []segDesc, segs []tensor.Segment, starts, plens []int, c tensor.AttentionConfig) error {
	q := s.q
	var db Buffer
	var pd [convParamSegs * 40]byte // FlashSegs
	if len(descs) > convParamSegs {
		var err error
		if db, err = s.ints(flat(descs)); err != nil {
			return err
		}
	} else {
		putDescs(pd[:], descs)
	}
	n, h, d := y.shape[0], c.Heads, c.HeadDim
	gq := flashGroup(c.Heads, c.KVHeads)
	wg := q.d.flashWGFits(d, gq)
	th := 64 / gq // a block's rows
	if wg {
		th = flashWGRows
	}
	var blocks, rows []int32
	maxS := 1
	for i, sg := range segs {
		sp := segSplits(plens[i])
		maxS = max(maxS, sp)
		for tile := 0; tile*th < sg.Len; tile++ {
			blocks = append(blocks, int32(i), int32(tile), int32(sp), 0)
		}
		if sp > 1 {
			for r := range sg.Len {
				rows = append(rows, int32(starts[i]+r), int32(sp))
			}
		}
	}
	if !flashInOrder {
		flashLongestFirst(blocks, plens, th)
	}
	nb := len(blocks) / 4
	bb, err := s.ints(blocks)
	if err != nil {
		return err
	}
	var part, ml cu.DevicePtr
	if maxS > 1 {
		pn := int64(maxS) * int64(n) * int64(h) * int64(d) * 4
		if err := q.ReserveWorkspace(pn + int64(maxS)*int64(n)*int64(h)*8); err != nil {
			return err
		}
		part, ml = q.d.ws.Ptr, q.d.ws.Ptr+cu.DevicePtr(pn)
	}
	log2e := float32(1.4426950408889634)
	q.args.Reset()
	q.put(y.Operand())
	q.args.Ptr(part).Ptr(ml).Ptr(qt.buf.Ptr).Ptr(kt.buf.Ptr).Ptr(vt.buf.Ptr).Ptr(db.Ptr).Ptr(bb.Ptr)
	q.args.I32(int32(n)).I32(int32(h)).I32(int32(c.KVHeads)).F32(c.Scale*log2e).Bytes(pd[:], 8)
	mod, name, threads, shared := "flash", fmt.Sprintf("flash_attn_segs_d%d", d), 128, flashShared(d)
	if gq > 1 {
		name += fmt.Sprintf("_g%d", gq)
	}
	if wg {
		mod, name, threads, shared = "flash_sm90a", "flash_segs_wg_d256_g4", 256, flashWGShared
	}
	if err := q.launch(mod, name, cudrv.Dim3{X: nb, Y: h / gq, Z: maxS}, cudrv.Dim3{X: threads, Y: 1, Z: 1}, shared); err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	rb, err := s.ints(rows)
	if err != nil {
		return err
	}
	q.args.Reset()
	q.put(y.Operand())
	nr := len(rows) / 2
	q.args.Ptr(part).Ptr(ml).Ptr(rb.Ptr).I32(int32(nr)).I32(int32(n)).I32(int32(h)).I32(int32(d))
	return q.launch("flash", "attn_combine_rows", cudrv.Dim3{X: (nr*h + 7) / 8, Y: 1, Z: 1}, cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// flashWGOn selects flash_segs_wg_d256_g4 (kernels/flash_sm90a.cu: warpgroup products, blocks of 32 rows of four
// query heads, tiles of 64 keys) where it runs — Hopper, head dimension 256, four query heads a block: on unless
// KEV_FLASH_WG=off, which keeps flash_attn_segs_d256_g4. The two kernels' bits differ, so the choice is the
// process's, never a call's. Tests and benchmarks run both.
var flashWGOn = !envIs("KEV_FLASH_WG", "off")

// flashWGRows is the query rows of a flash_segs_wg_d256_g4 block (FW_ROWS); flashWGShared its dynamic shared
// memory: q of 32 rows of four heads (64 KiB), two stages of a key tile's k and v (64 KiB each), 1 KiB to align.
const (
	flashWGRows   = 32
	flashWGShared = 3*65536 + 1024
)

// flashWGFits reports whether attention with head dimension dim in blocks of gq query heads runs on
// flash_segs_wg_d256_g4 on this device.
func (d *Device) flashWGFits(dim, gq int) bool {
	return flashWGOn && d.hopper() && dim == 256 && gq == 4 && d.info.SharedOptin >= flashWGShared
}

// flashInOrder launches flash_attn_segs blocks in segment and tile order, as before flashLongestFirst; for
// benchmarks that compare both in one run. Set only on the device thread, between launches.
var flashInOrder bool

// flashLongestFirst orders the blocks (segment, tile, splits, 0) of a flash_attn_segs launch by the key tiles each
// split of each takes, most first (ties in their order): the multiprocessors take blocks in launch order, so a
// causal prefill's last row tiles — the ones that see every key — start first instead of ending the launch alone.
// A block computes the same bits wherever it runs. rows is the row tile's height.
func flashLongestFirst(blocks []int32, plens []int, rows int) {
	type blk struct {
		b    [4]int32
		keys int
	}
	bs := make([]blk, len(blocks)/4)
	for i := range bs {
		copy(bs[i].b[:], blocks[4*i:])
		seg, tile, sp := int(bs[i].b[0]), int(bs[i].b[1]), int(bs[i].b[2])
		bs[i].keys = (plens[seg] + (tile+1)*rows) / sp
	}
	sort.SliceStable(bs, func(i, j int) bool { return bs[i].keys > bs[j].keys })
	for i, b := range bs {
		copy(blocks[4*i:], b.b[:])
	}
}

// convParamSegs is the most segment descriptors a convolution launch carries as a kernel parameter (CONV_PSEGS in
// kernels/segs.cu); a call with more uploads them.
const convParamSegs = 16

// convVecSegs bounds the segments of the bf16 convolution kernels conv1d_silu_segs_k* (the bound they had when they
// kept every descriptor in shared memory, kept so that the same calls take them); calls with more segments take
// conv1d_silu_segs, which gives the same bits.
const convVecSegs = 1024

// convVec selects conv1d_silu_segs_k* (16-byte vectors) for the calls they take; false runs conv1d_silu_segs for
// every call (tests compare the two: the bits are the same).
var convVec = true

// convVecStates reports whether every cached state can be read by conv1d_silu_segs_k*, which read histories as
// 16-byte vectors of bf16 (a kept state has x's type; other states take conv1d_silu_segs, which gives the same
// bits).
func convVecStates(sts []*Tensor) bool {
	for _, st := range sts {
		if st.dtype != tensor.BF16 || st.buf.Ptr%16 != 0 {
			return false
		}
	}
	return true
}

// CausalConv1dSiLUSegments is the depthwise causal convolution with SiLU whose segments each continue their own
// history (a cached state, or the last inputs of another segment of the call, read in place); the kept histories
// keep x's type and are written by one launch. x may be a column view (SplitCols), read in place. With bf16 x and
// at most convParamSegs segments the call uploads nothing: the segment descriptors travel as kernel parameters and
// each thread finds its rows' segments itself.
func (b *Backend) CausalConv1dSiLUSegments(x, w tensor.Tensor, states []tensor.Tensor, segs []tensor.Segment) (tensor.Tensor, []tensor.Tensor, error) {
	const op = "CausalConv1dSiLUSegments"
	xt, ldx, err := b.strided(op, "x", x, -1, -1)
	if err != nil {
		return nil, nil, err
	}
	n, ch := xt.shape[0], xt.shape[1]
	wt, err := b.matrix(op, "w", w, ch, -1)
	if err != nil {
		return nil, nil, err
	}
	kw := wt.shape[1]
	if kw < 1 {
		return nil, nil, &tensor.ShapeError{Op: op, Arg: "w", Shape: wt.shape, Want: tensor.Dims(ch, -1) + " with K ≥ 1"}
	}
	starts, err := checkSegs(op, segs, n, len(states))
	if err != nil {
		return nil, nil, err
	}
	sts := make([]*Tensor, len(states))
	for i, st := range states {
		if sts[i], err = b.matrix(op, fmt.Sprintf("states[%d]", i), st, kw-1, ch); err != nil {
			return nil, nil, err
		}
	}
	// the desc's dtb field holds the history's row stride (see hist in kernels/segs.cu)
	descs := make([]segDesc, len(segs))
	for i, s := range segs {
		var p, first, ld int
		var dt tensor.DType
		var pa cu.DevicePtr
		switch s.From {
		case tensor.FromPrefix:
			dt, pa, ld = sts[s.Index].dtype, sts[s.Index].buf.Ptr, ch
		case tensor.FromSegment:
			j := s.Index
			dt, pa, ld = xt.dtype, xt.buf.Ptr, ldx
			p, first = starts[j]+segs[j].Len-(kw-1), max(0, kw-1-segs[j].Len)
		}
		descs[i].set(starts[i], s.Len, p, dt, first, 0, pa, 0)
		descs[i][5] = int32(ld)
	}
	small := len(segs) <= convParamSegs
	var psegs [convParamSegs * 40]byte // ConvSegs
	if small {
		putDescs(psegs[:], descs)
	}
	kept := make([]tensor.Tensor, len(segs))
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(act(xt.dtype), n, ch); err != nil {
			return err
		}
		var keep []int32
		for i, sg := range segs {
			if !sg.Keep {
				continue
			}
			t, err := s.out(xt.dtype, kw-1, ch)
			if err != nil {
				return err
			}
			kept[i] = t
			if kw > 1 && ch > 0 {
				keep = append(keep, int32(i), 0, int32(uint32(t.buf.Ptr)), int32(uint32(uint64(t.buf.Ptr)>>32)))
			}
		}
		if ch == 0 || (n == 0 && len(keep) == 0) {
			return nil
		}
		var db Buffer // the descriptors on the device, uploaded on first need
		upDescs := func() (cu.DevicePtr, error) {
			if small {
				return 0, nil
			}
			if db.Ptr == 0 {
				if db, err = s.ints(flat(descs)); err != nil {
					return 0, err
				}
			}
			return db.Ptr, nil
		}
		if n > 0 {
			s.q.args.Reset()
			// conv1d_silu_segs_k*: 8 channels a thread, 16-byte loads; first the blocks of the segments' first kw − 1
			// rows (one row a thread, its window reaching into the history), then the others (convRows rows a thread)
			hb := (len(segs)*(kw-1) + convRowThreads - 1) / convRowThreads
			rb := (n + convRows*convRowThreads - 1) / (convRows * convRowThreads)
			if convVec && xt.dtype == tensor.BF16 && y.dtype == tensor.BF16 && ch%8 == 0 && ldx%8 == 0 && kw >= 2 && kw <= 4 &&
				hb+rb <= 65535 && len(segs) <= convVecSegs && xt.buf.Ptr%16 == 0 && y.buf.Ptr%16 == 0 &&
				wt.buf.Ptr%16 == 0 && convVecStates(sts) {
				dp, err := upDescs()
				if err != nil {
					return err
				}
				s.q.args.Reset()
				s.q.args.Ptr(y.buf.Ptr).Ptr(xt.buf.Ptr).I32(int32(ldx)).Ptr(wt.buf.Ptr).I32(int32(wt.dtype)).Ptr(dp).
					I32(int32(len(segs))).I32(int32(n)).I32(int32(ch)).Bytes(psegs[:], 8)
				grid := cudrv.Dim3{X: (ch/8 + convVecs - 1) / convVecs, Y: hb + rb, Z: 1}
				block := cudrv.Dim3{X: convVecs, Y: convRowThreads, Z: 1}
				if err := s.q.launch("segs", fmt.Sprintf("conv1d_silu_segs_k%d", kw), grid, block, 0); err != nil {
					return err
				}
			} else {
				if db.Ptr == 0 {
					if db, err = s.ints(flat(descs)); err != nil {
						return err
					}
				}
				rs, err := s.ints(rowSegs(segs, n))
				if err != nil {
					return err
				}
				s.q.args.Reset()
				s.q.put(y.Operand()).put(xt.Operand()).put(wt.Operand())
				s.q.args.Ptr(db.Ptr).Ptr(rs.Ptr).I32(int32(n)).I32(int32(ch)).I32(int32(kw)).I32(int32(ldx))
				if err := s.q.launch("segs", "conv1d_silu_segs", gridFor(int64(n)*int64(ch), 256, s.q.d.info.SMs), block256, 0); err != nil {
					return err
				}
			}
		}
		if len(keep) == 0 {
			return nil
		}
		dp, err := upDescs()
		if err != nil {
			return err
		}
		var pkeep [convParamSegs * 16]byte // ConvKeeps
		var kp cu.DevicePtr
		if nk := len(keep) / 4; nk <= convParamSegs {
			for i, v := range keep {
				binary.LittleEndian.PutUint32(pkeep[4*i:], uint32(v))
			}
		} else {
			kb, err := s.ints(keep)
			if err != nil {
				return err
			}
			kp = kb.Ptr
		}
		s.q.args.Reset()
		s.q.put(xt.Operand())
		s.q.args.Ptr(dp).Ptr(kp).I32(int32(ch)).I32(int32(kw)).I32(int32(ldx)).I32(int32(len(segs))).
			Bytes(psegs[:], 8).Bytes(pkeep[:], 8)
		hn := (kw - 1) * ch
		return s.q.launch("segs", "conv_keep_segs", cudrv.Dim3{X: min((hn+255)/256, 64), Y: len(keep) / 4, Z: 1}, block256, 0)
	})
	if err != nil {
		return nil, nil, err
	}
	return y, kept, nil
}

// GatedDeltaRuleSegments runs the gated delta rule over segments that each start from their own state, read in
// place: one launch for the segments starting from nothing or from a cached state, then one for those continuing
// another segment of the call, which read that segment's final state (a kept state, or a temporary one). For
// d_k ∈ {32, 64, 128} the kernels are those Queue.DeltaRule picks (the one-pass register kernels by default);
// at d_k = 128 with bf16 rows, non-empty segments run on the chunked tensor-core kernels instead (gdn.go), chosen
// per segment by its own length.
func (b *Backend) GatedDeltaRuleSegments(qkv, g, beta tensor.Tensor, states []tensor.Tensor, segs []tensor.Segment, c tensor.DeltaConfig) (tensor.Tensor, []tensor.Tensor, error) {
	const op = "GatedDeltaRuleSegments"
	if c.KeyHeads <= 0 || c.ValueHeads <= 0 || c.KeyDim <= 0 || c.ValueDim <= 0 || c.ValueHeads%c.KeyHeads != 0 || c.Chunk < 0 {
		return nil, nil, fmt.Errorf("cuda: %s: bad config %+v", op, c)
	}
	hk, hv, dk, dv := c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim
	width := 2*hk*dk + hv*dv
	xt, err := b.matrix(op, "qkv", qkv, -1, width)
	if err != nil {
		return nil, nil, err
	}
	n := xt.shape[0]
	gt, err := b.matrix(op, "g", g, n, hv)
	if err != nil {
		return nil, nil, err
	}
	bt, err := b.matrix(op, "beta", beta, n, hv)
	if err != nil {
		return nil, nil, err
	}
	starts, err := checkSegs(op, segs, n, len(states))
	if err != nil {
		return nil, nil, err
	}
	sts := make([]*Tensor, len(states))
	for i, st := range states {
		if sts[i], err = b.get(op, fmt.Sprintf("states[%d]", i), st); err != nil {
			return nil, nil, err
		}
		if sh := sts[i].shape; len(sh) != 3 || sh[0] != hv || sh[1] != dk || sh[2] != dv {
			return nil, nil, &tensor.ShapeError{Op: op, Arg: fmt.Sprintf("states[%d]", i), Shape: sh, Want: tensor.Dims(hv, dk, dv)}
		}
	}
	shared := deltaShared(dk)
	reg := dk == 32 || dk == 64 || dk == 128
	if lim := max(48<<10, b.dev.info.SharedOptin); !reg && shared > lim {
		return nil, nil, fmt.Errorf("cuda: %s: d_k = %d needs %d bytes of shared memory, the device allows %d", op, dk, shared, lim)
	}
	// Segments the tensor-core kernels take (gdn.go), when the call's shape allows; rows among them (one chunk at
	// most, continuing a state, keeping none) run in the block of the state they continue: a segment of the call
	// that those kernels take (inBase), else a group of their own per continued state.
	// With gdn_rows (rowsTC), the rows run in a launch of their own after the state pass and read the final states
	// of the segments they continue, which those segments then store; a new segment of one chunk (folded) is computed
	// there too, before its rows, and stores its final state where it keeps it or a segment continues it. Segments
	// that continue another (never continued themselves) run after gdn_rows.
	tc := reg && b.dev.gdnFits(dk, dv, xt.Operand(), width)
	rowsTC := tc && b.dev.gdnRowsFit(dv)
	takes := func(sg tensor.Segment) bool { return tc && gdnTakes(sg.Len) }
	isRow := func(sg tensor.Segment) bool {
		return tc && sg.From != tensor.FromZero && gdnIsRow(sg.Len, sg.Keep, rowsTC)
	}
	inBase := func(sg tensor.Segment) bool {
		return isRow(sg) && sg.From == tensor.FromSegment && takes(segs[sg.Index])
	}
	folded := make([]bool, len(segs))
	for i, sg := range segs {
		folded[i] = rowsTC && gdnFold && sg.From == tensor.FromZero && takes(sg) && sg.Len <= gdnRowLen
	}
	referenced := make([]bool, len(segs)) // final state read by a later launch
	for _, s := range segs {
		if s.From == tensor.FromSegment && (!inBase(s) || rowsTC && !folded[s.Index]) {
			referenced[s.Index] = true
		}
	}
	kept := make([]tensor.Tensor, len(segs))
	var o *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if o, err = s.out(act(xt.dtype), n, hv*dv); err != nil {
			return err
		}
		size := int64(hv) * int64(dk) * int64(dv) * 4
		finals := make([]cu.DevicePtr, len(segs))
		for i, sg := range segs {
			switch {
			case sg.Keep:
				t, err := s.out(tensor.F32, hv, dk, dv)
				if err != nil {
					return err
				}
				kept[i], finals[i] = t, t.buf.Ptr
			case referenced[i]:
				buf, err := s.temp(size)
				if err != nil {
					return err
				}
				finals[i] = buf.Ptr
			}
		}
		// Segments the tensor-core kernels take: one precompute over all their chunks, then a state pass before
		// each register-kernel launch. Every table of the call (register and tensor-core descriptors of both
		// launches, the chunk table, the first chunks, the rows) goes up in one upload.
		var tab []int32
		var short [2][]segDesc
		var long [2][]*gdnLong
		at0 := make(map[int]*gdnLong)       // descriptor of a new segment the tensor-core kernels take
		groups := make(map[[2]int]*gdnLong) // rows' own groups, by (From, Index)
		for p, second := range []bool{false, true} {
			for i, sg := range segs {
				if (sg.From == tensor.FromSegment) != second {
					continue
				}
				var d segDesc
				switch sg.From {
				case tensor.FromZero:
					d.set(starts[i], sg.Len, 0, tensor.F32, 0, tensor.F32, 0, finals[i])
				case tensor.FromPrefix:
					st := sts[sg.Index]
					d.set(starts[i], sg.Len, 0, st.dtype, 0, tensor.F32, st.buf.Ptr, finals[i])
				case tensor.FromSegment:
					d.set(starts[i], sg.Len, 0, tensor.F32, 0, tensor.F32, finals[sg.Index], finals[i])
				}
				switch {
				case inBase(sg):
					tab = at0[sg.Index].addRow(tab, starts[i], sg.Len)
				case isRow(sg):
					key := [2]int{int(sg.From), sg.Index}
					g := groups[key]
					if g == nil {
						g = &gdnLong{d: d}
						g.d[0], g.d[1], g.d[8], g.d[9] = 0, 0, 0, 0 // no chunks of its own, no final state
						groups[key] = g
						long[p] = append(long[p], g)
					}
					tab = g.addRow(tab, starts[i], sg.Len)
				case takes(sg):
					g := &gdnLong{d: d, fold: folded[i]}
					tab, g.first = gdnChunks(tab, starts[i], sg.Len)
					long[p] = append(long[p], g)
					at0[i] = g
				default:
					short[p] = append(short[p], d)
				}
			}
		}
		// layout: short[0] short[1] long[0] long[1] row blocks (descriptors, 8-byte aligned), tab, lb[0], lb[1], rows
		var rgs []*gdnRowGroup
		for p := range long {
			if rowsTC {
				var g []*gdnRowGroup
				long[p], g = gdnPeel(long[p])
				rgs = append(rgs, g...)
			} else {
				long[p] = gdnSpread(long[p], b.dev.gdnWave(hv, dv))
			}
		}
		d0, lb0, rows0 := gdnFlat(long[0], 0)
		d1, lb1, rows1 := gdnFlat(long[1], len(rows0)/3)
		rows := append(rows0, rows1...)
		blks, rrows := gdnRowBlocks(rgs, len(rows)/3)
		rowBlocks, rowPer, items, runs := gdnRowSplit(blks, hv*dv/128, 0, b.dev.info.SMs)
		rows = append(rows, rrows...)
		parts := [][]int32{flat(short[0]), flat(short[1]), d0, d1, blks, tab, lb0, lb1, rows}
		if slices.IndexFunc(parts, func(p []int32) bool { return len(p) > 0 }) < 0 {
			return nil
		}
		at, err := s.intParts(parts...)
		if err != nil {
			return err
		}
		var work Buffer
		if nc := len(tab) / 2; nc > 0 {
			if work, err = s.temp(int64(nc) * int64(hv) * gdnWork); err != nil {
				return err
			}
			if err := s.q.gdnPrep(xt.Operand(), gt.Operand(), bt.Operand(), at[5], work, nc, hk, hv, dv); err != nil {
				return err
			}
		}
		for p := range 2 {
			// gdn_rows once the states its rows continue are complete (the new ones and those of the register
			// kernels), before the segments that continue another, which may continue a segment it computes
			if p == 1 && rowBlocks > 0 {
				if err := s.q.gdnRows(o.Operand(), xt.Operand(), at[4], at[8], work, len(rgs), items, rowBlocks, rowPer, runs, gdnRowWidth(rrows), hk, hv, dv); err != nil {
					return err
				}
			}
			if len(long[p]) > 0 {
				if err := s.q.gdnState(o.Operand(), xt.Operand(), at[2+p], at[6+p], at[8], work, len(long[p]), hk, hv, dv, gdnDeep(long[p])); err != nil {
					return err
				}
			}
			descs := short[p]
			if len(descs) == 0 {
				continue
			}
			qq := s.q
			qq.args.Reset()
			qq.put(o.Operand()).put(xt.Operand()).put(gt.Operand()).put(bt.Operand())
			qq.args.Ptr(at[p].Ptr).I32(int32(hk)).I32(int32(hv))
			grid := cudrv.Dim3{X: (dv + 31) / 32, Y: hv, Z: len(descs)}
			if reg {
				vec := xt.dtype == tensor.BF16 && width%8 == 0 && xt.buf.Ptr%16 == 0
				qq.args.I32(int32(dv)).I32(b2i(vec))
				maxLen := 0
				for _, d := range descs {
					maxLen = max(maxLen, int(d[1]))
				}
				kind, sh := b.dev.deltaKernel(dk, maxLen, false)
				err = qq.launch("delta", fmt.Sprintf("delta_rule_segs_%s_dk%d", kind, dk), grid, cudrv.Dim3{X: 256, Y: 1, Z: 1}, sh)
			} else {
				qq.args.I32(int32(dk)).I32(int32(dv))
				err = qq.launch("delta", "delta_rule_segs_rec", grid, cudrv.Dim3{X: 32, Y: 1, Z: 1}, shared)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return o, kept, nil
}

// SliceRows copies rows [lo, hi) of a matrix into a new tensor of its type with one device-to-device copy.
func (b *Backend) SliceRows(x tensor.Tensor, lo, hi int) (tensor.Tensor, error) {
	const op = "SliceRows"
	xt, err := b.matrix(op, "x", x, -1, -1)
	if err != nil {
		return nil, err
	}
	m, w := xt.shape[0], xt.shape[1]
	if lo < 0 || hi < lo || hi > m {
		return nil, fmt.Errorf("cuda: %s: rows [%d, %d) outside the %d rows of x", op, lo, hi, m)
	}
	var y *Tensor
	err = b.run(func(s *scope) error {
		var err error
		if y, err = s.out(xt.dtype, hi-lo, w); err != nil || hi == lo || w == 0 {
			return err
		}
		n := int64(hi-lo) * int64(w) * elemSize(xt.dtype)
		return s.q.CopyD2D(y.buf.Ptr, rowPtr(xt, lo, w), n)
	})
	return result(y, err)
}

// Pointers computes Kev's option probabilities for several questions over the same hidden states: the
// projections of every question's rows in one launch and one read-back, the logits and softmax on the host in
// fp32 exactly as Pointer does.
func (b *Backend) Pointers(h tensor.Tensor, p *tensor.PointerHead, qs []tensor.PointerQuery) ([][]float32, error) {
	const op = "Pointers"
	if p == nil {
		return nil, fmt.Errorf("cuda: %s: nil head", op)
	}
	ht, err := b.matrix(op, "h", h, -1, -1)
	if err != nil {
		return nil, err
	}
	n, d := ht.shape[0], ht.shape[1]
	wq, err := b.matrix(op, "Wq", p.Wq, -1, d)
	if err != nil {
		return nil, err
	}
	dp := wq.shape[0]
	wk, err := b.matrix(op, "Wk", p.Wk, dp, d)
	if err != nil {
		return nil, err
	}
	bq, err := b.vector(op, "Bq", p.Bq, dp)
	if err != nil {
		return nil, err
	}
	bk, err := b.vector(op, "Bk", p.Bk, dp)
	if err != nil {
		return nil, err
	}
	if dp == 0 || d == 0 {
		return nil, &tensor.ShapeError{Op: op, Arg: "Wq", Shape: wq.shape, Want: "a non-empty [dp, d]"}
	}
	if len(qs) == 0 {
		return [][]float32{}, nil
	}
	rows := make([]int32, 0, len(qs))
	for i, q := range qs {
		if q.Decide < 0 || q.Decide >= n {
			return nil, fmt.Errorf("cuda: %s: query %d: decide = %d outside the %d rows of h", op, i, q.Decide, n)
		}
		if len(q.Opts) == 0 {
			return nil, fmt.Errorf("cuda: %s: query %d: no options", op, i)
		}
		rows = append(rows, int32(q.Decide))
	}
	for i, q := range qs {
		for j, o := range q.Opts {
			if o < 0 || o >= n {
				return nil, fmt.Errorf("cuda: %s: query %d: opts[%d] = %d outside the %d rows of h", op, i, j, o, n)
			}
			rows = append(rows, int32(o))
		}
	}
	proj := make([]float32, len(rows)*dp)
	err = b.run(func(s *scope) error {
		rb, err := s.ints(rows)
		if err != nil {
			return err
		}
		out, err := s.temp(4 * int64(len(proj)))
		if err != nil {
			return err
		}
		s.q.args.Reset()
		s.q.args.Ptr(out.Ptr)
		s.q.put(ht.Operand())
		s.q.args.Ptr(rb.Ptr).I32(int32(len(rows))).I32(int32(len(qs)))
		s.q.put(wq.Operand()).put(bq.Operand()).put(wk.Operand()).put(bk.Operand())
		s.q.args.I32(int32(d)).I32(int32(dp))
		if err := s.q.launch("segs", "pointer_proj_q", cudrv.Dim3{X: (len(rows)*dp + 7) / 8, Y: 1, Z: 1}, block256, 0); err != nil {
			return err
		}
		return s.q.Download(unsafe.Slice((*byte)(unsafe.Pointer(&proj[0])), 4*len(proj)), out)
	})
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(qs))
	next := len(qs)
	for i, q := range qs {
		out[i] = pointerSoftmax(proj[i*dp:(i+1)*dp], proj[next*dp:(next+len(q.Opts))*dp], dp, p)
		next += len(q.Opts)
	}
	return out, nil
}

// pointerSoftmax returns softmax_j((x_j·x_q)·Scale/Temperature) for the query projection xq and the option
// projections keys ([opts, dp]), in the order of operations of Pointer.
func pointerSoftmax(xq, keys []float32, dp int, p *tensor.PointerHead) []float32 {
	temp := p.Temperature
	if temp == 0 {
		temp = 1
	}
	logits := make([]float32, len(keys)/dp)
	maxv := float32(math.Inf(-1))
	for j := range logits {
		xk := keys[j*dp : (j+1)*dp]
		var z float32
		for i := range xk {
			z += xk[i] * xq[i]
		}
		z *= p.Scale
		if temp != 1 {
			z /= temp
		}
		logits[j] = z
		maxv = max(maxv, z)
	}
	var sum float32
	for j, z := range logits {
		logits[j] = float32(math.Exp(float64(z - maxv)))
		sum += logits[j]
	}
	for j := range logits {
		logits[j] /= sum
	}
	return logits
}
