package layers

import (
	"fmt"

	"github.com/kevgo/kev/deltanet"
	"github.com/kevgo/kev/tensor"
)

// A pass in pieces (Batch.Chunk) runs each layer over its rows a piece at a
// time, so that Batch.Pause may let other work run between two pieces of a
// long pass. Its results have the bits of the pass run whole, because each
// operation's result for a row depends on that row's own inputs alone
// (tensor.Chunked), given what the row sees before it: the embedding, the
// norms and every product are row by row; QKNormRope takes each row's
// position; the convolution reads the K−1 inputs before a row, which a later
// part of a split segment takes from the history its earlier part kept; the
// delta rule splits a segment into chunks of its own from the segment's first
// row, and a piece boundary inside a segment falls on one of them, where the
// earlier part's fp32 state is the state the whole segment's next chunk
// would start from; and attention lays out a segment's keys in blocks from
// its first row and merges them in order, which AttentionTails does with the
// earlier rows' keys whichever rows have queries.

// piece is rows [lo, hi) of a pass that go through a layer together: the
// parts of the pass's segments they hold, in order.
type piece struct {
	lo, hi int
	parts  []part
}

// part is rows [lo, hi) of segment seg of a pass, counted from the segment's
// first row.
type part struct{ seg, lo, hi int }

// planPieces splits a pass's segments, in order, into pieces of at most
// budget rows. A segment that does not fit in what is left of a piece is
// split at a multiple of align rows from its first row (a piece holds at
// least align rows of it), and each of its parts ends its piece. A piece
// also ends at row from (where the rows whose hidden states the pass returns
// start) and holds no empty segment: planPieces returns nil for a segment of
// no rows, or a budget or align below 1.
func planPieces(segs []tensor.Segment, budget, align, from int) []piece {
	if budget < 1 || align < 1 {
		return nil
	}
	var out []piece
	row := 0
	cur := piece{}
	end := func() {
		if len(cur.parts) > 0 {
			out = append(out, cur)
		}
		cur = piece{lo: row, hi: row}
	}
	for s, sg := range segs {
		if sg.Len <= 0 {
			return nil
		}
		if row == from {
			end()
		}
		for off := 0; off < sg.Len; {
			n := sg.Len - off
			if room := budget - (cur.hi - cur.lo); n > room {
				n = room / align * align
				if n == 0 && cur.hi > cur.lo {
					end()
					continue
				}
				n = min(max(n, align), sg.Len-off)
			}
			cur.parts = append(cur.parts, part{seg: s, lo: off, hi: off + n})
			off += n
			row += n
			cur.hi = row
			if n < sg.Len { // a part of a split segment
				end()
			}
		}
	}
	end()
	return out
}

// plan returns the pieces of a pass of n rows in segments segs when it runs
// in pieces of chunk tokens (see Batch.Chunk), or nil when it runs whole.
func (m *Model) plan(chunk int, segs []tensor.Segment, n, from int) []piece {
	if chunk <= 0 || n <= chunk || m.Observe != nil {
		return nil
	}
	if _, ok := m.b.(tensor.Chunked); !ok {
		return nil
	}
	align := 1
	for _, l := range m.layers {
		if l.delta != nil && l.delta.Chunk > 0 {
			align = lcm(align, l.delta.Chunk)
		}
	}
	if plan := planPieces(segs, chunk, align, from); len(plan) > 1 {
		return plan
	}
	return nil
}

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// passPieces is pass for a batched pass in pieces (see plan): the segments
// segs over the rows of ids at positions, their cached prefixes, and the
// States of the new states the pass keeps (nil for those it does not keep:
// segment j is new state j). It returns the final hidden states of rows
// from… .
func (m *Model) passPieces(plan []piece, ids, positions []int32, segs []tensor.Segment, prefixes, states []*State, from int) (tensor.Tensor, error) {
	b := m.b
	cb := b.(tensor.Chunked) // plan checked
	hs, us := make([]tensor.Tensor, len(plan)), make([]tensor.Tensor, len(plan))
	defer func() {
		b.Free(hs...)
		b.Free(us...)
	}()
	for p, pc := range plan {
		var err error
		if hs[p], err = b.Embedding(m.embed, ids[pc.lo:pc.hi]); err != nil {
			return nil, err
		}
		if us[p], err = b.RMSNorm(hs[p], m.layers[0].inNorm, m.eps, m.plusOne); err != nil {
			return nil, err
		}
	}
	last := len(m.layers) - 1
	for i := range m.layers {
		if m.stop != nil && m.stop(i) {
			return nil, ErrStopped
		}
		lr := &layerRun{m: m, cb: cb, i: i, segs: segs, prefixes: prefixes, positions: positions,
			k: make([]tensor.Tensor, len(segs)), v: make([]tensor.Tensor, len(segs)), delta: make([]*deltanet.State, len(segs))}
		err := func() error {
			defer lr.free()
			for p, pc := range plan {
				if p > 0 && m.pause != nil && m.pause(i) {
					return ErrStopped
				}
				// The new states' rows leave the last layer after its mixer (see pass).
				only := i == last && pc.hi <= from
				pre, wo, err := lr.mix(pc, us[p], only)
				b.Free(us[p])
				us[p] = nil
				if err != nil {
					return err
				}
				if only {
					b.Free(hs[p])
					hs[p] = nil
					continue
				}
				h := hs[p]
				hs[p] = nil
				if hs[p], us[p], err = m.mlp(i, pre, wo, h); err != nil {
					return err
				}
			}
			lr.keep(states)
			return nil
		}()
		if err != nil {
			return nil, err
		}
	}
	var rows []tensor.Tensor
	var at []int
	for p, pc := range plan {
		if pc.lo >= from {
			rows, at = append(rows, us[p]), append(at, p)
		}
	}
	if len(rows) == 1 {
		us[at[0]] = nil // the caller's
		return rows[0], nil
	}
	return cb.ConcatRows(rows...)
}

