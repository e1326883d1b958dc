package cpu

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// TestAttentionTails splits a batch's segments at rows that fall inside and on the edges of key blocks and runs
// their later rows alone, with every earlier row's keys: each query row has the bits AttentionSegments gives it in
// the whole call, whatever the threads and query blocks.
func TestAttentionTails(t *testing.T) {
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
		skip    []int
		rows    int
		threads int
	}{
		{"none skipped", []int{0, 0, 0, 0}, 96, 2},
		{"inside blocks", []int{131, 77, 3, 100}, 96, 2},
		{"on block edges", []int{128, 256, 0, 128}, 20, 3},
		{"all but the last row", []int{299, 300, 6, 128}, 6, 1},
		{"every row", []int{300, 301, 7, 129}, 96, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attnRows = tc.rows
			b := &Backend{Threads: tc.threads}
			var q, wantRows []float32
			for i, s := range segs {
				lo, hi := starts[i]+tc.skip[i], starts[i]+s.Len
				q = append(q, a.q[lo*qw:hi*qw]...)
				wantRows = append(wantRows, want[lo*qw:hi*qw]...)
			}
			n := len(a.k) / kvw
			up := func(rows, cols int, d []float32) tensor.Tensor {
				x, err := b.FromFloat32([]int{rows, cols}, d)
				if err != nil {
					t.Fatal(err)
				}
				return x
			}
			var kps, vps []tensor.Tensor
			for i, p := range a.prefixes {
				kps, vps = append(kps, up(p, kvw, a.kp[i])), append(vps, up(p, kvw, a.vp[i]))
			}
			y, err := b.AttentionTails(up(len(q)/qw, qw, q), up(n, kvw, a.k), up(n, kvw, a.v), kps, vps, segs, tc.skip, c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := b.ToHost(y)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(wantRows) {
				t.Fatalf("%d values, want %d", len(got), len(wantRows))
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(wantRows[i]) {
					t.Fatalf("query row %d, column %d: %v, want %v (the whole call's)", i/qw, i%qw, got[i], wantRows[i])
				}
			}
		})
	}
}

// TestAttentionTailsErrors checks that bad skips and shapes are errors, not panics.
func TestAttentionTailsErrors(t *testing.T) {
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
		name string
		q    tensor.Tensor
		skip []int
		c    tensor.AttentionConfig
		want string
	}{
		{"skips", m(5, 8), []int{0}, c, "1 skips for 2 segments"},
		{"negative skip", m(5, 8), []int{-1, 0}, c, "skip[0] = -1"},
		{"skip past the segment", m(1, 8), []int{3, 3}, c, "skip[1] = 3"},
		{"query rows", m(5, 8), []int{1, 0}, c, "q has shape [5 8], want [4, 8]"},
		{"config", m(5, 8), []int{0, 0}, tensor.AttentionConfig{Heads: 3, KVHeads: 2, HeadDim: 4}, "bad config"},
	} {
		if _, err := b.AttentionTails(tc.q, m(5, 4), m(5, 4), nil, nil, segs, tc.skip, tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
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
