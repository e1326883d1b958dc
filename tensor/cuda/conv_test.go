//go:build cuda

package cuda

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// TestConvVecMatchesGeneric checks the 16-byte-vector convolution kernels conv1d_silu_segs_k{2,3,4} against the
// element-wise conv1d_silu_segs bit for bit (outputs and kept histories) on random segments of 1 … 300 rows (and
// empty ones) continuing cached bf16 states, FromZero segments of the call (before or after them, shorter than the
// kernel or not) and nothing; with fp32 and bf16 weights, dense inputs and column views, few segments (descriptors
// as kernel parameters) and many (uploaded), and channel counts that leave a block's columns partly empty. A launch
// profile checks which kernel ran.
func TestConvVecMatchesGeneric(t *testing.T) {
	r := newRand(t)
	gb := NewOn(dev)
	defer gb.Trim()
	defer func() { convVec = true }()
	for _, c := range []struct {
		name         string
		ch, kw       int
		f32w, view   bool
		nseg, maxLen int
	}{
		{"kev/k4/f32w/view", 8192, 4, true, true, 7, 300},
		{"k4/bf16w", 296, 4, false, false, 12, 300},
		{"k3/f32w/view", 72, 3, true, true, 16, 300},
		{"k2/bf16w", 64, 2, false, false, 9, 300},
		{"k4/uploaded/short", 136, 4, true, true, 60, 5},
		{"k3/uploaded", 264, 3, false, true, 150, 40},
		{"k2/uploaded/short", 16, 2, true, false, 40, 3},
		{"kev/k4/uploaded/many", 8192, 4, false, true, 448, 60}, // 64 requests of a state and six questions
	} {
		t.Run(c.name, func(t *testing.T) {
			segs := make([]tensor.Segment, c.nseg)
			next := make([]bool, c.nseg) // continues another segment of the call, chosen below
			nPrefix, n := 0, 0
			for i := range segs {
				s := tensor.Segment{Len: 1 + r.IntN(c.maxLen), Keep: r.IntN(3) == 0}
				if r.IntN(8) == 0 {
					s.Len = 0
				}
				switch r.IntN(3) {
				case 0:
					s.From, s.Index = tensor.FromPrefix, nPrefix
					nPrefix++
				case 1:
					next[i] = true
				}
				segs[i] = s
				n += s.Len
			}
			var zero []int
			for i, s := range segs {
				if s.From == tensor.FromZero && !next[i] {
					zero = append(zero, i)
				}
			}
			for i := range segs {
				if next[i] && len(zero) > 0 {
					segs[i].From, segs[i].Index = tensor.FromSegment, zero[r.IntN(len(zero))]
				}
			}
			var x tensor.Tensor
			var frees []tensor.Tensor
			if c.view {
				p := hostBits(t, gb, randBF16(r, n*(c.ch+16), 2), n, c.ch+16)
				vs, err := gb.SplitCols(p, 8, c.ch, 8)
				if err != nil {
					t.Fatal(err)
				}
				x = vs[1]
				frees = append(frees, append(vs, p)...)
			} else {
				x = hostBits(t, gb, randBF16(r, n*c.ch, 2), n, c.ch)
				frees = append(frees, x)
			}
			var w tensor.Tensor
			if c.f32w {
				var err error
				if w, err = gb.FromFloat32([]int{c.ch, c.kw}, randVals(r, c.ch*c.kw, 0.5)); err != nil {
					t.Fatal(err)
				}
			} else {
				w = hostBits(t, gb, randBF16(r, c.ch*c.kw, 0.5), c.ch, c.kw)
			}
			frees = append(frees, w)
			states := make([]tensor.Tensor, nPrefix)
			for i := range states {
				states[i] = hostBits(t, gb, randBF16(r, (c.kw-1)*c.ch, 2), c.kw-1, c.ch)
			}
			frees = append(frees, states...)
			defer func() { gb.Free(frees...) }()

			run := func(vec bool, want string) ([]float32, [][]float32) {
				t.Helper()
				convVec = vec
				if err := dev.Do(func(q *Queue) error { return q.beginProfile() }); err != nil {
					t.Fatal(err)
				}
				y, kept, err := gb.CausalConv1dSiLUSegments(x, w, states, segs)
				var ts []launchTime
				if perr := dev.Do(func(q *Queue) error {
					var err error
					ts, err = q.endProfile()
					return err
				}); perr != nil {
					t.Fatal(perr)
				}
				if err != nil {
					t.Fatal(err)
				}
				var ran []string
				for _, l := range ts {
					if strings.HasPrefix(l.Name, "segs.conv1d_silu_segs") {
						ran = append(ran, l.Name)
					}
				}
				if len(ran) != 1 || ran[0] != want {
					t.Fatalf("convVec = %v ran %v, want %s", vec, ran, want)
				}
				yv, err := gb.ToHost(y)
				if err != nil {
					t.Fatal(err)
				}
				kv := make([][]float32, len(kept))
				for i, k := range kept {
					if k != nil {
						if kv[i], err = gb.ToHost(k); err != nil {
							t.Fatal(err)
						}
					}
				}
				gb.Free(append(kept, y)...)
				return yv, kv
			}
			wantY, wantK := run(false, "segs.conv1d_silu_segs")
			gotY, gotK := run(true, fmt.Sprintf("segs.conv1d_silu_segs_k%d", c.kw))
			if i := sameBits(gotY, wantY); i >= 0 {
				t.Fatalf("y[%d, %d] = %v, the element-wise kernel gives %v (segments %v)", i/c.ch, i%c.ch, at(gotY, i), at(wantY, i), segs)
			}
			for i := range segs {
				if (gotK[i] == nil) != (wantK[i] == nil) {
					t.Fatalf("segment %d: kept %v by the vector kernels, %v by the element-wise one", i, gotK[i] != nil, wantK[i] != nil)
				}
				if j := sameBits(gotK[i], wantK[i]); gotK[i] != nil && j >= 0 {
					t.Fatalf("kept history of segment %d differs at %d: %v, want %v", i, j, at(gotK[i], j), at(wantK[i], j))
				}
			}
			nz := 0
			for _, v := range wantY {
				if v != 0 {
					nz++
				}
			}
			if nz < len(wantY)/2 {
				t.Fatalf("only %d of %d outputs are nonzero", nz, len(wantY))
			}
		})
	}
}
