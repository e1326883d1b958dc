package layers

import (
	"errors"
	"fmt"

	"github.com/kevgo/kev/deltanet"
	"github.com/kevgo/kev/tensor"
)

// PassTokens is the token budget of one row pass when the backend lacks
// tensor.Batched: rows continuing a state of length L, the longest of them
// R tokens, run max(1, PassTokens/(L+R)) to a call, as Kev's row passes do.
const PassTokens = 16384

// Batch is the work of one pass over several requests: states computed from
// nothing, and question rows, each continuing a cached State or one of the
// batch's new states.
type Batch struct {
	New  []NewState
	Rows []Row
	// Stop, when not nil, is called before each decoder layer of the
	// batch's passes with the layer's index; when it returns true the pass
	// stops there and Forward returns ErrStopped (a caller whose requests
	// have all gone frees the model at the next layer). Stop may run another
	// batch through Forward before it returns (a short batch that preempts
	// a long pass between two of its layers): the pass resumes where it was,
	// with the same results.
	Stop func(layer int) bool
	// Chunk, when not nil and the backend implements tensor.Chunked, is
	// asked before each decoder layer of the batch's passes (after Stop)
	// how many tokens a piece of the layer holds: a pass of more tokens runs
	// the layer in pieces of about that many, one after the other (whole
	// segments, and parts of a longer one split at multiples of the delta
	// rule's chunk from its first row; 0: the layer runs whole), so that
	// Pause gets a say between two of them. Every result has the same bits
	// whatever the pieces (no operation's result for a row depends on the
	// rows beside it). Not with Model.Observe set.
	Chunk func(layer int) int
	// Pause, when not nil, is called between two pieces of a layer that
	// Chunk split (Chunk positive for it), with the layer's index. Like Stop
	// it may run another batch through Forward before it returns, and when
	// it returns true the pass stops there and Forward returns ErrStopped.
	Pause func(layer int) bool
}

// ErrStopped is returned by Forward when Batch.Stop stopped its pass.
var ErrStopped = errors.New("layers: pass stopped")

// NewState is a state a pass computes from its tokens, at positions
// 0…len(IDs)−1.
type NewState struct {
	IDs  []int32
	Keep bool // return its State in Output.States
}

// Row is one question row: its tokens continue Cached when set, else the
// state Batch.New[New], at positions starting at that state's length.
type Row struct {
	IDs    []int32
	Cached *State
	New    int
}

// RowAt locates a row's final hidden states: rows Off… of Output.Hidden[Part].
type RowAt struct {
	Part, Off int
}

// Output is what a pass returns.
type Output struct {
	// Hidden holds the rows' final hidden states [*, d] (a pass computes no
	// final hidden states for the new states' own tokens); At says where
	// each row's are.
	Hidden []tensor.Tensor
	// At has one entry per Batch.Rows entry.
	At []RowAt
	// States has one entry per Batch.New entry: its State when Keep, else
	// nil. The caller owns them (State.Free).
	States []*State

	b tensor.Backend
}

// Free releases the hidden states (not the kept States).
func (o *Output) Free() {
	if o != nil && o.b != nil {
		o.b.Free(o.Hidden...)
		o.Hidden = nil
	}
}

// Forward runs a batch. When the backend implements tensor.Batched it is one
// pass: layer by layer, every token of the batch (new states and question
// rows alike) goes through each projection together, so each weight is read
// once; attention, the convolution and the delta rule then run per segment,
// a new state from nothing and a row from its cached state or from the state
// its new state reaches in the same layer. Otherwise each needed new state
// runs with Prefill and the rows with ContinueRows, PassTokens at a time.
// Rows never modify a state; the answers are the same either way.
func (m *Model) Forward(bt *Batch) (*Output, error) {
	if bt == nil {
		return nil, fmt.Errorf("layers: Forward: nil batch")
	}
	for i, ns := range bt.New {
		if len(ns.IDs) == 0 {
			return nil, fmt.Errorf("layers: Forward: new state %d has no tokens", i)
		}
	}
	for r, row := range bt.Rows {
		switch {
		case len(row.IDs) == 0:
			return nil, fmt.Errorf("layers: Forward: row %d is empty", r)
		case row.Cached != nil && row.Cached.layers == nil:
			return nil, fmt.Errorf("layers: Forward: row %d continues a freed state", r)
		case row.Cached == nil && (row.New < 0 || row.New >= len(bt.New)):
			return nil, fmt.Errorf("layers: Forward: row %d continues new state %d of %d", r, row.New, len(bt.New))
		}
	}
	if len(bt.New) == 0 && len(bt.Rows) == 0 {
		return &Output{b: m.b}, nil
	}
	prevStop, prevPause := m.stop, m.pause // a Forward called from the Stop or Pause of another's pass
	m.stop, m.pause = bt.Stop, bt.Pause
	defer func() { m.stop, m.pause = prevStop, prevPause }()
	if bb, ok := m.b.(tensor.Batched); ok {
		return m.forwardBatched(bb, bt)
	}
	return m.forwardEach(bt)
}

