package layers

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// tinyModel loads the bundled test checkpoint (package kevtest's: four layers, three Gated DeltaNet then one
// attention, DeltaNet chunks of 64).
func tinyModel(t testing.TB) (*Model, tensor.Backend) {
	t.Helper()
	dir := filepath.Join("..", "kevtest", "model")
	m, _, b := goldenModel(t, filepath.Join(dir, "kev"), filepath.Join(dir, "base"))
	return m, b
}

// sameBits reports whether a and b hold the same float32 bits.
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// snapshot is what a pass returns, on the host: each row's final hidden states and each kept state's tensors.
type snapshot struct {
	rows   [][]float32
	states [][][]float32 // per new state: per layer, k, v, conv, rec (nil where the layer has none)
}

func takeSnapshot(t *testing.T, m *Model, b tensor.Backend, bt *Batch, out *Output) snapshot {
	t.Helper()
	d := m.Config.HiddenSize
	var s snapshot
	for r, at := range out.At {
		h := host(t, b, out.Hidden[at.Part])
		s.rows = append(s.rows, h[at.Off*d:(at.Off+len(bt.Rows[r].IDs))*d])
	}
	for _, st := range out.States {
		var ts [][]float32
		if st != nil {
			for _, l := range st.layers {
				for _, x := range []tensor.Tensor{l.k, l.v, stateConv(l), stateRec(l)} {
					var v []float32
					if x != nil {
						v = host(t, b, x)
					}
					ts = append(ts, v)
				}
			}
		}
		s.states = append(s.states, ts)
	}
	return s
}

// chunkBatch is a batch for TestForwardPieces: new states (n tokens, kept or not) and rows continuing a new state
// (new ≥ 0) or the cached state (new < 0).
type chunkBatch struct {
	news []struct {
		n    int
		keep bool
	}
	rows []struct{ n, new int }
}

func (c chunkBatch) batch(r *rand.Rand, vocab int, cached *State) *Batch {
	bt := &Batch{}
	for _, ns := range c.news {
		bt.New = append(bt.New, NewState{IDs: randomIDs(r, ns.n, vocab), Keep: ns.keep})
	}
	for _, row := range c.rows {
		x := Row{IDs: randomIDs(r, row.n, vocab), New: row.new}
		if row.new < 0 {
			x.Cached, x.New = cached, 0
		}
		bt.Rows = append(bt.Rows, x)
	}
	return bt
}

// TestForwardPieces runs batches whole and in pieces of several sizes on the bundled test checkpoint: rows that
// cross piece boundaries at odd offsets (split at multiples of the DeltaNet chunk, 64, with key blocks of 128),
// rows continuing a cached state and new states of the same pass, several rows in one batch, new states that are
// split themselves. Every row's final hidden states and every kept state's tensors have the bits of the whole pass.
// A Pause between two pieces runs another batch through the model (as a preempting batch does), whose answers are
// its own alone.
func TestForwardPieces(t *testing.T) {
	m, b := tinyModel(t)
	r := rand.New(rand.NewPCG(7, 8))
	vocab := m.Config.VocabSize
	cached, h, err := m.Prefill(randomIDs(r, 77, vocab))
	if err != nil {
		t.Fatal(err)
	}
	b.Free(h)
	defer cached.Free()
	type ns = struct {
		n    int
		keep bool
	}
	type row = struct{ n, new int }
	short := &Batch{New: []NewState{{IDs: randomIDs(r, 9, vocab)}}, Rows: []Row{{IDs: randomIDs(r, 19, vocab)}}}
	shortOut, err := m.Forward(short)
	if err != nil {
		t.Fatal(err)
	}
	wantShort := takeSnapshot(t, m, b, short, shortOut)
	shortOut.Free()
	for _, tc := range []struct {
		name string
		c    chunkBatch
	}{
		{"a long row on a cached state", chunkBatch{rows: []row{{1424, -1}}}},
		{"a long row on a new state", chunkBatch{news: []ns{{3, false}}, rows: []row{{701, 0}}}},
		{"rows of a kept new state", chunkBatch{news: []ns{{300, true}}, rows: []row{{1, 0}, {150, 0}, {517, 0}, {33, 0}}}},
		{"rows on both", chunkBatch{news: []ns{{41, true}, {5, false}}, rows: []row{{333, -1}, {7, 1}, {200, 0}, {2, -1}, {129, 1}}}},
		{"a long kept new state, no rows", chunkBatch{news: []ns{{450, true}, {70, true}}}},
		{"a long new state and its row", chunkBatch{news: []ns{{389, false}}, rows: []row{{65, 0}}}},
	} {
		bt := tc.c.batch(r, vocab, cached)
		whole, err := m.Forward(bt)
		if err != nil {
			t.Fatal(err)
		}
		want := takeSnapshot(t, m, b, bt, whole)
		whole.Free()
		for _, s := range whole.States {
			s.Free()
		}
		for _, chunk := range []int{1, 64, 100, 128, 200, 1000} {
			t.Run(fmt.Sprintf("%s/chunk %d", tc.name, chunk), func(t *testing.T) {
				pauses, nested := 0, false
				bt.Chunk = func(int) int { return chunk }
				bt.Pause = func(layer int) bool {
					pauses++
					if pauses == 2 {
						out, err := m.Forward(short)
						if err != nil {
							t.Error(err)
							return true
						}
						nested = true
						if got := takeSnapshot(t, m, b, short, out); !sameBits(got.rows[0], wantShort.rows[0]) {
							t.Error("the batch run inside the pass: its row differs from its own alone")
						}
						out.Free()
					}
					return false
				}
				defer func() { bt.Chunk, bt.Pause = nil, nil }()
				out, err := m.Forward(bt)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					out.Free()
					for _, s := range out.States {
						s.Free()
					}
				}()
				got := takeSnapshot(t, m, b, bt, out)
				for i := range want.rows {
					if !sameBits(got.rows[i], want.rows[i]) {
						t.Errorf("row %d (%d tokens): final hidden states differ from the whole pass's", i, len(bt.Rows[i].IDs))
					}
				}
				for j := range want.states {
					if len(got.states[j]) != len(want.states[j]) {
						t.Fatalf("new state %d: %d tensors kept, want %d", j, len(got.states[j]), len(want.states[j]))
					}
					for k := range want.states[j] {
						if !sameBits(got.states[j][k], want.states[j][k]) {
							t.Errorf("new state %d, layer %d, %s: differs from the whole pass's", j, k/4, []string{"keys", "values", "conv", "rec"}[k%4])
						}
					}
				}
				tokens := 0
				for _, ns := range bt.New {
					tokens += len(ns.IDs)
				}
				for _, x := range bt.Rows {
					tokens += len(x.IDs)
				}
				if tokens > chunk && (pauses == 0 || !nested) {
					t.Errorf("a pass of %d tokens in pieces of %d: %d pauses", tokens, chunk, pauses)
				}
				if last := len(bt.New) > 0 && len(bt.Rows) > 0; tokens <= chunk && pauses != 0 && !(last && pauses == 1) {
					// Whole layers; the last one's new states and rows run in two pieces.
					t.Errorf("a pass of %d tokens in pieces of %d: %d pauses, want none but in the last layer", tokens, chunk, pauses)
				}
			})
		}
	}
}

