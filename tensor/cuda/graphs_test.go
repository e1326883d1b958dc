//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/kevgo/kev/layers"
)

// graphRows runs bt inside Backend.Run (recorded, replayed as a graph where it can) and returns each row's final
// hidden states, freeing the states the batch kept.
func graphRows(b *Backend, m *layers.Model, bt *layers.Batch, d int) ([][]float32, error) {
	var rows [][]float32
	err := b.Run(func() error {
		out, err := m.Forward(bt)
		if err != nil {
			return err
		}
		defer out.Free()
		parts := make([][]float32, len(out.Hidden))
		for i, h := range out.Hidden {
			if parts[i], err = b.ToHost(h); err != nil {
				return err
			}
		}
		for r, at := range out.At {
			rows = append(rows, parts[at.Part][at.Off*d:(at.Off+len(bt.Rows[r].IDs))*d])
		}
		for _, st := range out.States {
			if st != nil {
				st.Free()
			}
		}
		return nil
	})
	return rows, err
}

// sameRows reports the first element where got and want differ in their bits.
func sameRows(got, want [][]float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d rows, want %d", len(got), len(want))
	}
	for r := range want {
		for e := range want[r] {
			if math.Float32bits(got[r][e]) != math.Float32bits(want[r][e]) {
				return fmt.Errorf("row %d element %d = %g, eager %g", r, e, got[r][e], want[r][e])
			}
		}
	}
	return nil
}

// TestPassGraphs runs batches eagerly (graphs off), then each several times with graphs on, and expects every
// replay bit for bit equal to the eager pass: new states with rows, rows on a cached state, random batches of
// both, and pairs of batches with the same structure but other token ids (the same record, so the second
// replays the first one's graph with its own uploaded ids). Then one graph kept at most: evictions, still equal.
func TestPassGraphs(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	defer dev.restoreGraphs()
	c := invariantConfigs()["wide"]
	m, err := layers.New(gb, modelWeights(r, c))
	if err != nil {
		t.Fatal(err)
	}
	ids := func(n int) []int32 { return randomIDs(r, n, c.VocabSize) }
	kept, _, err := m.Prefill(ids(150))
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Free()
	kept2, _, err := m.Prefill(ids(150)) // another state of the same length, elsewhere in memory
	if err != nil {
		t.Fatal(err)
	}
	defer kept2.Free()
	newBatch := func(text int, rows ...int) *layers.Batch {
		bt := &layers.Batch{New: []layers.NewState{{IDs: ids(text)}}}
		for _, n := range rows {
			bt.Rows = append(bt.Rows, layers.Row{IDs: ids(n)})
		}
		return bt
	}
	cachedOn := func(st *layers.State, rows ...int) *layers.Batch {
		bt := &layers.Batch{}
		for _, n := range rows {
			bt.Rows = append(bt.Rows, layers.Row{IDs: ids(n), Cached: st})
		}
		return bt
	}
	cachedBatch := func(rows ...int) *layers.Batch { return cachedOn(kept, rows...) }
	randomBatch := func() *layers.Batch {
		bt := &layers.Batch{}
		for k := range 1 + r.IntN(4) {
			bt.New = append(bt.New, layers.NewState{IDs: ids(1 + r.IntN(400)), Keep: r.IntN(2) == 0})
			for range 1 + r.IntN(3) {
				bt.Rows = append(bt.Rows, layers.Row{IDs: ids(1 + r.IntN(40)), New: k})
			}
		}
		for range r.IntN(4) {
			bt.Rows = append(bt.Rows, layers.Row{IDs: ids(1 + r.IntN(40)), Cached: kept})
		}
		return bt
	}
	type tc struct {
		name string
		bt   *layers.Batch
		twin int  // ≥ 0: the index of a batch with the same structure, run (and captured) before it
		must bool // the twin's graph must replay it (else it may: other token counts may launch other kernels)
	}
	cases := []tc{
		{"new 300 + 2 rows", newBatch(300, 40, 40), -1, false}, {"same structure, other ids", newBatch(300, 40, 40), 0, true},
		{"6 rows on a cached state", cachedBatch(40, 40, 40, 40, 40, 40), -1, false},
		{"6 rows, other ids", cachedBatch(40, 40, 40, 40, 40, 40), 2, true},
		{"6 rows on another cached state", cachedOn(kept2, 40, 40, 40, 40, 40, 40), 2, true}, // other addresses
		{"new 290 + 2 rows", newBatch(290, 37, 44), 0, false},                                // other grids
	}
	for i := range 4 {
		cases = append(cases, tc{fmt.Sprintf("random %d", i), randomBatch(), -1, false})
	}
	if err := dev.SetGraphs(0); err != nil {
		t.Fatal(err)
	}
	if _, on := gb.GraphCounts(); on {
		t.Fatal("graphs on after SetGraphs(0)")
	}
	eager := make([][][]float32, len(cases))
	for i, c0 := range cases {
		if eager[i], err = graphRows(gb, m, c0.bt, c.HiddenSize); err != nil {
			t.Fatalf("%s eager: %v", c0.name, err)
		}
	}
	if err := dev.SetGraphs(16); err != nil {
		t.Fatal(err)
	}
	for i, c0 := range cases {
		before, _ := gb.GraphCounts()
		for k := range 3 {
			got, err := graphRows(gb, m, c0.bt, c.HiddenSize)
			if err != nil {
				t.Fatalf("%s run %d: %v", c0.name, k, err)
			}
			if err := sameRows(got, eager[i]); err != nil {
				t.Errorf("%s run %d with graphs: %v", c0.name, k, err)
			}
			if k == 0 && c0.twin >= 0 {
				after, _ := gb.GraphCounts()
				switch {
				case after.Replays == before.Replays && c0.must:
					t.Errorf("%s: its first pass was not replayed from %s's graph (shapes differ: %+v → %+v)",
						c0.name, cases[c0.twin].name, before, after)
				case after.Replays == before.Replays:
					t.Logf("%s: its first pass was not replayed from %s's graph (other kernels)", c0.name, cases[c0.twin].name)
				default:
					t.Logf("%s: replayed from %s's graph, %d nodes set", c0.name, cases[c0.twin].name, after.Updated-before.Updated)
				}
			}
		}
		after, _ := gb.GraphCounts()
		if after.Replays-before.Replays < 1 {
			t.Errorf("%s: 3 passes, %d replays (%+v → %+v)", c0.name, after.Replays-before.Replays, before, after)
		}
		// The twin runs again, with its own ids, from the same graph.
		if c0.twin >= 0 {
			got, err := graphRows(gb, m, cases[c0.twin].bt, c.HiddenSize)
			if err == nil {
				err = sameRows(got, eager[c0.twin])
			}
			if err != nil {
				t.Errorf("%s after %s: %v", cases[c0.twin].name, c0.name, err)
			}
		}
	}
	st, on := gb.GraphCounts()
	t.Logf("graphs: %+v", st)
	if !on || st.Captured == 0 || st.Failed != 0 || st.Dropped != 0 || st.Kept == 0 || st.Kept > 16 || st.Updated == 0 {
		t.Errorf("counters %+v on %v", st, on)
	}
	if cp, k, p, f, rp, ea, on2 := gb.GraphStats(); cp != st.Captured || k != st.Kept || p != st.Pending ||
		f != st.Failed+st.Dropped || rp != st.Replays || ea != st.Eager || !on2 {
		t.Errorf("GraphStats %d %d %d %d %d %d %v, GraphCounts %+v", cp, k, p, f, rp, ea, on2, st)
	}
	// One graph kept at most: alternating structures evict each other, answers stay right.
	if err := dev.SetGraphs(1); err != nil {
		t.Fatal(err)
	}
	before, _ := gb.GraphCounts()
	for _, i := range []int{0, 0, 2, 2, 0, 0, 6, 6, 2} {
		got, err := graphRows(gb, m, cases[i].bt, c.HiddenSize)
		if err == nil {
			err = sameRows(got, eager[i])
		}
		if err != nil {
			t.Errorf("%s, one graph kept: %v", cases[i].name, err)
		}
	}
	after, _ := gb.GraphCounts()
	t.Logf("one graph kept: %+v → %+v", before, after)
	if after.Kept > 1 || after.Evicted-before.Evicted < 2 || after.Captured-before.Captured < 3 {
		t.Errorf("one graph kept: counters %+v → %+v", before, after)
	}
}

