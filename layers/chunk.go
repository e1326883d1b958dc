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
// its first row and merges them in order whichever rows have queries
// (AttentionRows: a piece's queries against every key of the layer).

// piece is rows [lo, hi) of a pass that go through a layer together: the
// parts of the pass's segments they hold, in order.
type piece struct {
	lo, hi int
	parts  []part
}

// part is rows [lo, hi) of segment seg of a pass, counted from the segment's
// first row.
type part struct{ seg, lo, hi int }

// planPieces splits a pass's segments, in order, into pieces that cost at
// most budget each, where row r of segment s (counted from the segment's
// first row) costs cost(s, r) (nil: 1, so that budget counts rows). A piece
// holds at least one row, and a segment that does not fit in what is left
// of a piece is split after a multiple of align rows from its first row (a
// piece holds at least align rows of it), each of its parts ending its
// piece. A piece also ends at row from (where the rows whose hidden states
// the pass returns start). It returns nil for a segment of no rows, or a
// budget or align below 1.
func planPieces(segs []tensor.Segment, budget, align, from int, cost func(s, r int) int) []piece {
	if budget < 1 || align < 1 {
		return nil
	}
	if cost == nil {
		cost = func(int, int) int { return 1 }
	}
	var out []piece
	row, used := 0, 0
	cur := piece{}
	end := func() {
		if len(cur.parts) > 0 {
			out = append(out, cur)
		}
		cur, used = piece{lo: row, hi: row}, 0
	}
	for s, sg := range segs {
		if sg.Len <= 0 {
			return nil
		}
		if row == from {
			end()
		}
		for off := 0; off < sg.Len; {
			n, c := 0, 0
			for off+n < sg.Len {
				rc := cost(s, off+n)
				if used+c+rc > budget && used+c > 0 {
					break
				}
				n, c = n+1, c+rc
			}
			if off+n < sg.Len { // split: after a multiple of align rows
				n = n / align * align
				if n == 0 && used > 0 {
					end()
					continue
				}
				n = min(max(n, align), sg.Len-off)
				c = 0
				for r := off; r < off+n; r++ {
					c += cost(s, r)
				}
			}
			cur.parts = append(cur.parts, part{seg: s, lo: off, hi: off + n})
			off += n
			row += n
			used += c
			cur.hi = row
			if n < sg.Len { // a part of a split segment
				end()
			}
		}
	}
	end()
	return out
}

// planLayer returns the pieces of layer i of a pass in segments segs of n
// rows when its pieces hold chunk tokens (0: the layer runs whole, in one
// piece, the last layer's ended at from), where seen[s] is how many keys
// segment s's queries see before its own rows. A Gated DeltaNet layer's pieces hold chunk rows, split at
// multiples of its chunk; an attention layer's hold fewer where their
// queries see many keys: a query row costs as much as keysPerToken keys, and
// a piece as much as chunk rows that see none.
func (m *Model) planLayer(i, chunk int, segs []tensor.Segment, seen []int, n, from int) []piece {
	if i < len(m.layers)-1 {
		from = 0 // only the last layer's rows go on in two parts (see pass)
	}
	switch l := m.layers[i]; {
	case chunk <= 0 || chunk >= n:
		return planPieces(segs, n, 1, from, nil)
	case l.attn != nil:
		kpt := m.keysPerToken()
		return planPieces(segs, chunk*kpt, 1, from, func(s, r int) int { return kpt + seen[s] + r + 1 })
	case l.delta.Chunk > 0:
		return planPieces(segs, chunk, l.delta.Chunk, from, nil)
	default:
		return planPieces(segs, chunk, 1, from, nil)
	}
}

// keysPerToken is how many keys a query of an attention layer sees for the
// arithmetic of one token through the layer's weights: a token costs two
// operations a weight, a query's key four a head dimension of each head
// (its score, and its value's share of the output).
func (m *Model) keysPerToken() int {
	c := &m.Config
	hd := c.NumHeads * c.HeadDim
	if hd <= 0 {
		return 1
	}
	q := hd
	if c.AttnOutputGate {
		q *= 2
	}
	weights := c.HiddenSize*(q+2*c.NumKVHeads*c.HeadDim) + hd*c.HiddenSize + 3*c.HiddenSize*c.IntermediateSize
	return max(1, weights/(2*hd))
}

