package cpu

import (
	"fmt"

	"github.com/kevgo/kev/tensor"
)

// A row's bits never depend on the rows beside it in the CPU backend's
// operations (see MatMul, attend, runDelta), so a pass may run in pieces.
var _ tensor.Chunked = (*Backend)(nil)

// AttentionRows is AttentionSegments for some rows of its segments: segment
// i's queries are its rows lo[i]…hi[i]−1, and its own keys every row,
// transposed in the blocks that AttentionSegments lays out from its first
// row. The transposed keys stay with k for the next call on it (the pieces of
// a pass), until k is freed.
func (b *Backend) AttentionRows(q, k, v tensor.Tensor, kPrefixes, vPrefixes []tensor.Tensor, segs []tensor.Segment, lo, hi []int, c tensor.AttentionConfig) (tensor.Tensor, error) {
	const op = "AttentionRows"
	if c.Heads <= 0 || c.KVHeads <= 0 || c.HeadDim <= 0 || c.Heads%c.KVHeads != 0 {
		return nil, fmt.Errorf("cpu: %s: bad config %+v", op, c)
	}
	kvw := c.KVHeads * c.HeadDim
	kt, err := matrix(op, "k", k, -1, kvw)
	if err != nil {
		return nil, err
	}
	n := kt.shape[0]
	vt, err := matrix(op, "v", v, n, kvw)
	if err != nil {
		return nil, err
	}
	if len(lo) != len(segs) || len(hi) != len(segs) {
		return nil, fmt.Errorf("cpu: %s: %d and %d row ranges for %d segments", op, len(lo), len(hi), len(segs))
	}
	if len(kPrefixes) != len(vPrefixes) {
		return nil, fmt.Errorf("cpu: %s: %d key prefixes, %d value prefixes", op, len(kPrefixes), len(vPrefixes))
	}
	starts, ls, err := checkSegments(op, segs, n, len(kPrefixes))
	if err != nil {
		return nil, err
	}
	queries := 0
	for i := range segs {
		if lo[i] < 0 || hi[i] < lo[i] || hi[i] > ls[i] {
			return nil, fmt.Errorf("cpu: %s: rows [%d, %d) of segment %d, which has %d", op, lo[i], hi[i], i, ls[i])
		}
		queries += hi[i] - lo[i]
	}
	qt, err := matrix(op, "q", q, queries, c.Heads*c.HeadDim)
	if err != nil {
		return nil, err
	}
	kps, vps, err := prefixRows(op, kPrefixes, vPrefixes, kvw)
	if err != nil {
		return nil, err
	}
	ks, vs := kt.float32s(), vt.float32s()
	as := make([]attnSeg, len(segs))
	row := 0
	for i, s := range segs {
		as[i] = attnSeg{start: row, n: hi[i] - lo[i], kstart: starts[i], keys: ls[i], skip: lo[i]}
		row += as[i].n
		as[i].prefix(s, kps, vps, ks, vs, starts, ls, kvw)
	}
	return b.attend(qt.float32s(), ks, vs, queries, as, c, kt), nil
}

// ConcatRows stacks float32 matrices of equal widths by rows.
func (b *Backend) ConcatRows(xs ...tensor.Tensor) (tensor.Tensor, error) {
	const op = "ConcatRows"
	if len(xs) == 0 {
		return nil, fmt.Errorf("cpu: %s: no matrices", op)
	}
	ts := make([]*Tensor, len(xs))
	rows, w := 0, -1
	for i, x := range xs {
		t, err := matrix(op, fmt.Sprintf("xs[%d]", i), x, -1, w)
		if err != nil {
			return nil, err
		}
		if t.dtype != tensor.F32 {
			return nil, &tensor.ShapeError{Op: op, Arg: fmt.Sprintf("xs[%d]", i), Shape: t.shape, Want: "an F32 matrix"}
		}
		ts[i], w = t, t.shape[1]
		rows += t.shape[0]
	}
	out := newF32Full(rows, w)
	off := 0
	for _, t := range ts {
		off += copy(out.f32[off:], t.float32s()[:t.shape[0]*w])
	}
	return out, nil
}
