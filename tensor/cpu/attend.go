package cpu

import (
	"math"
	"slices"
	"sync"

	"github.com/kevgo/kev/tensor"
)

// Attention runs in the flash form: a job takes a block of query rows of one
// segment and one key/value head (all the query heads of its group), walks
// the keys in blocks that stay in cache, and keeps a running maximum, sum
// and weighted value sum per row:
//
//	m' = max(m, max_j s_j), α = exp(m − m'), p_j = exp(s_j − m'),
//	l' = α·l + Σ_j p_j, o' = α·o + Σ_j p_j v_j, and at the end o/l.
//
// Key blocks sit at fixed positions — the prefix in blocks of attnKeyBlock
// from its first key, then the segment's own rows in blocks of attnKeyBlock
// from its first row — and each row takes the keys of a block that it sees
// (a prefix) in one product whose length depends on the row alone. So a
// row's output has the same bits whatever other rows, blocks or segments
// share the call.

// attnKeyBlock is the number of keys a block holds: 64 keys of d 256 are
// 64 KiB of keys and 64 KiB of values.
const attnKeyBlock = 64

// attnRows is about how many query vectors (query rows × heads of a group) a
// job takes at once (a variable so that tests can change the blocking).
var attnRows = 64

// attnSeg is one segment of an attention call: its rows and the prefix keys
// and values ([p, KV·D]) it sees before them.
type attnSeg struct {
	start, n int
	kp, vp   []float32
	p        int
}

// attnJob is one block of query rows [r0, r1) (within its segment) of one
// key/value head.
type attnJob struct {
	seg, kh, r0, r1 int
	cost            int
}

// attnScratch is one goroutine's buffers.
type attnScratch struct {
	rows, d int       // the sizes it was made for
	q, o, s []float32 // packed queries, running outputs [rows, d]; scores [rows, attnKeyBlock]
	m, l    []float32 // running maximum and sum per query vector
	keep    []int     // keys each query vector takes from the current block
}

// attend runs causal grouped-query attention over segments. A segment's
// row t sees the prefix keys, then its own rows up to t.
func (b *Backend) attend(qs, ks, vs []float32, n int, segs []attnSeg, c tensor.AttentionConfig) *Tensor {
	d, group := c.HeadDim, c.Heads/c.KVHeads
	out := newF32(n, c.Heads*d)
	qb := max(1, attnRows/group) // query rows a job
	var jobs []attnJob
	for i, s := range segs {
		for r0 := 0; r0 < s.n; r0 += qb {
			r1 := min(r0+qb, s.n)
			for kh := 0; kh < c.KVHeads; kh++ {
				jobs = append(jobs, attnJob{seg: i, kh: kh, r0: r0, r1: r1, cost: (r1 - r0) * (s.p + r1)})
			}
		}
	}
	// Dearest first, so the cheap ones fill the gaps at the end.
	slices.SortStableFunc(jobs, func(a, b attnJob) int { return b.cost - a.cost })
	rows := qb * group
	var mu sync.Mutex
	var held []*attnScratch
	b.each(len(jobs), func() func(int) {
		w := getAttnScratch(rows, d)
		mu.Lock()
		held = append(held, w)
		mu.Unlock()
		return func(j int) { w.run(qs, ks, vs, out.f32, &segs[jobs[j].seg], jobs[j], c) }
	})
	for _, w := range held {
		attnScratches.Put(w)
	}
	return out
}

// attnScratches recycles goroutine buffers between calls.
var attnScratches sync.Pool

// getAttnScratch returns buffers for rows query vectors of d, recycled when
// at hand.
func getAttnScratch(rows, d int) *attnScratch {
	if w, ok := attnScratches.Get().(*attnScratch); ok && w.rows == rows && w.d == d {
		return w
	}
	return &attnScratch{rows: rows, d: d,
		q: make([]float32, rows*d), o: make([]float32, rows*d), s: make([]float32, rows*attnKeyBlock),
		m: make([]float32, rows), l: make([]float32, rows), keep: make([]int, rows),
	}
}