// passPieces is pass for a batched pass in pieces: before each layer chunk
// says how many tokens its pieces hold (see Batch.Chunk and planLayer). The
// segments segs cover the rows of ids at positions; prefixes are their cached
// states, and states the States of the new states the pass keeps (nil for
// those it does not keep: segment j is new state j). It returns the final
// hidden states of rows from… .
func (m *Model) passPieces(chunk func(layer int) int, ids, positions []int32, segs []tensor.Segment, prefixes, states []*State, from int) (tensor.Tensor, error) {
	b := m.b
	cb := b.(tensor.Chunked)       // the caller checked
	seen := make([]int, len(segs)) // the keys a segment's queries see before its own rows
	for s, sg := range segs {
		switch sg.From {
		case tensor.FromPrefix:
			seen[s] = prefixes[sg.Index].Len
		case tensor.FromSegment:
			seen[s] = segs[sg.Index].Len
		}
	}
	// The residual stream and its norm, in the pieces of the layer that made
	// them (have; the embedding's: one piece).
	h, err := b.Embedding(m.embed, ids)
	if err != nil {
		return nil, err
	}
	hs := []tensor.Tensor{h}
	us := []tensor.Tensor{nil}
	defer func() {
		b.Free(hs...)
		b.Free(us...)
	}()
	if us[0], err = b.RMSNorm(h, m.layers[0].inNorm, m.eps, m.plusOne); err != nil {
		return nil, err
	}
	have := []piece{{lo: 0, hi: len(ids)}}
	for i := range m.layers {
		if m.stop != nil && m.stop(i) {
			return nil, ErrStopped
		}
		size := chunk(i)
		plan := m.planLayer(i, size, segs, seen, len(ids), from)
		if plan == nil {
			return nil, fmt.Errorf("layers: a pass in pieces: no pieces for layer %d", i)
		}
		pause := m.pause
		if size <= 0 {
			pause = nil // a layer run whole (its last piece apart) has nothing to pause for
		}
		if a := m.layers[i].attn; a != nil {
			hs, us, err = m.attentionPieces(cb, a, i, plan, have, hs, us, positions, segs, prefixes, states, from, pause)
		} else {
			hs, us, err = m.deltaPieces(cb, i, plan, have, hs, us, segs, prefixes, states, from, pause)
		}
		if err != nil {
			return nil, err
		}
		have = plan
	}
	var rows []tensor.Tensor
	at := -1
	for p, pc := range have {
		if pc.lo >= from {
			rows = append(rows, us[p])
			at = p
		}
	}
	if len(rows) == 1 {
		us[at] = nil // the caller's
		return rows[0], nil
	}
	return cb.ConcatRows(rows...)
}

// attentionPieces runs attention layer i in the pieces of plan on the
// residual stream hs and its norm us (in the pieces of have), and returns
// them after the layer, in the pieces of plan (nil for a piece of the last
// layer whose rows end before from). The layer's queries, keys and values
// are projected for every row at once (a product by rows), then each piece's
// queries see every key of the layer (AttentionRows). It frees what it is
// given, also on an error.
func (m *Model) attentionPieces(cb tensor.Chunked, a *Attention, i int, plan, have []piece, hs, us []tensor.Tensor, positions []int32, segs []tensor.Segment, prefixes, states []*State, from int, pause func(layer int) bool) (_, _ []tensor.Tensor, err error) {
	b := m.b
	defer func() {
		if err != nil {
			b.Free(hs...)
			b.Free(us...)
			hs, us = nil, nil
		}
	}()
	u := us[0]
	if len(us) > 1 {
		if u, err = cb.ConcatRows(us...); err != nil {
			return nil, nil, err
		}
		b.Free(us...)
	}
	us = make([]tensor.Tensor, len(plan))
	q, k, v, gate, err := a.project(u, positions)
	b.Free(u)
	if err != nil {
		return nil, nil, err
	}
	defer func() { b.Free(q, k, v, gate) }()
	if !samePieces(have, plan) {
		if hs, err = m.repiece(cb, hs, plan); err != nil {
			return nil, nil, err
		}
	}
	kps, vps := make([]tensor.Tensor, len(prefixes)), make([]tensor.Tensor, len(prefixes))
	for j, p := range prefixes {
		kps[j], vps[j] = p.layers[i].k, p.layers[i].v
	}
	starts := make([]int, len(segs)+1)
	for s, sg := range segs {
		starts[s+1] = starts[s] + sg.Len
	}
	slice := func(x *tensor.Tensor, pc piece) (tensor.Tensor, error) {
		switch {
		case *x == nil:
			return nil, nil
		case pc.lo == 0 && pc.hi == starts[len(segs)]: // all of it: handed over
			y := *x
			*x = nil
			return y, nil
		}
		return cb.SliceRows(*x, pc.lo, pc.hi)
	}
	for p, pc := range plan {
		if p > 0 && pause != nil && pause(i) {
			return nil, nil, ErrStopped
		}
		if i == len(m.layers)-1 && pc.hi <= from { // the new states' rows leave the last layer here (see pass)
			b.Free(hs[p])
			hs[p] = nil
			continue
		}
		lo, hi := make([]int, len(segs)), make([]int, len(segs))
		for _, pt := range pc.parts {
			lo[pt.seg], hi[pt.seg] = pt.lo, pt.hi
		}
		qp, err := slice(&q, pc)
		if err != nil {
			return nil, nil, err
		}
		att, err := cb.AttentionRows(qp, k, v, kps, vps, segs, lo, hi, a.attn)
		b.Free(qp)
		if err != nil {
			return nil, nil, err
		}
		gp, err := slice(&gate, pc)
		if err != nil {
			b.Free(att)
			return nil, nil, err
		}
		pre, wo, err := a.output(att, gp)
		if err != nil {
			return nil, nil, err
		}
		h := hs[p]
		hs[p] = nil
		if hs[p], us[p], err = m.mlp(i, pre, wo, h); err != nil {
			return nil, nil, err
		}
	}
	for j, s := range states {
		if s == nil {
			continue
		}
		if s.layers[i].k, err = cb.SliceRows(k, starts[j], starts[j+1]); err == nil {
			s.layers[i].v, err = cb.SliceRows(v, starts[j], starts[j+1])
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return hs, us, nil
}

// deltaPieces runs Gated DeltaNet layer i in the pieces of plan as
// attentionPieces runs an attention layer: each piece's rows continue the
// states the layer's earlier pieces left (see layerRun).
func (m *Model) deltaPieces(cb tensor.Chunked, i int, plan, have []piece, hs, us []tensor.Tensor, segs []tensor.Segment, prefixes, states []*State, from int, pause func(layer int) bool) (_, _ []tensor.Tensor, err error) {
	b := m.b
	defer func() {
		if err != nil {
			b.Free(hs...)
			b.Free(us...)
			hs, us = nil, nil
		}
	}()
	if !samePieces(have, plan) {
		if hs, err = m.repiece(cb, hs, plan); err != nil {
			return nil, nil, err
		}
		if us, err = m.repiece(cb, us, plan); err != nil {
			return nil, nil, err
		}
	}
	lr := &layerRun{m: m, i: i, segs: segs, prefixes: prefixes, delta: make([]*deltanet.State, len(segs))}
	defer lr.free()
	d := m.layers[i].delta
	for p, pc := range plan {
		if p > 0 && pause != nil && pause(i) {
			return nil, nil, ErrStopped
		}
		// The new states' rows leave the last layer after its mixer (see pass).
		only := i == len(m.layers)-1 && pc.hi <= from
		pre, err := lr.deltaRule(d, pc, us[p])
		b.Free(us[p])
		us[p] = nil
		if err != nil {
			return nil, nil, err
		}
		h := hs[p]
		hs[p] = nil
		if only {
			b.Free(pre, h)
			continue
		}
		if hs[p], us[p], err = m.mlp(i, pre, d.OutProj(), h); err != nil {
			return nil, nil, err
		}
	}
	for j, s := range states {
		if s != nil {
			s.layers[i].delta, lr.delta[j] = lr.delta[j], nil
		}
	}
	return hs, us, nil
}

// samePieces reports whether two plans cut a pass's rows at the same rows.
func samePieces(a, b []piece) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].lo != b[i].lo || a[i].hi != b[i].hi {
			return false
		}
	}
	return true
}