// layerRun is one layer of a pass in pieces: what it carries from a piece to
// the next, per segment: attention's keys and values of the segment's rows so
// far, or the delta rule's state after them (for the segment's later parts,
// for the rows that continue a new state, and for the States kept).
type layerRun struct {
	m         *Model
	cb        tensor.Chunked
	i         int
	segs      []tensor.Segment
	prefixes  []*State
	positions []int32
	k, v      []tensor.Tensor
	delta     []*deltanet.State
}

// carries reports whether segment s's keys or state after part pt are kept
// for later: a new state's (rows continue it, or its State is kept) or a
// split segment's before its last part.
func (lr *layerRun) carries(pt part) bool {
	return lr.segs[pt.seg].From == tensor.FromZero || pt.hi < lr.segs[pt.seg].Len
}

// mix runs the layer's mixer on piece pc's normed rows u and returns its
// output as pass's mixer does; with only set it runs the mixer only for what
// it carries (pre and wo nil). It does not free u.
func (lr *layerRun) mix(pc piece, u tensor.Tensor, only bool) (pre, wo tensor.Tensor, err error) {
	l := lr.m.layers[lr.i]
	if l.attn != nil {
		return lr.attend(l.attn, pc, u, only)
	}
	return lr.deltaRule(l.delta, pc, u, only)
}

// attend is mix for an attention layer: the piece's queries see each
// segment's prefix (a cached one, or the whole new state it continues) and
// the segment's rows up to their own, those of earlier pieces included.
func (lr *layerRun) attend(a *Attention, pc piece, u tensor.Tensor, only bool) (pre, wo tensor.Tensor, err error) {
	b := lr.m.b
	q, k, v, gate, err := a.project(u, lr.positions[pc.lo:pc.hi])
	if err != nil {
		return nil, nil, err
	}
	var owned []tensor.Tensor // freed when the piece is done
	defer func() { b.Free(owned...) }()
	owned = append(owned, q, k, v)
	if only {
		b.Free(gate)
		gate = nil
	}
	kps, vps := make([]tensor.Tensor, 0, len(lr.prefixes)), make([]tensor.Tensor, 0, len(lr.prefixes))
	for _, p := range lr.prefixes {
		kps, vps = append(kps, p.layers[lr.i].k), append(vps, p.layers[lr.i].v)
	}
	asPrefix := map[int]int{} // a new state continued → its index in kps
	var ks, vs []tensor.Tensor
	segs := make([]tensor.Segment, 0, len(pc.parts))
	skip := make([]int, 0, len(pc.parts))
	off := 0
	for _, pt := range pc.parts {
		n := pt.hi - pt.lo
		kp, err := lr.cb.SliceRows(k, off, off+n)
		if err != nil {
			b.Free(gate)
			return nil, nil, err
		}
		vp, err := lr.cb.SliceRows(v, off, off+n)
		if err != nil {
			b.Free(gate, kp)
			return nil, nil, err
		}
		off += n
		sk, sv := kp, vp
		if pt.lo > 0 { // the segment's keys so far, then the part's
			sk, err = lr.cb.ConcatRows(lr.k[pt.seg], kp)
			if err == nil {
				if sv, err = lr.cb.ConcatRows(lr.v[pt.seg], vp); err != nil {
					b.Free(sk)
				}
			}
			b.Free(kp, vp)
			if err != nil {
				b.Free(gate)
				return nil, nil, err
			}
		}
		if lr.carries(pt) {
			b.Free(lr.k[pt.seg], lr.v[pt.seg])
			lr.k[pt.seg], lr.v[pt.seg] = sk, sv
		} else {
			owned = append(owned, sk, sv)
		}
		ks, vs = append(ks, sk), append(vs, sv)
		sg := tensor.Segment{Len: pt.hi}
		switch from := lr.segs[pt.seg]; from.From {
		case tensor.FromPrefix:
			sg.From, sg.Index = tensor.FromPrefix, from.Index
		case tensor.FromSegment: // the whole new state, all of it in this piece or earlier ones
			j, ok := asPrefix[from.Index]
			if !ok {
				if lr.k[from.Index] == nil {
					b.Free(gate)
					return nil, nil, fmt.Errorf("layers: a pass in pieces: segment %d continues segment %d before its keys", pt.seg, from.Index)
				}
				j = len(kps)
				asPrefix[from.Index] = j
				kps, vps = append(kps, lr.k[from.Index]), append(vps, lr.v[from.Index])
			}
			sg.From, sg.Index = tensor.FromPrefix, j
		}
		segs, skip = append(segs, sg), append(skip, pt.lo)
	}
	if only {
		return nil, nil, nil
	}
	kc, vc := ks[0], vs[0]
	if len(ks) > 1 {
		if kc, err = lr.cb.ConcatRows(ks...); err != nil {
			b.Free(gate)
			return nil, nil, err
		}
		owned = append(owned, kc)
		if vc, err = lr.cb.ConcatRows(vs...); err != nil {
			b.Free(gate)
			return nil, nil, err
		}
		owned = append(owned, vc)
	}
	att, err := lr.cb.AttentionTails(q, kc, vc, kps, vps, segs, skip, a.attn)
	if err != nil {
		b.Free(gate)
		return nil, nil, err
	}
	return a.output(att, gate)
}

