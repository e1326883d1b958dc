package layers

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// plain hides a backend's optional interfaces, so Forward takes its
// per-state path.
type plain struct{ tensor.Backend }

// batchCase draws a batch over two cached states: new states of several
// lengths (one over the DeltaNet chunk), rows continuing cached and new
// states in mixed order, rows of one token, and a new state nothing reads.
func batchCase(r *rand.Rand, c int, cached []*State) *Batch {
	ids := func(n int) []int32 { return randomIDs(r, n, c) }
	bt := &Batch{New: []NewState{{IDs: ids(5), Keep: true}, {IDs: ids(67)}, {IDs: ids(1), Keep: true}, {IDs: ids(9)}, {IDs: ids(4)}}}
	rows := []struct {
		n      int
		cached int // index into cached, or −1
		new    int
	}{{3, -1, 0}, {1, 0, 0}, {7, -1, 1}, {2, 1, 0}, {4, -1, 0}, {1, -1, 2}, {5, 0, 0}, {70, -1, 3}, {2, -1, 1}, {3, 1, 0}}
	for _, x := range rows {
		row := Row{IDs: ids(x.n), New: x.new}
		if x.cached >= 0 {
			row.Cached = cached[x.cached]
		}
		bt.Rows = append(bt.Rows, row)
	}
	return bt
}

// cachedStates prefills two states of 8 and 70 tokens for batchCase, freed
// when the test ends.
func cachedStates(t *testing.T, m *Model, r *rand.Rand) []*State {
	t.Helper()
	var cached []*State
	for _, n := range []int{8, 70} {
		s, h, err := m.Prefill(randomIDs(r, n, m.Config.VocabSize))
		if err != nil {
			t.Fatal(err)
		}
		m.b.Free(h)
		t.Cleanup(s.Free)
		cached = append(cached, s)
	}
	return cached
}

// TestForwardMatchesRows runs one batch of new states and rows continuing
// cached and new states, with the batched operations and without them, and
// checks every row's final hidden states and every kept state bit for bit
// against Prefill and ContinueRows run one state and one row at a time.
func TestForwardMatchesRows(t *testing.T) {
	r := newRand(t)
	c := smallConfig()
	w := randomWeights(r, c, true)
	for _, bc := range []struct {
		name string
		b    tensor.Backend
	}{{"batched", cpu.New()}, {"batched/1thread", &cpu.Backend{Threads: 1}}, {"fallback", plain{cpu.New()}}} {
		t.Run(bc.name, func(t *testing.T) {
			m, err := New(bc.b, w)
			if err != nil {
				t.Fatal(err)
			}
			bt := batchCase(r, c.VocabSize, cachedStates(t, m, r))
			out, err := m.Forward(bt)
			if err != nil {
				t.Fatal(err)
			}
			defer out.Free()
			alone := make([]*State, len(bt.New))
			for i, ns := range bt.New {
				s, h, err := m.Prefill(ns.IDs)
				if err != nil {
					t.Fatal(err)
				}
				bc.b.Free(h)
				alone[i] = s
			}
			d := c.HiddenSize
			parts := make([][]float32, len(out.Hidden))
			for i, h := range out.Hidden {
				parts[i] = host(t, bc.b, h)
			}
			for i, row := range bt.Rows {
				st := row.Cached
				if st == nil {
					st = alone[row.New]
				}
				h, err := m.Continue(st, row.IDs)
				if err != nil {
					t.Fatal(err)
				}
				want := host(t, bc.b, h)
				at := out.At[i]
				got := parts[at.Part][at.Off*d : (at.Off+len(row.IDs))*d]
				if !equal(got, want) {
					t.Errorf("row %d: batched hidden states differ from the row run alone (rel %.3g)", i, relErr(got, f64(want)))
				}
			}
			for i, ns := range bt.New {
				s := out.States[i]
				if !ns.Keep {
					if s != nil {
						t.Errorf("new state %d: returned without Keep", i)
					}
					continue
				}
				if s == nil || s.Len != len(ns.IDs) {
					t.Fatalf("new state %d: got %+v, want a state of %d tokens", i, s, len(ns.IDs))
				}
				for l := range s.layers {
					got, want := s.layers[l], alone[i].layers[l]
					for _, p := range [][2]tensor.Tensor{{got.k, want.k}, {got.v, want.v}, {stateConv(got), stateConv(want)}, {stateRec(got), stateRec(want)}} {
						if (p[0] == nil) != (p[1] == nil) {
							t.Fatalf("new state %d layer %d: tensor presence differs", i, l)
						}
						if p[0] != nil && !equal(host(t, bc.b, p[0]), host(t, bc.b, p[1])) {
							t.Errorf("new state %d layer %d: kept state differs from Prefill's", i, l)
						}
					}
				}
				s.Free()
			}
		})
	}
}

func stateConv(l layerState) tensor.Tensor {
	if l.delta == nil {
		return nil
	}
	return l.delta.Conv
}