// repiece returns the rows of xs (pieces of a pass's rows, in order) cut in
// the pieces of plan, and frees xs, also on an error.
func (m *Model) repiece(cb tensor.Chunked, xs []tensor.Tensor, plan []piece) ([]tensor.Tensor, error) {
	defer m.b.Free(xs...)
	all, err := cb.ConcatRows(xs...)
	if err != nil {
		return nil, err
	}
	defer m.b.Free(all)
	out := make([]tensor.Tensor, len(plan))
	for p, pc := range plan {
		if out[p], err = cb.SliceRows(all, pc.lo, pc.hi); err != nil {
			m.b.Free(out...)
			return nil, err
		}
	}
	return out, nil
}

// layerRun is one Gated DeltaNet layer of a pass in pieces: what it carries
// from a piece to the next, per segment, the state after the segment's rows
// so far (for the segment's later parts, for the rows that continue a new
// state, and for the States kept).
type layerRun struct {
	m        *Model
	i        int
	segs     []tensor.Segment
	prefixes []*State
	delta    []*deltanet.State
}

// carries reports whether segment s's state after part pt is kept for
// later: a new state's (rows continue it, or its State is kept) or a split
// segment's before its last part.
func (lr *layerRun) carries(pt part) bool {
	return lr.segs[pt.seg].From == tensor.FromZero || pt.hi < lr.segs[pt.seg].Len
}

// deltaRule runs the layer's mixer on piece pc's normed rows u (it does not
// free u) and returns its gated output n (Forward's is MatMul(n, OutProj())).
// A part continues the state its segment's earlier part left, or what the
// segment continues: a cached state, or the new state, in this piece or an
// earlier one.
func (lr *layerRun) deltaRule(d *deltanet.Layer, pc piece, u tensor.Tensor) (tensor.Tensor, error) {
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
	var err error
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
			return nil, err
		}
		segs[k] = sg
	}
	n, kept, err := d.ForwardSegmentsGated(u, states, segs)
	if err != nil {
		return nil, err
	}
	for k, pt := range pc.parts {
		if k < len(kept) && kept[k] != nil {
			old := lr.delta[pt.seg]
			lr.delta[pt.seg] = kept[k]
			old.Free(lr.m.b)
		}
	}
	return n, nil
}

// free releases the states the layer carried that no State took.
func (lr *layerRun) free() {
	for _, d := range lr.delta {
		d.Free(lr.m.b)
	}
	clear(lr.delta)
}