// run computes one job's outputs.
func (w *attnScratch) run(qs, ks, vs, out []float32, sg *attnSeg, jb attnJob, c tensor.AttentionConfig) {
	d, group, kvw, qw := c.HeadDim, c.Heads/c.KVHeads, c.KVHeads*c.HeadDim, c.Heads*c.HeadDim
	rows := (jb.r1 - jb.r0) * group
	// Query vector i·group+g is row r0+i's head kh·group+g.
	for i := jb.r0; i < jb.r1; i++ {
		t := sg.start + i
		copy(w.q[(i-jb.r0)*group*d:(i-jb.r0+1)*group*d], qs[t*qw+jb.kh*group*d:t*qw+(jb.kh+1)*group*d])
	}
	m, l, o := w.m[:rows], w.l[:rows], w.o[:rows*d]
	for i := range m {
		m[i] = float32(math.Inf(-1))
	}
	clear(l)
	clear(o)
	keep := w.keep[:rows]
	// The prefix: every row sees every key.
	for k0 := 0; k0 < sg.p; k0 += attnKeyBlock {
		kn := min(attnKeyBlock, sg.p-k0)
		for i := range keep {
			keep[i] = kn
		}
		off := k0*kvw + jb.kh*d
		w.block(sg.kp[off:], sg.vp[off:], kvw, kn, rows, d, c.Scale)
	}
	// The segment's own rows: row i sees rows 0..i.
	for k0 := 0; k0 < jb.r1; k0 += attnKeyBlock {
		kn := min(attnKeyBlock, jb.r1-k0)
		for i := range keep {
			keep[i] = min(max(jb.r0+i/group-k0+1, 0), attnKeyBlock)
		}
		off := (sg.start+k0)*kvw + jb.kh*d
		w.block(ks[off:], vs[off:], kvw, kn, rows, d, c.Scale)
	}
	for i := 0; i < rows; i++ {
		t, h := sg.start+jb.r0+i/group, jb.kh*group+i%group
		dst := out[t*qw+h*d : t*qw+(h+1)*d]
		inv := 1 / l[i]
		for x, v := range o[i*d : (i+1)*d] {
			dst[x] = v * inv
		}
	}
}

// block folds one block of kn keys and values (rows of stride ld) into the
// running state of the first rows query vectors; query vector i takes the
// block's first keep[i] keys (none: the block is skipped for it).
func (w *attnScratch) block(kb, vb []float32, ld, kn, rows, d int, scale float32) {
	const kbw = attnKeyBlock
	s := w.s
	gemmNT(rows, kn, d, w.q, d, kb, ld, s, kbw, false)
	for i := 0; i < rows; i++ {
		nk := w.keep[i]
		if nk == 0 {
			continue
		}
		si := s[i*kbw : i*kbw+nk]
		mx := w.m[i]
		for j := range si {
			si[j] *= scale
			mx = max(mx, si[j])
		}
		alpha := float32(math.Exp(float64(w.m[i] - mx)))
		for j, v := range si {
			si[j] = v - mx
		}
		expVec(si, si)
		var sum float32
		for _, e := range si {
			sum += e
		}
		w.m[i], w.l[i] = mx, w.l[i]*alpha+sum
		if alpha != 1 {
			oi := w.o[i*d : (i+1)*d]
			for x := range oi {
				oi[x] *= alpha
			}
		}
	}
	// o += p·v, one product for each run of query vectors that take the same
	// number of keys.
	for i := 0; i < rows; {
		nk, e := w.keep[i], i+1
		for e < rows && w.keep[e] == nk {
			e++
		}
		if nk > 0 {
			gemmNN(e-i, d, nk, s[i*kbw:], kbw, vb, ld, w.o[i*d:], d, true)
		}
		i = e
	}
}
