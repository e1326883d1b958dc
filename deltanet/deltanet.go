// Package deltanet is the Gated DeltaNet token mixer of Qwen3.5
// ("linear_attention" layers), written against tensor.Backend.
//
// Per row of T tokens, with input u [T, d]:
//
//	X, z, b, a = u·[W_qkv; W_z; W_b; W_a]ᵀ     X = [Q | K | V] flat
//	C          = silu(causal depthwise conv(X)) over all channels, kernel K,
//	             continuing the cached last K−1 inputs
//	β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias)
//	q̂ = l2norm(q)/√d_k, k̂ = l2norm(k); value head h reads key head h/(H_v/H_k)
//	S ← exp(g)·S; S ← S + k̂(β(v − Sᵀk̂))ᵀ; o = Sᵀq̂   (fp32 state [H_v, d_k, d_v])
//	y = RMSNorm(o; w)·silu(z) per head (plain w); out = y·W_outᵀ
//
// Prefill uses the chunked form (chunk 64); setting Layer.Chunk to 0 selects
// the token-by-token recurrent form, which computes the same function.
package deltanet

import (
	"fmt"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// DefaultChunk is the chunk length of the chunked form.
const DefaultChunk = 64

// State is one Gated DeltaNet layer's continuation state.
type State struct {
	Conv tensor.Tensor // [K−1, conv channels]: the last K−1 pre-conv inputs, oldest first
	Rec  tensor.Tensor // [H_v, d_k, d_v] fp32 recurrent state
}

// Free releases the state's tensors.
func (s *State) Free(b tensor.Backend) {
	if s != nil {
		b.Free(s.Conv, s.Rec)
	}
}

// Layer holds one Gated DeltaNet layer's weights on a backend.
type Layer struct {
	// Chunk is the chunk length used by Forward; 0 selects the recurrent
	// form. New sets DefaultChunk.
	Chunk int

	b      tensor.Backend
	cfg    tensor.DeltaConfig
	eps    float32
	inProj tensor.Tensor // [conv + H_v·d_v + 2H_v, d]: [in_proj_qkv; in_proj_z; in_proj_b; in_proj_a]
	conv   tensor.Tensor // [conv, K]
	aLog   tensor.Tensor // [H_v] fp32
	dtBias tensor.Tensor // [H_v] fp32
	norm   tensor.Tensor // [d_v] fp32
	out    tensor.Tensor // [d, H_v·d_v]
}

// Options control how NewWith uploads a layer.
type Options struct {
	// Products, when not nil, uploads the layer's two matrix-product weights in place of tensor.FromHostRows: the
	// input projection (in_proj_qkv, in_proj_z, in_proj_b and in_proj_a, stacked by rows in that order) and the
	// output projection (out_proj alone). names are the parts' canonical names, parts their host tensors.
	Products func(names []string, parts []*qwen35.Tensor) (tensor.Tensor, error)
}

// New uploads the layer whose tensors are named prefix+"in_proj_qkv.weight",
// prefix+"A_log", ... (prefix like "layers.0.linear_attn.") from w.
func New(b tensor.Backend, w *qwen35.Weights, prefix string) (*Layer, error) {
	return NewWith(b, w, prefix, Options{})
}

// NewWith is New with the product weights uploaded as opts says.
func NewWith(b tensor.Backend, w *qwen35.Weights, prefix string, opts Options) (*Layer, error) {
	products := opts.Products
	if products == nil {
		products = func(_ []string, parts []*qwen35.Tensor) (tensor.Tensor, error) {
			return tensor.FromHostRows(b, parts...)
		}
	}
	c := &w.Config
	if c.LinearNumKeyHeads <= 0 || c.LinearNumValueHeads <= 0 || c.LinearKeyHeadDim <= 0 || c.LinearValueHeadDim <= 0 ||
		c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 || c.LinearConvKernel <= 0 || c.HiddenSize <= 0 {
		return nil, fmt.Errorf("deltanet: config: bad linear attention sizes (H_k %d, H_v %d, d_k %d, d_v %d, kernel %d, d %d)",
			c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernel, c.HiddenSize)
	}
	d, hv, conv, vd := c.HiddenSize, c.LinearNumValueHeads, c.ConvDim(), c.LinearValueDim()
	get := func(name string, shape ...int) (*qwen35.Tensor, error) { return w.Lookup(prefix+name, shape...) }
	var parts [4]*qwen35.Tensor
	var err error
	for i, p := range []struct {
		name string
		rows int
	}{{"in_proj_qkv.weight", conv}, {"in_proj_z.weight", vd}, {"in_proj_b.weight", hv}, {"in_proj_a.weight", hv}} {
		if parts[i], err = get(p.name, p.rows, d); err != nil {
			return nil, err
		}
	}
	l := &Layer{Chunk: DefaultChunk, b: b, eps: float32(c.RMSNormEps), cfg: tensor.DeltaConfig{
		KeyHeads: c.LinearNumKeyHeads, ValueHeads: hv, KeyDim: c.LinearKeyHeadDim, ValueDim: c.LinearValueHeadDim}}
	inNames := []string{prefix + "in_proj_qkv.weight", prefix + "in_proj_z.weight", prefix + "in_proj_b.weight", prefix + "in_proj_a.weight"}
	if l.inProj, err = products(inNames, parts[:]); err != nil {
		return nil, err
	}
	w.Release(inNames...)
	cw, err := get("conv1d.weight", conv, 1, c.LinearConvKernel)
	if err != nil {
		return nil, err
	}
	if l.conv, err = b.FromFloat32([]int{conv, c.LinearConvKernel}, cw.Float32s()); err != nil {
		return nil, err
	}
	w.Release(prefix + "conv1d.weight")
	small := []struct {
		dst  *tensor.Tensor
		name string
		n    int
	}{{&l.aLog, "A_log", hv}, {&l.dtBias, "dt_bias", hv}, {&l.norm, "norm.weight", c.LinearValueHeadDim}}
	for _, s := range small {
		t, err := get(s.name, s.n)
		if err != nil {
			return nil, err
		}
		if *s.dst, err = b.FromFloat32([]int{s.n}, t.Float32s()); err != nil {
			return nil, err
		}
		w.Release(prefix + s.name)
	}
	ow, err := get("out_proj.weight", d, vd)
	if err != nil {
		return nil, err
	}
	if l.out, err = products([]string{prefix + "out_proj.weight"}, []*qwen35.Tensor{ow}); err != nil {
		return nil, err
	}
	w.Release(prefix + "out_proj.weight")
	return l, nil
}

// Forward mixes u [N, d]. lens splits the rows into segments that each
// continue state (nil: zero state); nil lens is one segment. For a single
// segment it also returns the state after the last row; for several, next is
// nil. state is not modified.
func (l *Layer) Forward(u tensor.Tensor, state *State, lens []int) (out tensor.Tensor, next *State, err error) {
	n, next, err := l.ForwardGated(u, state, lens)
	if err != nil {
		return nil, nil, err
	}
	if out, err = l.b.MatMul(n, l.out); err != nil {
		next.Free(l.b)
		next = nil
	}
	l.b.Free(n)
	return out, next, err
}

// OutProj is the layer's output projection [d, value heads · value dim]: Forward's output is MatMul(n, OutProj())
// for the n that ForwardGated returns.
func (l *Layer) OutProj() tensor.Tensor { return l.out }

// ForwardGated is Forward without the output projection: it returns the gated RMSNorm of the delta rule's output,
// n [N, value heads · value dim], and the same next state. For callers that fuse the projection with what follows
// it (tensor.Backend.MatMulAddRMSNorm).
func (l *Layer) ForwardGated(u tensor.Tensor, state *State, lens []int) (n tensor.Tensor, next *State, err error) {
	b, c := l.b, l.cfg
	conv := 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim
	parts, err := b.MatMulSplit(u, l.inProj, conv, c.ValueHeads*c.ValueDim, c.ValueHeads, c.ValueHeads)
	if err != nil {
		return nil, nil, err
	}
	x, z, bl, a := parts[0], parts[1], parts[2], parts[3]
	defer b.Free(x, z, bl, a)
	var convState, recState tensor.Tensor
	if state != nil {
		convState, recState = state.Conv, state.Rec
	}
	y, newConv, err := b.CausalConv1dSiLU(x, l.conv, convState, lens)
	if err != nil {
		return nil, nil, err
	}
	defer b.Free(y)
	beta, g, err := b.DeltaGates(bl, a, l.aLog, l.dtBias)
	if err != nil {
		b.Free(newConv)
		return nil, nil, err
	}
	defer b.Free(beta, g)
	c.Chunk = l.Chunk
	o, newRec, err := b.GatedDeltaRule(y, g, beta, recState, lens, c)
	if err != nil {
		b.Free(newConv)
		return nil, nil, err
	}
	n, err = b.GatedRMSNorm(o, z, l.norm, l.eps)
	b.Free(o)
	if err != nil {
		b.Free(newConv, newRec)
		return nil, nil, err
	}
	if newConv != nil && newRec != nil {
		next = &State{Conv: newConv, Rec: newRec}
	}
	return n, next, nil
}

// ForwardSegments mixes u [N, d] whose rows form segs (see tensor.Segment):
// a FromPrefix segment continues states[Index], a FromSegment segment the
// state another segment of the call ends with, a FromZero segment starts
// from the zero state. It returns the output and, per segment, the State
// after its last row when the segment has Keep (nil otherwise). The backend
// must implement tensor.Batched; states are not modified.
func (l *Layer) ForwardSegments(u tensor.Tensor, states []*State, segs []tensor.Segment) (out tensor.Tensor, kept []*State, err error) {
	n, kept, err := l.ForwardSegmentsGated(u, states, segs)
	if err != nil {
		return nil, nil, err
	}
	if out, err = l.b.MatMul(n, l.out); err != nil {
		for _, s := range kept {
			s.Free(l.b)
		}
		kept = nil
	}
	l.b.Free(n)
	return out, kept, err
}

// ForwardSegmentsGated is ForwardSegments without the output projection (see ForwardGated).
func (l *Layer) ForwardSegmentsGated(u tensor.Tensor, states []*State, segs []tensor.Segment) (n tensor.Tensor, kept []*State, err error) {
	b, c := l.b, l.cfg
	bb, ok := b.(tensor.Batched)
	if !ok {
		return nil, nil, fmt.Errorf("deltanet: ForwardSegments: backend %s does not run segments", b.Name())
	}
	convStates, recStates := make([]tensor.Tensor, len(states)), make([]tensor.Tensor, len(states))
	for i, s := range states {
		if s == nil {
			return nil, nil, fmt.Errorf("deltanet: ForwardSegments: states[%d] is nil", i)
		}
		convStates[i], recStates[i] = s.Conv, s.Rec
	}
	conv := 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim
	parts, err := b.MatMulSplit(u, l.inProj, conv, c.ValueHeads*c.ValueDim, c.ValueHeads, c.ValueHeads)
	if err != nil {
		return nil, nil, err
	}
	x, z, bl, a := parts[0], parts[1], parts[2], parts[3]
	defer b.Free(x, z, bl, a)
	y, keptConv, err := bb.CausalConv1dSiLUSegments(x, l.conv, convStates, segs)
	if err != nil {
		return nil, nil, err
	}
	defer b.Free(y)
	dropConv := func() { b.Free(keptConv...) }
	beta, g, err := b.DeltaGates(bl, a, l.aLog, l.dtBias)
	if err != nil {
		dropConv()
		return nil, nil, err
	}
	defer b.Free(beta, g)
	c.Chunk = l.Chunk
	o, keptRec, err := bb.GatedDeltaRuleSegments(y, g, beta, recStates, segs, c)
	if err != nil {
		dropConv()
		return nil, nil, err
	}
	drop := func() { dropConv(); b.Free(keptRec...) }
	n, err = b.GatedRMSNorm(o, z, l.norm, l.eps)
	b.Free(o)
	if err != nil {
		drop()
		return nil, nil, err
	}
	kept = make([]*State, len(segs))
	for i, s := range segs {
		if s.Keep && i < len(keptConv) && i < len(keptRec) {
			kept[i] = &State{Conv: keptConv[i], Rec: keptRec[i]}
		}
	}
	return n, kept, nil
}