// TestPassGraphsOffUnderProfile checks that a launch profile turns recording off: its events see every launch.
func TestPassGraphsOffUnderProfile(t *testing.T) {
	if err := dev.SetGraphs(defaultGraphs); err != nil {
		t.Fatal(err)
	}
	defer dev.restoreGraphs()
	err := dev.Run(func() error {
		return dev.Do(func(q *Queue) error {
			if !q.recording() {
				return fmt.Errorf("Run with graphs on does not record")
			}
			if err := q.beginProfile(); err != nil {
				return err
			}
			rec := q.recording()
			_, err := q.endProfile()
			if rec {
				return fmt.Errorf("recording under a launch profile")
			}
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPassGraphsSegments cuts passes into records of a few operations and stages into a tiny buffer, so that
// records end inside operations (their staged bytes kept for their later launches) and uploads overflow to the
// eager path; replays must still equal the eager passes bit for bit.
func TestPassGraphsSegments(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	defer dev.restoreGraphs()
	ops, limit := segmentOps, stageLimit
	defer func() { segmentOps, stageLimit = ops, limit }()
	c := invariantConfigs()["wide"]
	m, err := layers.New(gb, modelWeights(r, c))
	if err != nil {
		t.Fatal(err)
	}
	ids := func(n int) []int32 { return randomIDs(r, n, c.VocabSize) }
	bts := []*layers.Batch{
		{New: []layers.NewState{{IDs: ids(700)}, {IDs: ids(90)}}, Rows: []layers.Row{{IDs: ids(30)}, {IDs: ids(12), New: 1}}},
		{New: []layers.NewState{{IDs: ids(5)}}, Rows: []layers.Row{{IDs: ids(40)}, {IDs: ids(40)}, {IDs: ids(3)}}},
	}
	if err := dev.SetGraphs(0); err != nil {
		t.Fatal(err)
	}
	eager := make([][][]float32, len(bts))
	for i, bt := range bts {
		if eager[i], err = graphRows(gb, m, bt, c.HiddenSize); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.SetGraphs(64); err != nil {
		t.Fatal(err)
	}
	for _, sz := range []struct{ ops, limit int }{{7, 3000}, {1, 1 << 12}, {31, 8 << 10}} {
		segmentOps, stageLimit = sz.ops, sz.limit
		before, _ := gb.GraphCounts()
		for i, bt := range bts {
			for k := range 3 {
				got, err := graphRows(gb, m, bt, c.HiddenSize)
				if err == nil {
					err = sameRows(got, eager[i])
				}
				if err != nil {
					t.Errorf("records of %d operations, %d staged bytes: batch %d run %d: %v", sz.ops, sz.limit, i, k, err)
				}
			}
		}
		after, _ := gb.GraphCounts()
		t.Logf("records of %d operations, %d staged bytes: %+v → %+v", sz.ops, sz.limit, before, after)
		if after.Replays-before.Replays < 4 || after.Failed != before.Failed {
			t.Errorf("records of %d operations: counters %+v → %+v", sz.ops, before, after)
		}
	}
}