// forwardBatched runs a batch as one pass: the new states' segments first,
// then the rows'.
func (m *Model) forwardBatched(bb tensor.Batched, bt *Batch) (*Output, error) {
	b := m.b
	var ids []int32
	var positions []int32
	segs := make([]tensor.Segment, 0, len(bt.New)+len(bt.Rows))
	starts := make([]int, len(bt.New))
	prefixIndex := map[*State]int{}
	var prefixes []*State
	out := &Output{b: b, At: make([]RowAt, len(bt.Rows)), States: make([]*State, len(bt.New))}
	add := func(toks []int32, start int) {
		for i, id := range toks {
			ids = append(ids, id)
			positions = append(positions, int32(start+i))
		}
	}
	for i, ns := range bt.New {
		starts[i] = len(ids)
		segs = append(segs, tensor.Segment{Len: len(ns.IDs), From: tensor.FromZero, Keep: ns.Keep})
		add(ns.IDs, 0)
		if ns.Keep {
			out.States[i] = &State{Len: len(ns.IDs), b: b, layers: make([]layerState, len(m.layers))}
		}
	}
	for r, row := range bt.Rows {
		out.At[r] = RowAt{Off: len(ids)}
		seg := tensor.Segment{Len: len(row.IDs)}
		start := 0
		if row.Cached != nil {
			k, ok := prefixIndex[row.Cached]
			if !ok {
				k = len(prefixes)
				prefixIndex[row.Cached] = k
				prefixes = append(prefixes, row.Cached)
			}
			seg.From, seg.Index, start = tensor.FromPrefix, k, row.Cached.Len
		} else {
			seg.From, seg.Index, start = tensor.FromSegment, row.New, len(bt.New[row.New].IDs)
		}
		segs = append(segs, seg)
		add(row.IDs, start)
	}
	drop := func() {
		for _, s := range out.States {
			s.Free()
		}
	}
	// Only the rows' final hidden states are read: the new states' rows (all
	// before the first row) leave the last layer after its mixer.
	from := 0
	if len(bt.Rows) > 0 {
		from = out.At[0].Off
		for r := range out.At {
			out.At[r].Off -= from
		}
	}
	if _, ok := bb.(tensor.Chunked); ok && bt.Chunk != nil && m.Observe == nil {
		h, err := m.passPieces(bt.Chunk, ids, positions, segs, prefixes, out.States, from)
		if err != nil {
			drop()
			return nil, err
		}
		out.Hidden = []tensor.Tensor{h}
		return out, nil
	}
	h, err := m.pass(ids, from, func(i int, l *decoder, u tensor.Tensor) (tensor.Tensor, tensor.Tensor, error) {
		if l.attn != nil {
			kps, vps := make([]tensor.Tensor, len(prefixes)), make([]tensor.Tensor, len(prefixes))
			for j, p := range prefixes {
				kps[j], vps[j] = p.layers[i].k, p.layers[i].v
			}
			mix, wo, k, v, err := l.attn.forwardSegments(bb, u, positions, kps, vps, segs, m.cutAt(i, from))
			if err != nil {
				return nil, nil, err
			}
			defer b.Free(k, v)
			for j, s := range out.States {
				if s == nil {
					continue
				}
				lo, hi := starts[j], starts[j]+len(bt.New[j].IDs)
				if s.layers[i].k, err = bb.SliceRows(k, lo, hi); err == nil {
					s.layers[i].v, err = bb.SliceRows(v, lo, hi)
				}
				if err != nil {
					b.Free(mix)
					return nil, nil, err
				}
			}
			return mix, wo, nil
		}
		states := make([]*deltanet.State, len(prefixes))
		for j, p := range prefixes {
			states[j] = p.layers[i].delta
		}
		mix, kept, err := l.delta.ForwardSegmentsGated(u, states, segs)
		if err != nil {
			return nil, nil, err
		}
		for j, s := range out.States {
			if s != nil {
				s.layers[i].delta = kept[j]
			}
		}
		return mix, l.delta.OutProj(), nil
	})
	if err != nil {
		drop()
		return nil, err
	}
	out.Hidden = []tensor.Tensor{h}
	return out, nil
}

// forwardEach runs a batch with the single-prefix operations: Prefill for
// each new state that is kept or continued, ContinueRows for the rows, those
// continuing the same state together, PassTokens at a time.
func (m *Model) forwardEach(bt *Batch) (*Output, error) {
	out := &Output{b: m.b, At: make([]RowAt, len(bt.Rows)), States: make([]*State, len(bt.New))}
	news := make([]*State, len(bt.New))
	needed := make([]bool, len(bt.New))
	for i, ns := range bt.New {
		needed[i] = ns.Keep
	}
	for _, row := range bt.Rows {
		if row.Cached == nil {
			needed[row.New] = true
		}
	}
	fail := func(err error) (*Output, error) {
		out.Free()
		for _, s := range news {
			s.Free()
		}
		return nil, err
	}
	for i, ns := range bt.New {
		if !needed[i] {
			continue
		}
		s, h, err := m.Prefill(ns.IDs)
		if err != nil {
			return fail(err)
		}
		m.b.Free(h)
		news[i] = s
	}
	stateOf := func(r int) *State {
		if bt.Rows[r].Cached != nil {
			return bt.Rows[r].Cached
		}
		return news[bt.Rows[r].New]
	}
	for lo := 0; lo < len(bt.Rows); {
		st := stateOf(lo)
		hi, longest := lo, 0
		for hi < len(bt.Rows) && stateOf(hi) == st {
			longest = max(longest, len(bt.Rows[hi].IDs))
			hi++
		}
		per := max(1, PassTokens/(st.Len+longest))
		for a := lo; a < hi; a += per {
			z := min(a+per, hi)
			chunk := make([][]int32, z-a)
			off := 0
			for r := a; r < z; r++ {
				chunk[r-a] = bt.Rows[r].IDs
				out.At[r] = RowAt{Part: len(out.Hidden), Off: off}
				off += len(bt.Rows[r].IDs)
			}
			h, err := m.ContinueRows(st, chunk)
			if err != nil {
				return fail(err)
			}
			out.Hidden = append(out.Hidden, h)
		}
		lo = hi
	}
	for i, s := range news {
		if bt.New[i].Keep {
			out.States[i] = s
		} else {
			s.Free()
		}
	}
	return out, nil
}
