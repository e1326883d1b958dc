// Package layers is the Qwen3.5 hybrid text model on a tensor.Backend:
// embedding, (1+w) RMSNorm, gated attention, Gated DeltaNet (package
// deltanet), SwiGLU MLP, decoder layers and the final norm, plus Kev's
// pointer head. It turns token rows into final hidden states; it never
// decodes text. The same Model runs the attention-only bases of Kev's
// previous generation (qwen35.Qwen3, qwen35.Qwen2: w RMSNorm, ungated
// attention with q/k norm or q/k/v biases, full rotary), chosen by
// Config.Arch.
//
// Kev runs an attention-only base in its packed block-causal form: the
// state and every question branch in one sequence, a branch attending to
// the state and to itself, positions restarting after the state for every
// branch. Forward computes exactly that: a Batch with the state as a
// NewState and each question as a Row continuing it runs the state's keys
// and values once and lets every row attend to them (tensor.FromSegment),
// and a cached State holds those keys and values for later requests.
//
// Kev's row form: a text (the state) runs once with Prefill, which keeps a
// State per layer (attention keys/values, DeltaNet conv and recurrent
// states); each question then runs as its own causal row continuing that
// state (Continue, ContinueRows), at positions starting at the state's
// length, without modifying it.
package layers

import (
	"fmt"

	"github.com/kevgo/kev/deltanet"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

// Model is a Qwen3.5 text model whose weights live on a backend.
type Model struct {
	// Config is the model's configuration.
	Config qwen35.Config
	// Observe, when not nil, receives the residual stream at each point of a
	// pass: point 0 is the embedding output, point i+1 the output of decoder
	// layer i, and point NumLayers+1 the final norm's output. h is [N, d]
	// (the pass's new rows only) and valid only during the call.
	Observe func(point int, h tensor.Tensor)

	stop    func(layer int) bool // the running Forward's Batch.Stop
	pause   func(layer int) bool // the running Forward's Batch.Pause
	b       tensor.Backend
	eps     float32
	plusOne bool          // RMSNorm gains are (1 + w) (Qwen3.5), else w
	embed   tensor.Tensor // [V, d]
	norm    tensor.Tensor // [d] fp32
	layers  []*decoder
	kept    []string // Options.FP8: the product weights kept in bf16 (KeptBF16)
}

// decoder is one decoder layer: mixer then MLP, each behind a (1+w) norm.
type decoder struct {
	inNorm, postNorm tensor.Tensor // [d] fp32
	attn             *Attention    // full-attention layers
	delta            *deltanet.Layer
	gateUp, down     tensor.Tensor // [gate_proj; up_proj] [2I, d]; down_proj [d, I]
}

// Options control how NewWith uploads a model's weights.
type Options struct {
	// FP8 uploads the weight of every matrix product of the decoder layers (the attention q_proj, k_proj, v_proj
	// and o_proj, the Gated DeltaNet in_proj_qkv, in_proj_z, in_proj_b, in_proj_a and out_proj, the MLP
	// gate_proj, up_proj and down_proj; stacked as New stacks them) as an F8E4M3 weight, quantized once from its
	// stored values with one scale per row (tensor.FromHostRowsFP8); b must implement tensor.FP8. Everything else
	// is uploaded as New uploads it. A product weight whose shape the backend's FP8 products do not take (a
	// *tensor.ShapeError from FromFloat32FP8) is uploaded in bf16 instead, each value rounded once to nearest even
	// (what a bf16 load holds), and listed by KeptBF16.
	FP8 bool
}

// New uploads a model's weights (canonical names, see package qwen35) to b.
// Matrices keep their stored type; norms, A_log and dt_bias become fp32.
func New(b tensor.Backend, w *qwen35.Weights) (*Model, error) {
	return NewWith(b, w, Options{})
}

// NewWith is New with the weights uploaded as opts says.
func NewWith(b tensor.Backend, w *qwen35.Weights, opts Options) (*Model, error) {
	c := w.Config
	if err := check(&c); err != nil {
		return nil, err
	}
	l := &loader{b: b, w: w, fp8: opts.FP8}
	d := c.HiddenSize
	m := &Model{Config: c, b: b, eps: float32(c.RMSNormEps), plusOne: c.PlusOneNorm()}
	m.embed = l.matrix("embed_tokens.weight", c.VocabSize, d)
	m.norm = l.vector("norm.weight", d)
	for i, lt := range c.LayerTypes {
		p := fmt.Sprintf("layers.%d.", i)
		dec := &decoder{
			inNorm:   l.vector(p+"input_layernorm.weight", d),
			postNorm: l.vector(p+"post_attention_layernorm.weight", d),
			gateUp: l.product([]string{p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
				[]int{c.IntermediateSize, c.IntermediateSize}, d),
			down: l.product([]string{p + "mlp.down_proj.weight"}, []int{d}, c.IntermediateSize),
		}
		if lt == qwen35.FullAttention {
			dec.attn = newAttention(l, &c, p+"self_attn.")
		} else if l.err == nil {
			dec.delta, l.err = deltanet.NewWith(b, w, p+"linear_attn.", deltanet.Options{Products: l.products()})
		}
		if l.err != nil {
			return nil, l.err
		}
		m.layers = append(m.layers, dec)
	}
	if l.err != nil {
		return nil, l.err
	}
	m.kept = l.kept
	return m, nil
}

// KeptBF16 lists the product weights that a load with Options.FP8 uploaded in bf16 because the backend's FP8
// products do not take their shape, in load order, each by its canonical name (a stacked weight by its parts'
// names joined with "+"); nil when there were none or the load was not FP8.
func (m *Model) KeptBF16() []string { return m.kept }

// check validates the sizes the model relies on.
func check(c *qwen35.Config) error {
	bad := func(f string, v any) error { return fmt.Errorf("layers: config: bad %s %v", f, v) }
	switch {
	case c.HiddenSize <= 0:
		return bad("hidden_size", c.HiddenSize)
	case c.NumLayers <= 0 || len(c.LayerTypes) != c.NumLayers:
		return fmt.Errorf("layers: config: num_hidden_layers %d with %d layer_types", c.NumLayers, len(c.LayerTypes))
	case c.IntermediateSize <= 0:
		return bad("intermediate_size", c.IntermediateSize)
	case c.VocabSize <= 0:
		return bad("vocab_size", c.VocabSize)
	case c.Arch > qwen35.Qwen2:
		return bad("architecture", c.Arch)
	case c.Arch != qwen35.Qwen35 && (c.Hybrid() || c.AttnOutputGate):
		return fmt.Errorf("layers: config: %v has only ungated full-attention layers", c.Arch)
	}
	for i, lt := range c.LayerTypes {
		if lt == qwen35.FullAttention {
			switch {
			case c.NumHeads <= 0 || c.NumKVHeads <= 0 || c.NumHeads%c.NumKVHeads != 0:
				return fmt.Errorf("layers: config: num_attention_heads %d, num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
			case c.HeadDim <= 0:
				return bad("head_dim", c.HeadDim)
			case c.RotaryDim() < 0 || c.RotaryDim() > c.HeadDim || c.RotaryDim()%2 != 0:
				return bad("rotary dims (head_dim·partial_rotary_factor)", c.RotaryDim())
			}
		} else if lt != qwen35.LinearAttention {
			return fmt.Errorf("layers: config: layer_types[%d] = %v", i, lt)
		}
	}
	return nil
}

// SetChunk sets the chunk length of every DeltaNet layer; 0 selects the
// recurrent form.
func (m *Model) SetChunk(n int) {
	for _, l := range m.layers {
		if l.delta != nil {
			l.delta.Chunk = n
		}
	}
}

// State is the per-layer continuation state of a prefilled row.
type State struct {
	// Len is the number of tokens the state covers; continuations start at
	// position Len.
	Len    int
	b      tensor.Backend
	layers []layerState
}

type layerState struct {
	k, v  tensor.Tensor // attention: [Len, KV·D] post-norm, post-rotary keys; values
	delta *deltanet.State
}

// Free releases the state's tensors.
func (s *State) Free() {
	if s == nil {
		return
	}
	for _, l := range s.layers {
		s.b.Free(l.k, l.v)
		l.delta.Free(s.b)
	}
	s.layers = nil
}

// Prefill runs ids at positions 0…len(ids)−1 and returns their state and
// final hidden states [len(ids), d].
func (m *Model) Prefill(ids []int32) (*State, tensor.Tensor, error) {
	if len(ids) == 0 {
		return nil, nil, fmt.Errorf("layers: Prefill: no tokens")
	}
	return m.forward(nil, ids, nil)
}

// Continue runs ids as one row continuing s (positions s.Len, s.Len+1, …)
// and returns their final hidden states [len(ids), d]. s is not modified.
func (m *Model) Continue(s *State, ids []int32) (tensor.Tensor, error) {
	return m.ContinueRows(s, [][]int32{ids})
}

// ContinueRows runs several rows, each continuing s on its own (no row sees
// another), in one pass, and returns their final hidden states stacked in
// order: row r occupies the len(rows[r]) rows after those of rows 0…r−1.
// s is not modified.
func (m *Model) ContinueRows(s *State, rows [][]int32) (tensor.Tensor, error) {
	if s == nil || s.layers == nil {
		return nil, fmt.Errorf("layers: ContinueRows: nil or freed state")
	}
	var ids []int32
	lens := make([]int, len(rows))
	for i, r := range rows {
		if len(r) == 0 {
			return nil, fmt.Errorf("layers: ContinueRows: row %d is empty", i)
		}
		lens[i] = len(r)
		ids = append(ids, r...)
	}
	_, h, err := m.forward(s, ids, lens)
	return h, err
}

// forward runs ids (segments lens, nil: one) continuing prefix (nil: none).
// It returns a state only for a pass without prefix.
func (m *Model) forward(prefix *State, ids []int32, lens []int) (*State, tensor.Tensor, error) {
	b := m.b
	start := 0
	if prefix != nil {
		start = prefix.Len
	}
	positions := make([]int32, len(ids))
	if lens == nil {
		for i := range positions {
			positions[i] = int32(start + i)
		}
	} else {
		off := 0
		for _, n := range lens {
			for i := 0; i < n; i++ {
				positions[off+i] = int32(start + i)
			}
			off += n
		}
	}
	var next *State
	if prefix == nil {
		next = &State{Len: len(ids), b: b, layers: make([]layerState, len(m.layers))}
	}
	u, err := m.pass(ids, 0, func(i int, l *decoder, u tensor.Tensor) (tensor.Tensor, tensor.Tensor, error) {
		if l.attn != nil {
			var kp, vp tensor.Tensor
			if prefix != nil {
				kp, vp = prefix.layers[i].k, prefix.layers[i].v
			}
			mix, wo, k, v, err := l.attn.forward(u, positions, kp, vp, lens)
			if err != nil {
				return nil, nil, err
			}
			if next != nil {
				next.layers[i].k, next.layers[i].v = k, v
			} else {
				b.Free(k, v)
			}
			return mix, wo, nil
		}
		var ds *deltanet.State
		if prefix != nil {
			ds = prefix.layers[i].delta
		}
		mix, nds, err := l.delta.ForwardGated(u, ds, lens)
		if err != nil {
			return nil, nil, err
		}
		if next != nil {
			next.layers[i].delta = nds
		} else {
			nds.Free(b)
		}
		return mix, l.delta.OutProj(), nil
	})
	if err != nil {
		next.Free()
		return nil, nil, err
	}
	return next, u, nil
}

// mixer runs decoder layer i's token mixer on its normed input u and
// returns the mixer's output. It does not free u.
// mixer runs layer i's token mixer (attention or DeltaNet) on u. Its output
// is MatMul(pre, wo), left to the caller so that the projection, the residual
// add and the next norm run together (Backend.MatMulAddRMSNorm), or pre
// itself when wo is nil.
type mixer func(i int, l *decoder, u tensor.Tensor) (pre, wo tensor.Tensor, err error)

// pass runs ids through the embedding, every decoder layer (its mixer given
// by mix, then the MLP) and the final norm, and returns the final hidden
// states of rows from… (all of them when from is 0).
//
// Nothing reads the final hidden states of the rows before from, so they
// leave the last layer early: its mixer still computes their keys, values
// and states (a pass keeps them), and may mix rows from… alone (cutAt), and
// the output projection, the MLP and the final norm run on rows from…
// alone. No row's arithmetic depends on the rows beside it, so the rows
// returned hold the same values either way. With Observe set every row runs
// to the end (Observe sees them all) and from only selects the rows
// returned. from > 0 needs tensor.Batched.
func (m *Model) pass(ids []int32, from int, mix mixer) (tensor.Tensor, error) {
	b, c := m.b, &m.Config
	h, err := b.Embedding(m.embed, ids)
	if err != nil {
		return nil, err
	}
	m.observe(0, h)
	u, err := b.RMSNorm(h, m.layers[0].inNorm, m.eps, m.plusOne)
	if err != nil {
		b.Free(h)
		return nil, err
	}
	for i, l := range m.layers {
		if m.stop != nil && m.stop(i) {
			b.Free(u, h)
			return nil, ErrStopped
		}
		pre, wo, err := mix(i, l, u)
		b.Free(u)
		if err != nil {
			b.Free(h)
			return nil, err
		}
		if cut := m.cutAt(i, from); cut > 0 {
			if pre.Shape()[0] == h.Shape()[0] {
				pre, h, err = m.trimRows(pre, h, cut)
			} else if h, _, err = m.trimRows(h, nil, cut); err != nil { // the mixer mixed rows cut… alone
				b.Free(pre)
			}
			if err != nil {
				return nil, err
			}
			from = 0
		}
		if h, u, err = m.mlp(i, pre, wo, h); err != nil {
			return nil, err
		}
		m.observe(i+1, h)
	}
	b.Free(h)
	m.observe(c.NumLayers+1, u)
	if from > 0 { // Observe saw every row to the end: select the rows now
		u, _, err = m.trimRows(u, nil, from)
	}
	return u, err
}

// mlp runs the rest of decoder layer i after its mixer's output (pre, wo:
// see mixer) on the residual stream h: the mixer's projection, the residual
// add and norm, and the MLP. It returns the residual stream after the layer
// and its norm for the next layer (the final norm after the last), and frees
// pre and h, also on an error.
func (m *Model) mlp(i int, pre, wo, h tensor.Tensor) (tensor.Tensor, tensor.Tensor, error) {
	b, l := m.b, m.layers[i]
	var h2, v tensor.Tensor
	var err error
	if wo != nil {
		h2, v, err = b.MatMulAddRMSNorm(pre, wo, h, l.postNorm, m.eps, m.plusOne)
	} else {
		h2, v, err = b.AddRMSNorm(pre, h, l.postNorm, m.eps, m.plusOne)
	}
	b.Free(pre, h)
	if err != nil {
		return nil, nil, err
	}
	act, err := b.MatMulSwiGLU(v, l.gateUp)
	b.Free(v)
	if err != nil {
		b.Free(h2)
		return nil, nil, err
	}
	gain := m.norm
	if i+1 < len(m.layers) {
		gain = m.layers[i+1].inNorm
	}
	h, u, err := b.MatMulAddRMSNorm(act, l.down, h2, gain, m.eps, m.plusOne)
	b.Free(act, h2)
	if err != nil {
		return nil, nil, err
	}
	return h, u, nil
}

// cutAt is the row from which pass runs layer i's rows past its mixer: from
// at the last layer unless Observe is set, else 0 (every row). A mixer may
// mix rows cutAt… alone and return only theirs.
func (m *Model) cutAt(i, from int) int {
	if i == len(m.layers)-1 && m.Observe == nil {
		return from
	}
	return 0
}

// trimRows returns rows from… of x (and of y when not nil), freeing x and
// y, also on an error. It needs tensor.Batched (its SliceRows).
func (m *Model) trimRows(x, y tensor.Tensor, from int) (tensor.Tensor, tensor.Tensor, error) {
	bb, ok := m.b.(tensor.Batched)
	if !ok {
		m.b.Free(x, y)
		return nil, nil, fmt.Errorf("layers: rows %d… of a pass need a backend with tensor.Batched", from)
	}
	xs, err := bb.SliceRows(x, from, x.Shape()[0])
	var ys tensor.Tensor
	if err == nil && y != nil {
		if ys, err = bb.SliceRows(y, from, y.Shape()[0]); err != nil {
			m.b.Free(xs)
			xs = nil
		}
	}
	m.b.Free(x, y)
	return xs, ys, err
}

func (m *Model) observe(point int, h tensor.Tensor) {
	if m.Observe != nil {
		m.Observe(point, h)
	}
}