// TestForwardPiecesPause checks that a Pause returning true stops the pass in pieces, as Stop does.
func TestForwardPiecesPause(t *testing.T) {
	m, _ := tinyModel(t)
	r := rand.New(rand.NewPCG(9, 10))
	calls := 0
	bt := &Batch{New: []NewState{{IDs: randomIDs(r, 5, m.Config.VocabSize), Keep: true}},
		Rows: []Row{{IDs: randomIDs(r, 300, m.Config.VocabSize)}}, Chunk: func(int) int { return 128 },
		Pause: func(layer int) bool {
			calls++
			return layer == 2
		}}
	if _, err := m.Forward(bt); !errors.Is(err, ErrStopped) {
		t.Fatalf("Forward: %v, want ErrStopped", err)
	}
	if calls != 5 { // pieces of 69 (the new state and 64 rows), 128 and 108 rows: two pauses in layers 0 and 1, one in 2
		t.Errorf("%d pauses, want 5", calls)
	}
}

// TestPlanPieces checks how a pass's segments are split into pieces.
func TestPlanPieces(t *testing.T) {
	seg := func(n int) tensor.Segment { return tensor.Segment{Len: n} }
	for _, tc := range []struct {
		name                string
		segs                []tensor.Segment
		budget, align, from int
		want                string
	}{
		{"fits", []tensor.Segment{seg(3), seg(4)}, 10, 4, 0, "[0,7: 0[0,3) 1[0,4)]"},
		{"whole segments", []tensor.Segment{seg(3), seg(4), seg(5)}, 8, 4, 0, "[0,7: 0[0,3) 1[0,4)] [7,12: 2[0,5)]"},
		{"a split at the alignment", []tensor.Segment{seg(3), seg(20)}, 10, 4, 0,
			"[0,7: 0[0,3) 1[0,4)] [7,15: 1[4,12)] [15,23: 1[12,20)]"},
		{"the last part ends its piece", []tensor.Segment{seg(10), seg(2)}, 8, 4, 0, "[0,8: 0[0,8)] [8,10: 0[8,10)] [10,12: 1[0,2)]"},
		{"no room left for an aligned part", []tensor.Segment{seg(3), seg(9)}, 6, 4, 0, "[0,3: 0[0,3)] [3,7: 1[0,4)] [7,12: 1[4,9)]"},
		{"a budget below the alignment", []tensor.Segment{seg(9)}, 3, 4, 0, "[0,4: 0[0,4)] [4,8: 0[4,8)] [8,9: 0[8,9)]"},
		{"an end at from", []tensor.Segment{seg(2), seg(3), seg(4)}, 100, 1, 5, "[0,5: 0[0,2) 1[0,3)] [5,9: 2[0,4)]"},
		{"an empty segment", []tensor.Segment{seg(2), seg(0)}, 100, 1, 0, "none"},
		{"no budget", []tensor.Segment{seg(2)}, 0, 1, 0, "none"},
	} {
		got := formatPieces(planPieces(tc.segs, tc.budget, tc.align, tc.from, nil))
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// formatPieces writes each piece as [lo,hi: seg[lo,hi) …], "none" for no pieces.
func formatPieces(ps []piece) string {
	if ps == nil {
		return "none"
	}
	var out []string
	for _, p := range ps {
		s := fmt.Sprintf("[%d,%d:", p.lo, p.hi)
		for _, pt := range p.parts {
			s += fmt.Sprintf(" %d[%d,%d)", pt.seg, pt.lo, pt.hi)
		}
		out = append(out, s+"]")
	}
	return strings.Join(out, " ")
}
