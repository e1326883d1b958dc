package layers

import (
	"fmt"
	"math"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// Attention is a full-attention mixer. Qwen3.5's is gated: per-head
// [query | gate] projection, (1+w) RMSNorm of query and key heads, partial
// NeoX rotary, causal grouped-query softmax attention scaled by
// 1/√head_dim, output multiplied by sigmoid(gate), then o_proj. Qwen3's has
// no gate, w RMSNorm of query and key heads and full rotary; Qwen2's adds
// q/k/v biases and has no query/key norm.
type Attention struct {
	b            tensor.Backend
	rope         tensor.RopeConfig
	attn         tensor.AttentionConfig
	qkv          tensor.Tensor // [q_proj; k_proj; v_proj]
	qkvBias      tensor.Tensor // [q_proj.bias; k_proj.bias; v_proj.bias] fp32, or nil
	qNorm, kNorm tensor.Tensor // [D] fp32; nil without a query/key norm
	o            tensor.Tensor // [d, H·D]
	oBias        tensor.Tensor // [d] fp32, or nil
}

func newAttention(l *loader, c *qwen35.Config, prefix string) *Attention {
	d, h, kv, hd := c.HiddenSize, c.NumHeads, c.NumKVHeads, c.HeadDim
	qRows := h * hd
	if c.AttnOutputGate {
		qRows *= 2
	}
	a := &Attention{
		b: l.b,
		rope: tensor.RopeConfig{Heads: h, KVHeads: kv, HeadDim: hd, RotaryDim: c.RotaryDim(), Theta: c.RopeTheta,
			Eps: float32(c.RMSNormEps), Gated: c.AttnOutputGate},
		attn: tensor.AttentionConfig{Heads: h, KVHeads: kv, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))},
		qkv: l.product([]string{prefix + "q_proj.weight", prefix + "k_proj.weight", prefix + "v_proj.weight"},
			[]int{qRows, kv * hd, kv * hd}, d),
		o: l.product([]string{prefix + "o_proj.weight"}, []int{d}, h*hd),
	}
	switch {
	case !c.QKNorm():
		a.rope.Norm = tensor.QKNormNone
	case !c.PlusOneNorm():
		a.rope.Norm = tensor.QKNormPlain
	}
	if c.QKNorm() {
		a.qNorm = l.vector(prefix+"q_norm.weight", hd)
		a.kNorm = l.vector(prefix+"k_norm.weight", hd)
	}
	if c.QKVBias {
		a.qkvBias = l.vectors([]string{prefix + "q_proj.bias", prefix + "k_proj.bias", prefix + "v_proj.bias"},
			[]int{qRows, kv * hd, kv * hd})
	}
	if c.OBias {
		a.oBias = l.vector(prefix+"o_proj.bias", d)
	}
	return a
}

// forward mixes u [N, d] at the given positions, attending to the cached
// prefix (kPrefix, vPrefix, may be nil) and, per segment, to its own rows.
// It returns the output as pre and wo (see mix) and this call's keys
// (post-norm, post-rotary) and values, which become the cache of a prefill.
func (a *Attention) forward(u tensor.Tensor, positions []int32, kPrefix, vPrefix tensor.Tensor, lens []int) (pre, wo, k, v tensor.Tensor, err error) {
	return a.mix(u, positions, 0, func(q, k, v tensor.Tensor) (tensor.Tensor, error) {
		return a.b.Attention(q, k, v, kPrefix, vPrefix, lens, a.attn)
	})
}

// forwardSegments is forward over segments that each continue their own
// prefix (see tensor.Batched.AttentionSegments). With from > 0 only rows
// from… are mixed (pre has their rows alone): from is where a segment
// starts, every segment before it starts FromZero, and k and v still cover
// every row. The segments from there on attend as they would in the whole
// call: one continuing segment Index of the call sees that segment's keys
// and values, copied out as a prefix.
func (a *Attention) forwardSegments(bb tensor.Batched, u tensor.Tensor, positions []int32, kPrefixes, vPrefixes []tensor.Tensor, segs []tensor.Segment, from int) (pre, wo, k, v tensor.Tensor, err error) {
	return a.mix(u, positions, from, func(q, k, v tensor.Tensor) (tensor.Tensor, error) {
		if from == 0 {
			return bb.AttentionSegments(q, k, v, kPrefixes, vPrefixes, segs, a.attn)
		}
		return a.attendFrom(bb, q, k, v, kPrefixes, vPrefixes, segs, from)
	})
}