func stateRec(l layerState) tensor.Tensor {
	if l.delta == nil {
		return nil
	}
	return l.delta.Rec
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestForwardHiddenRowsOnly checks that a batched pass returns the rows'
// final hidden states alone, one after another, and that leaving the new
// states' rows out of the last layer's attention, projection and MLP leaves
// the rows' values bit for bit as a pass that runs every row to the end
// (Observe set), with the last layer an attention layer and a DeltaNet one.
func TestForwardHiddenRowsOnly(t *testing.T) {
	r := newRand(t)
	deltaLast := smallConfig()
	deltaLast.LayerTypes = append([]qwen35.LayerType(nil), deltaLast.LayerTypes...)
	deltaLast.LayerTypes[1], deltaLast.LayerTypes[4] = qwen35.FullAttention, qwen35.LinearAttention
	for name, c := range map[string]qwen35.Config{"attention": smallConfig(), "deltanet": deltaLast} {
		t.Run(name, func(t *testing.T) {
			b := cpu.New()
			m, err := New(b, randomWeights(r, c, true))
			if err != nil {
				t.Fatal(err)
			}
			bt := batchCase(r, c.VocabSize, cachedStates(t, m, r))
			cut, err := m.Forward(bt)
			if err != nil {
				t.Fatal(err)
			}
			defer cut.Free()
			seen := 0
			m.Observe = func(int, tensor.Tensor) { seen++ }
			whole, err := m.Forward(bt)
			m.Observe = nil
			if err != nil {
				t.Fatal(err)
			}
			defer whole.Free()
			if seen != c.NumLayers+2 {
				t.Fatalf("Observe saw %d points, want %d", seen, c.NumLayers+2)
			}
			for _, o := range []*Output{cut, whole} {
				for _, s := range o.States {
					defer s.Free()
				}
			}
			rows := 0
			for i, row := range bt.Rows {
				if cut.At[i] != (RowAt{Off: rows}) || whole.At[i] != cut.At[i] {
					t.Errorf("row %d at %+v (cut) and %+v (whole), want offset %d", i, cut.At[i], whole.At[i], rows)
				}
				rows += len(row.IDs)
			}
			if got := cut.Hidden[0].Shape(); got[0] != rows || got[1] != c.HiddenSize {
				t.Fatalf("hidden states %v, want [%d %d]", got, rows, c.HiddenSize)
			}
			if a, w := host(t, b, cut.Hidden[0]), host(t, b, whole.Hidden[0]); !equal(a, w) {
				t.Errorf("the rows' hidden states differ with the new states' rows cut at the last layer (rel %.3g)", relErr(a, f64(w)))
			}
		})
	}
}

// TestForwardErrors checks that a malformed batch is refused by name.
func TestForwardErrors(t *testing.T) {
	r := newRand(t)
	c := smallConfig()
	m, err := New(cpu.New(), randomWeights(r, c, false))
	if err != nil {
		t.Fatal(err)
	}
	freed, h, err := m.Prefill([]int32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	m.b.Free(h)
	freed.Free()
	for i, bt := range []*Batch{
		nil,
		{New: []NewState{{}}},
		{New: []NewState{{IDs: []int32{1}}}, Rows: []Row{{New: 0}}},
		{New: []NewState{{IDs: []int32{1}}}, Rows: []Row{{IDs: []int32{1}, New: 1}}},
		{Rows: []Row{{IDs: []int32{1}, Cached: freed}}},
		{New: []NewState{{IDs: []int32{int32(c.VocabSize)}}}},
	} {
		if out, err := m.Forward(bt); err == nil {
			out.Free()
			t.Errorf("batch %d: no error", i)
		} else {
			t.Logf("batch %d: %v", i, err)
		}
	}
	if out, err := m.Forward(&Batch{}); err != nil || len(out.Hidden) != 0 {
		t.Errorf("empty batch: %v, %v", out, err)
	}
}

// BenchmarkForward compares one batched pass over 16 requests (new states of
// 48 tokens, four 12-token rows each) with the per-state path.
func BenchmarkForward(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	c := smallConfig()
	c.HiddenSize, c.IntermediateSize = 256, 512
	w := randomWeights(r, c, true)
	bt := &Batch{}
	for i := range 16 {
		bt.New = append(bt.New, NewState{IDs: randomIDs(r, 48, c.VocabSize)})
		for range 4 {
			bt.Rows = append(bt.Rows, Row{IDs: randomIDs(r, 12, c.VocabSize), New: i})
		}
	}
	for _, bc := range []struct {
		name string
		b    tensor.Backend
	}{{"batched", cpu.New()}, {"each", plain{cpu.New()}}} {
		b.Run(bc.name, func(b *testing.B) {
			m, err := New(bc.b, w)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				out, err := m.Forward(bt)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, fmt.Sprintf("ms/%dreq", 16))
		})
	}
}
