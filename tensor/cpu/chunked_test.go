package cpu

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// TestAttentionRows runs a batch's query rows in pieces, one call each on the same keys (which the backend keeps
// transposed between calls), cut inside and on the edges of key blocks, some segments with no rows in a piece:
// each query row has the bits AttentionSegments gives it in the whole call, whatever the threads and query blocks.
func TestAttentionRows(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	c := tensor.AttentionConfig{Heads: 4, KVHeads: 2, HeadDim: 24}
	c.Scale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	segs := []tensor.Segment{
		{Len: 300},
		{Len: 301, From: tensor.FromPrefix, Index: 0},
		{Len: 7, From: tensor.FromSegment, Index: 0},
		{Len: 129, From: tensor.FromPrefix, Index: 1},
	}
	a := newAttnCase(r, c, []int{150, 64}, segs)
	want := a.run(t, &Backend{Threads: 1})
	kvw, qw := c.KVHeads*c.HeadDim, c.Heads*c.HeadDim
	starts := make([]int, len(segs))
	for i := 1; i < len(segs); i++ {
		starts[i] = starts[i-1] + segs[i-1].Len
	}
	defer func(v int) { attnRows = v }(attnRows)
	for _, tc := range []struct {
		name    string
		cuts    [][]int // per segment, where its pieces end
		rows    int
		threads int
	}{
		{"whole", [][]int{{300}, {301}, {7}, {129}}, 96, 2},
		{"inside blocks", [][]int{{131, 300}, {77, 200, 301}, {3, 7}, {100, 129}}, 96, 2},
		{"on block edges", [][]int{{128, 256, 300}, {256, 301}, {0, 7}, {128, 129}}, 20, 3},
		{"row by row at the end", [][]int{{298, 299, 300}, {300, 301}, {6, 7}, {127, 128, 129}}, 6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attnRows = tc.rows
			b := &Backend{Threads: tc.threads}
			up := func(rows, cols int, d []float32) tensor.Tensor {
				x, err := b.FromFloat32([]int{rows, cols}, d)
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			n := len(a.k) / kvw
			k, v := up(n, kvw, a.k), up(n, kvw, a.v)
			defer b.Free(k, v)
			var kps, vps []tensor.Tensor
			for i, p := range a.prefixes {
				kps, vps = append(kps, up(p, kvw, a.kp[i])), append(vps, up(p, kvw, a.vp[i]))
			}
			done := make([]int, len(segs))
			for piece := 0; ; piece++ {
				lo, hi := make([]int, len(segs)), make([]int, len(segs))
				var q, wantRows []float32
				more := false
				for i := range segs {
					lo[i], hi[i] = done[i], done[i]
					if piece < len(tc.cuts[i]) {
						hi[i] = tc.cuts[i][piece]
						more = true
					}
					q = append(q, a.q[(starts[i]+lo[i])*qw:(starts[i]+hi[i])*qw]...)
					wantRows = append(wantRows, want[(starts[i]+lo[i])*qw:(starts[i]+hi[i])*qw]...)
					done[i] = hi[i]
				}
				if !more {
					break
				}
				y, err := b.AttentionRows(up(len(q)/qw, qw, q), k, v, kps, vps, segs, lo, hi, c)
				if err != nil {
					t.Fatal(err)
				}
				got, err := b.ToHost(y)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(wantRows) {
					t.Fatalf("piece %d: %d values, want %d", piece, len(got), len(wantRows))
				}
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(wantRows[i]) {
						t.Fatalf("piece %d, query row %d, column %d: %v, want %v (the whole call's)", piece, i/qw, i%qw, got[i], wantRows[i])
					}
				}
			}
			if kt := k.(*Tensor); len(kt.keyRuns) == 0 {
				t.Error("no transposed keys kept with k")
			}
			b.Free(k)
			if kt := k.(*Tensor); kt.keyRuns != nil {
				t.Error("the transposed keys outlived k")
			}
		})
	}
}

// TestAttentionRowsErrors checks that bad row ranges and shapes are errors, not panics.
func TestAttentionRowsErrors(t *testing.T) {
	b := New()
	c := tensor.AttentionConfig{Heads: 2, KVHeads: 1, HeadDim: 4, Scale: 0.5}
	m := func(rows, cols int) tensor.Tensor {
		x, err := b.FromFloat32([]int{rows, cols}, make([]float32, rows*cols))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	segs := []tensor.Segment{{Len: 3}, {Len: 2, From: tensor.FromSegment, Index: 0}}
	for _, tc := range []struct {
		name   string
		q      tensor.Tensor
		lo, hi []int
		c      tensor.AttentionConfig
		want   string
	}{
		{"ranges", m(5, 8), []int{0}, []int{3, 2}, c, "1 and 2 row ranges for 2 segments"},
		{"negative", m(5, 8), []int{-1, 0}, []int{3, 2}, c, "rows [-1, 3) of segment 0"},
		{"backwards", m(5, 8), []int{2, 0}, []int{1, 2}, c, "rows [2, 1) of segment 0"},
		{"past the segment", m(1, 8), []int{0, 2}, []int{0, 3}, c, "rows [2, 3) of segment 1"},
		{"query rows", m(5, 8), []int{1, 0}, []int{3, 2}, c, "q has shape [5 8], want [4, 8]"},
		{"config", m(5, 8), []int{0, 0}, []int{3, 2}, tensor.AttentionConfig{Heads: 3, KVHeads: 2, HeadDim: 4}, "bad config"},
	} {
		if _, err := b.AttentionRows(tc.q, m(5, 4), m(5, 4), nil, nil, segs, tc.lo, tc.hi, tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestConcatRows stacks matrices and rejects what cannot be stacked.
func TestConcatRows(t *testing.T) {
	b := New()
	x, _ := b.FromFloat32([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	y, _ := b.FromFloat32([]int{0, 3}, nil)
	z, _ := b.FromFloat32([]int{1, 3}, []float32{7, 8, 9})
	got, err := b.ConcatRows(x, y, z)
	if err != nil {
		t.Fatal(err)
	}
	vals, _ := b.ToHost(got)
	if s := got.Shape(); s[0] != 3 || s[1] != 3 || len(vals) != 9 || vals[0] != 1 || vals[8] != 9 || vals[6] != 7 {
		t.Errorf("shape %v, values %v", s, vals)
	}
	w, _ := b.FromFloat32([]int{1, 2}, []float32{1, 2})
	h, _ := b.FromBits(tensor.BF16, []int{1, 3}, []uint16{0, 0, 0})
	for _, tc := range []struct {
		name string
		xs   []tensor.Tensor
	}{{"none", nil}, {"widths", []tensor.Tensor{x, w}}, {"bf16", []tensor.Tensor{x, h}}, {"nil", []tensor.Tensor{x, nil}}} {
		if _, err := b.ConcatRows(tc.xs...); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