// deltaRule is mix for a Gated DeltaNet layer: a part continues the state its
// segment's earlier part left, or what the segment continues (a cached state,
// or the new state, in this piece or an earlier one).
func (lr *layerRun) deltaRule(d *deltanet.Layer, pc piece, u tensor.Tensor, only bool) (pre, wo tensor.Tensor, err error) {
	states := make([]*deltanet.State, 0, len(lr.prefixes)+len(pc.parts))
	for _, p := range lr.prefixes {
		states = append(states, p.layers[lr.i].delta)
	}
	carried := func(s int) (int, error) {
		if lr.delta[s] == nil {
			return 0, fmt.Errorf("layers: a pass in pieces: segment %d has no state to continue", s)
		}
		states = append(states, lr.delta[s])
		return len(states) - 1, nil
	}
	here := map[int]int{} // segment → its part's index in the piece
	segs := make([]tensor.Segment, len(pc.parts))
	for k, pt := range pc.parts {
		here[pt.seg] = k
		sg := tensor.Segment{Len: pt.hi - pt.lo, Keep: lr.carries(pt)}
		from := lr.segs[pt.seg]
		switch {
		case pt.lo > 0:
			sg.From = tensor.FromPrefix
			sg.Index, err = carried(pt.seg)
		case from.From == tensor.FromPrefix:
			sg.From, sg.Index = tensor.FromPrefix, from.Index
		case from.From == tensor.FromSegment:
			if j, ok := here[from.Index]; ok && pc.parts[j].lo == 0 && pc.parts[j].hi == lr.segs[from.Index].Len {
				sg.From, sg.Index = tensor.FromSegment, j
			} else {
				sg.From = tensor.FromPrefix
				sg.Index, err = carried(from.Index)
			}
		}
		if err != nil {
			return nil, nil, err
		}
		segs[k] = sg
	}
	n, kept, err := d.ForwardSegmentsGated(u, states, segs)
	if err != nil {
		return nil, nil, err
	}
	for k, pt := range pc.parts {
		if k < len(kept) && kept[k] != nil {
			old := lr.delta[pt.seg]
			lr.delta[pt.seg] = kept[k]
			old.Free(lr.m.b)
		}
	}
	if only {
		lr.m.b.Free(n)
		return nil, nil, nil
	}
	return n, d.OutProj(), nil
}

// keep hands the new states' keys and values, or delta rule states, to their
// States (nil: not kept).
func (lr *layerRun) keep(states []*State) {
	for j, s := range states {
		if s == nil {
			continue
		}
		s.layers[lr.i].k, s.layers[lr.i].v, s.layers[lr.i].delta = lr.k[j], lr.v[j], lr.delta[j]
		lr.k[j], lr.v[j], lr.delta[j] = nil, nil, nil
	}
}

// free releases what the layer carried that no State took.
func (lr *layerRun) free() {
	b := lr.m.b
	b.Free(lr.k...)
	b.Free(lr.v...)
	for _, d := range lr.delta {
		d.Free(b)
	}
	clear(lr.k)
	clear(lr.v)
	clear(lr.delta)
}