// attendFrom runs the segments starting at row from or later (q holds their
// rows alone; k and v every row of the call), their FromSegment segments
// turned into FromPrefix ones over copies of the segments they continue.
func (a *Attention) attendFrom(bb tensor.Batched, q, k, v tensor.Tensor, kPrefixes, vPrefixes []tensor.Tensor, segs []tensor.Segment, from int) (att tensor.Tensor, err error) {
	b := a.b
	var owned []tensor.Tensor
	defer func() { b.Free(owned...) }()
	slice := func(x tensor.Tensor, lo, hi int) tensor.Tensor {
		if err != nil {
			return nil
		}
		var y tensor.Tensor
		if y, err = bb.SliceRows(x, lo, hi); err == nil {
			owned = append(owned, y)
		}
		return y
	}
	n := k.Shape()[0]
	kps := append([]tensor.Tensor(nil), kPrefixes...)
	vps := append([]tensor.Tensor(nil), vPrefixes...)
	starts := make([]int, len(segs))
	asPrefix := map[int]int{} // segment → its index in kps
	var rows []tensor.Segment
	off := 0
	for i, s := range segs {
		starts[i] = off
		off += s.Len
		if starts[i] < from {
			if s.From != tensor.FromZero || off > from {
				return nil, fmt.Errorf("layers: attention from row %d: segment %d (rows %d…%d, %v) is not a new state before it", from, i, starts[i], off, s.From)
			}
			continue
		}
		if s.From == tensor.FromSegment {
			j, ok := asPrefix[s.Index]
			if !ok {
				j = len(kps)
				asPrefix[s.Index] = j
				lo, hi := starts[s.Index], starts[s.Index]+segs[s.Index].Len
				kps, vps = append(kps, slice(k, lo, hi)), append(vps, slice(v, lo, hi))
			}
			s.From, s.Index = tensor.FromPrefix, j
		}
		rows = append(rows, s)
	}
	kr, vr := slice(k, from, n), slice(v, from, n)
	if err != nil {
		return nil, err
	}
	return bb.AttentionSegments(q, kr, vr, kps, vps, rows, a.attn)
}

// projectBiased returns the query, key and value blocks of u·qkvᵀ + bias.
func (a *Attention) projectBiased(u tensor.Tensor, qw, kvw int) ([]tensor.Tensor, error) {
	b := a.b
	proj, err := b.MatMul(u, a.qkv)
	if err != nil {
		return nil, err
	}
	biased, err := b.AddBias(proj, a.qkvBias)
	b.Free(proj)
	if err != nil {
		return nil, err
	}
	defer b.Free(biased)
	return b.SplitCols(biased, qw, kvw, kvw)
}

// mix projects u, prepares queries and keys, runs attend, gates its output
// and projects it back; it returns the output, keys and values. The output is
// MatMul(pre, wo) when wo is not nil (the projection left to the caller, to
// fuse it with what follows), else pre itself (an output bias: projected here).
func (a *Attention) mix(u tensor.Tensor, positions []int32, from int, attend func(q, k, v tensor.Tensor) (tensor.Tensor, error)) (pre, wo, k, v tensor.Tensor, err error) {
	b := a.b
	q, k, v, gate, err := a.project(u, positions)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if from > 0 { // the rows mixed: from… (see forwardSegments)
		if q, gate, err = a.rowsFrom(q, gate, from); err != nil {
			b.Free(k, v)
			return nil, nil, nil, nil, err
		}
	}
	att, err := attend(q, k, v)
	b.Free(q)
	if err != nil {
		b.Free(k, v, gate)
		return nil, nil, nil, nil, err
	}
	if pre, wo, err = a.output(att, gate); err != nil {
		b.Free(k, v)
		return nil, nil, nil, nil, err
	}
	return pre, wo, k, v, nil
}

// project returns u's queries and keys (normed, rotated), values and gate
// (nil for ungated attention).
func (a *Attention) project(u tensor.Tensor, positions []int32) (q, k, v, gate tensor.Tensor, err error) {
	b := a.b
	qw, kvw := a.rope.Heads*a.rope.HeadDim, a.rope.KVHeads*a.rope.HeadDim
	if a.rope.Gated {
		qw *= 2
	}
	var parts []tensor.Tensor
	if a.qkvBias == nil {
		parts, err = b.MatMulSplit(u, a.qkv, qw, kvw, kvw)
	} else {
		parts, err = a.projectBiased(u, qw, kvw)
	}
	if err != nil {
		return nil, nil, nil, nil, err
	}
	qg, kRaw, v := parts[0], parts[1], parts[2]
	q, k, gate, err = b.QKNormRope(qg, kRaw, a.qNorm, a.kNorm, positions, a.rope)
	b.Free(qg, kRaw)
	if err != nil {
		b.Free(v)
		return nil, nil, nil, nil, err
	}
	return q, k, v, gate, nil
}

// output gates attention's output att (gate nil: ungated) and returns it as
// pre and wo (see mix). It frees att and gate, also on an error.
func (a *Attention) output(att, gate tensor.Tensor) (pre, wo tensor.Tensor, err error) {
	b := a.b
	if gate != nil {
		gated, err := b.SigmoidGate(att, gate)
		b.Free(att, gate)
		if err != nil {
			return nil, nil, err
		}
		att = gated
	}
	if a.oBias == nil {
		return att, a.o, nil
	}
	out, err := b.MatMul(att, a.o)
	b.Free(att)
	if err == nil {
		biased, berr := b.AddBias(out, a.oBias)
		b.Free(out)
		out, err = biased, berr
	}
	if err != nil {
		return nil, nil, err
	}
	return out, nil, nil
}

// rowsFrom returns rows from… of q and of gate (nil stays nil), freeing q
// and gate, also on an error.
func (a *Attention) rowsFrom(q, gate tensor.Tensor, from int) (tensor.Tensor, tensor.Tensor, error) {
	b := a.b
	defer b.Free(q, gate)
	bb, ok := b.(tensor.Batched)
	if !ok {
		return nil, nil, fmt.Errorf("layers: attention from row %d needs a backend with tensor.Batched", from)
	}
	qr, err := bb.SliceRows(q, from, q.Shape()[0])
	if err != nil || gate == nil {
		return qr, nil, err
	}
	gr, err := bb.SliceRows(gate, from, gate.Shape()[0])
	if err != nil {
		b.Free(qr)
		return nil, nil, err
	}
	return qr, gr, nil
}
