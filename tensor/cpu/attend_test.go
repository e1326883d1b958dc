package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// attnCase is a batch of attention segments with random inputs.
type attnCase struct {
	c        tensor.AttentionConfig
	q, k, v  []float32
	kp, vp   [][]float32 // prefixes
	segs     []tensor.Segment
	prefixes []int
}

func newAttnCase(r *rand.Rand, c tensor.AttentionConfig, prefixes []int, segs []tensor.Segment) *attnCase {
	n := 0
	for _, s := range segs {
		n += s.Len
	}
	kvw := c.KVHeads * c.HeadDim
	a := &attnCase{c: c, segs: segs, prefixes: prefixes,
		q: randFloats(r, n*c.Heads*c.HeadDim), k: randFloats(r, n*kvw), v: randFloats(r, n*kvw)}
	for _, p := range prefixes {
		a.kp, a.vp = append(a.kp, randFloats(r, p*kvw)), append(a.vp, randFloats(r, p*kvw))
	}
	return a
}

// run returns AttentionSegments' output for the case.
func (a *attnCase) run(t testing.TB, b *Backend) []float32 {
	t.Helper()
	kvw, n := a.c.KVHeads*a.c.HeadDim, len(a.k)/(a.c.KVHeads*a.c.HeadDim)
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
	y, err := b.AttentionSegments(up(n, a.c.Heads*a.c.HeadDim, a.q), up(n, kvw, a.k), up(n, kvw, a.v), kps, vps, a.segs, a.c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.ToHost(y)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAttentionBlockingInvariant checks that a row's output has the same bits
// whatever query block, thread count or batch it runs in, and that it
// matches a float64 softmax.
func TestAttentionBlockingInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	c := tensor.AttentionConfig{Heads: 4, KVHeads: 2, HeadDim: 24}
	c.Scale = float32(1 / math.Sqrt(float64(c.HeadDim)))
	prefixes := []int{150, 64}
	segs := []tensor.Segment{
		{Len: 70, From: tensor.FromPrefix, Index: 0},
		{Len: 131},
		{Len: 3, From: tensor.FromPrefix, Index: 1},
		{Len: 9, From: tensor.FromSegment, Index: 1},
		{Len: 65, From: tensor.FromPrefix, Index: 0},
	}
	a := newAttnCase(r, c, prefixes, segs)
	want := a.run(t, &Backend{Threads: 1})
	defer func(v int) { attnRows = v }(attnRows)
	for _, rows := range []int{2, 6, 20, 64, 1000} {
		attnRows = rows
		for _, threads := range []int{1, 3, 8} {
			got := a.run(t, &Backend{Threads: threads})
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("query block %d, %d threads: out[%d] = %v, with the default blocking %v", rows, threads, i, got[i], want[i])
				}
			}
		}
	}
	// Each segment alone (with its prefix) gives the same bits.
	kvw, qw := c.KVHeads*c.HeadDim, c.Heads*c.HeadDim
	start := 0
	for i, s := range segs {
		if s.From == tensor.FromSegment {
			start += s.Len
			continue
		}
		alone := &attnCase{c: c, segs: []tensor.Segment{{Len: s.Len, From: s.From}},
			q: a.q[start*qw : (start+s.Len)*qw], k: a.k[start*kvw : (start+s.Len)*kvw], v: a.v[start*kvw : (start+s.Len)*kvw]}
		if s.From == tensor.FromPrefix {
			alone.prefixes, alone.kp, alone.vp = []int{prefixes[s.Index]}, [][]float32{a.kp[s.Index]}, [][]float32{a.vp[s.Index]}
		}
		got := alone.run(t, &Backend{Threads: 2})
		for j := range got {
			if math.Float32bits(got[j]) != math.Float32bits(want[start*qw+j]) {
				t.Fatalf("segment %d alone: out[%d] = %v, in the batch %v", i, j, got[j], want[start*qw+j])
			}
		}
		start += s.Len
	}
	// Against a float64 softmax over the keys each row sees.
	start = 0
	starts := []int{}
	for _, s := range segs {
		starts = append(starts, start)
		start += s.Len
	}
	d, group := c.HeadDim, c.Heads/c.KVHeads
	for si, s := range segs {
		var kp, vp []float32
		switch s.From {
		case tensor.FromPrefix:
			kp, vp = a.kp[s.Index], a.vp[s.Index]
		case tensor.FromSegment:
			j := s.Index
			kp, vp = a.k[starts[j]*kvw:(starts[j]+segs[j].Len)*kvw], a.v[starts[j]*kvw:(starts[j]+segs[j].Len)*kvw]
		}
		p := len(kp) / kvw
		for i := 0; i < s.Len; i++ {
			t0 := starts[si] + i
			for h := 0; h < c.Heads; h++ {
				kh := h / group
				key := func(j int) ([]float32, []float32) {
					if j < p {
						return kp[j*kvw+kh*d : j*kvw+(kh+1)*d], vp[j*kvw+kh*d : j*kvw+(kh+1)*d]
					}
					r := starts[si] + j - p
					return a.k[r*kvw+kh*d : r*kvw+(kh+1)*d], a.v[r*kvw+kh*d : r*kvw+(kh+1)*d]
				}
				nk := p + i + 1
				sc := make([]float64, nk)
				mx := math.Inf(-1)
				for j := range sc {
					kv, _ := key(j)
					for x := range kv {
						sc[j] += float64(a.q[t0*qw+h*d+x]) * float64(kv[x])
					}
					sc[j] *= float64(c.Scale)
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for x := 0; x < d; x++ {
					var o float64
					for j := range sc {
						_, vv := key(j)
						o += sc[j] / sum * float64(vv[x])
					}
					if got := want[t0*qw+h*d+x]; math.Abs(float64(got)-o) > 1e-5 {
						t.Fatalf("segment %d row %d head %d: out[%d] = %v, float64 %v", si, i, h, x, got, o)
					}
				}
			}
		}
	}
}
