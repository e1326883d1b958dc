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
//	l' = α·l + Σ_j p_j, o' = α·o + Σ_j p_j v_j, and at the end o/l,
//
// where m' stays m unless the block's largest score exceeds m by more than
// attnSlack (a weight may then reach e^attnSlack instead of 1; o/l is the
// same).
//
// Key blocks sit at fixed positions — the prefix in blocks of attnKeyBlock
// from its first key, then the segment's own rows in blocks of attnKeyBlock
// from its first row. A block is two products for all the job's query
// vectors at once: the scores against the block's keys, transposed once per
// call for every job to read, and the weights times the values, read in
// place. A row takes the keys of a block that it sees (a prefix of it); the
// weights of the keys it does not see are zero, and adding zero leaves a sum
// as it is, so a row's output has the same bits whatever other rows, blocks
// or segments share the call.

// attnKeyBlock is the number of keys a block holds, a multiple of nr: 128
// keys of d 256 are 128 KiB of keys and 128 KiB of values, in L2.
const attnKeyBlock = 128

// attnSlack is how far a block's largest score may exceed a row's running
// maximum before the maximum moves (and the row's sums are rescaled): a
// weight is then at most e^8 ≈ 3000, far inside float32's range, and most
// blocks after the first few leave the sums as they are.
const attnSlack = 8

// attnRows is about how many query vectors (query rows × heads of a group) a
// job takes at once (a variable so that tests can change the blocking).
var attnRows = 96

// attnSeg is one segment of an attention call: its query rows [start,
// start+n) of q and of the output, its own keys and values, rows [kstart,
// kstart+keys) of k and v, and the prefix keys and values ([p, KV·D]) it
// sees before them. Query i is the segment's row skip+i (AttentionRows runs
// some of a segment's rows: skip+n ≤ keys); its own keys are laid out in
// blocks from the segment's first row, whichever rows have queries.
type attnSeg struct {
	start, n           int
	kstart, keys, skip int
	kp, vp             []float32
	p                  int
}

// attnKeys is a run of n keys and values ([n, KV·D]) that segments attend
// to: their own rows, or a prefix, copied once per call into the layouts
// the products read. kt holds each key/value head's keys transposed, a
// block at a time: [KV][blocks][D][attnKeyBlock], zero past n. vh holds
// each head's values, [KV][n][D]. Both keep a block's operands in a few
// pages.
type attnKeys struct {
	k, v   []float32
	n      int
	kt, vh []float32
}

// attnJob is one block of query rows [r0, r1) (within its segment) of one
// key/value head.
type attnJob struct {
	seg, kh, r0, r1 int
	cost            int
}

// attnScratch is one goroutine's buffers.
type attnScratch struct {
	rows, d int       // the sizes it was made for (at most rows vectors a job)
	q, o, s []float32 // queries, running outputs [rows, d]; scores and weights [rows, attnKeyBlock]
	m, l    []float32 // running maximum and sum per query vector
	alpha   []float32 // a block's rescaling of each query vector's sums
	sums    []float32 // a block's sum of weights per query vector
	keep    []int     // keys each query vector takes from the current block
}

// keyID names a run of keys and values by where they lie.
type keyID struct {
	k, v *float32
	n    int
}

// recycle hands a run's transposed keys and values back for reuse.
func (r *attnKeys) recycle() {
	recycle(r.kt)
	recycle(r.vh)
	r.kt, r.vh = nil, nil
}

// attend runs causal grouped-query attention over segments. A segment's
// row t sees the prefix keys, then its own rows up to t. With keep set, the
// runs of keys it transposes stay with keep for later calls (and those keep
// holds already are used), else they are recycled when it returns.
func (b *Backend) attend(qs, ks, vs []float32, n int, segs []attnSeg, c tensor.AttentionConfig, keep *Tensor) *Tensor {
	d, group, kvw := c.HeadDim, c.Heads/c.KVHeads, c.KVHeads*c.HeadDim
	out := newF32Full(n, c.Heads*d)
	// The runs of keys, each transposed once however many segments read it.
	var runs []*attnKeys // new in this call
	ids := map[keyID]*attnKeys{}
	if keep != nil {
		keep.mu.Lock()
		defer keep.mu.Unlock()
		if keep.keyRuns == nil {
			keep.keyRuns = map[keyID]*attnKeys{}
		}
		ids = keep.keyRuns
	}
	run := func(k, v []float32, rows int) *attnKeys {
		if rows == 0 {
			return nil
		}
		id := keyID{&k[0], &v[0], rows}
		if r := ids[id]; r != nil {
			return r
		}
		r := &attnKeys{k: k, v: v, n: rows}
		ids[id] = r
		runs = append(runs, r)
		return r
	}
	own, pre := make([]*attnKeys, len(segs)), make([]*attnKeys, len(segs))
	for i, s := range segs {
		if s.n == 0 {
			continue // no queries: its keys are not read
		}
		k0, k1 := s.kstart*kvw, (s.kstart+s.keys)*kvw
		own[i] = run(ks[k0:k1], vs[k0:k1], s.keys)
		pre[i] = run(s.kp, s.vp, s.p)
	}
	b.packKeys(runs, c)
	if keep == nil {
		defer func() {
			for _, r := range runs {
				r.recycle()
			}
		}()
	}
	// Query rows a job: attnRows vectors, or fewer (down to one micro-kernel
	// tile) where that leaves too few jobs for the goroutines.
	qb, threads := max(1, attnRows/group), max(b.Threads, 1)
	count := func(qb int) int {
		jobs := 0
		for _, s := range segs {
			jobs += (s.n + qb - 1) / qb * c.KVHeads
		}
		return jobs
	}
	for qb*group > 12 && count(qb) < 4*threads {
		qb = (qb + 1) / 2
	}
	var jobs []attnJob
	for i, s := range segs {
		for r0 := 0; r0 < s.n; r0 += qb {
			r1 := min(r0+qb, s.n)
			for kh := 0; kh < c.KVHeads; kh++ {
				jobs = append(jobs, attnJob{seg: i, kh: kh, r0: r0, r1: r1, cost: (r1 - r0) * (s.p + s.skip + r1)})
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
		return func(j int) {
			jb := jobs[j]
			w.run(qs, out.f32, &segs[jb.seg], pre[jb.seg], own[jb.seg], jb, c)
		}
	})
	for _, w := range held {
		attnScratches.Put(w)
	}
	return out
}

// packKeys copies every run's keys and values into its kt and vh, in
// parallel over runs, heads and blocks of keys.
func (b *Backend) packKeys(runs []*attnKeys, c tensor.AttentionConfig) {
	const kbw = attnKeyBlock
	d, kvw := c.HeadDim, c.KVHeads*c.HeadDim
	type piece struct {
		r      *attnKeys
		kh, k0 int
	}
	var pieces []piece
	for _, r := range runs {
		nb := (r.n + kbw - 1) / kbw
		r.kt = allocF32(c.KVHeads * nb * d * kbw)    // zeroed: the columns past n stay zero
		r.vh, _ = allocF32Dirty(c.KVHeads * r.n * d) // written in full below
		for kh := 0; kh < c.KVHeads; kh++ {
			for k0 := 0; k0 < r.n; k0 += kbw {
				pieces = append(pieces, piece{r, kh, k0})
			}
		}
	}
	b.parallel(len(pieces), 1, func(lo, hi int) {
		for _, pc := range pieces[lo:hi] {
			r, kh, k0 := pc.r, pc.kh, pc.k0
			kn := min(kbw, r.n-k0)
			transpose(r.kt[r.ktOff(kh, k0, d):], kbw, r.k[k0*kvw+kh*d:], kvw, kn, d)
			vh := r.vh[(kh*r.n+k0)*d:]
			for j := range kn {
				copy(vh[j*d:(j+1)*d], r.v[(k0+j)*kvw+kh*d:])
			}
		}
	})
}

// ktOff is where head kh's transposed block of keys from k0 starts in kt.
func (r *attnKeys) ktOff(kh, k0, d int) int {
	nb := (r.n + attnKeyBlock - 1) / attnKeyBlock
	return (kh*nb + k0/attnKeyBlock) * d * attnKeyBlock
}

// attnScratches recycles goroutine buffers between calls.
var attnScratches sync.Pool

// getAttnScratch returns buffers for at least rows query vectors of d,
// recycled when at hand.
func getAttnScratch(rows, d int) *attnScratch {
	if w, ok := attnScratches.Get().(*attnScratch); ok && w.rows >= rows && w.d == d {
		return w
	}
	return &attnScratch{rows: rows, d: d,
		q: make([]float32, rows*d), o: make([]float32, rows*d), s: make([]float32, rows*attnKeyBlock),
		m: make([]float32, rows), l: make([]float32, rows), alpha: make([]float32, rows), sums: make([]float32, rows), keep: make([]int, rows),
	}
}

// run computes one job's outputs; pre and own are the segment's prefix and
// its own rows (pre nil without a prefix).
func (w *attnScratch) run(qs, out []float32, sg *attnSeg, pre, own *attnKeys, jb attnJob, c tensor.AttentionConfig) {
	d, group, qw := c.HeadDim, c.Heads/c.KVHeads, c.Heads*c.HeadDim
	rows := (jb.r1 - jb.r0) * group
	// Query vector i·group+g is row r0+i's head kh·group+g, scaled.
	for i := jb.r0; i < jb.r1; i++ {
		t := sg.start + i
		scaleVec(w.q[(i-jb.r0)*group*d:(i-jb.r0+1)*group*d], qs[t*qw+jb.kh*group*d:t*qw+(jb.kh+1)*group*d], c.Scale)
	}
	m, l, o := w.m[:rows], w.l[:rows], w.o[:rows*d]
	for i := range m {
		m[i] = float32(math.Inf(-1))
	}
	clear(l)
	clear(o)
	keep := w.keep[:rows]
	// The prefix: every row sees every key.
	if pre != nil {
		for k0 := 0; k0 < pre.n; k0 += attnKeyBlock {
			kn := min(attnKeyBlock, pre.n-k0)
			for i := range keep {
				keep[i] = kn
			}
			w.block(pre, jb.kh, k0, kn, rows, c)
		}
	}
	// The segment's own rows: its row r sees rows 0..r, in the blocks that
	// start at its first row whether or not that row has a query here.
	r0, r1 := sg.skip+jb.r0, sg.skip+jb.r1
	for k0 := 0; k0 < r1; k0 += attnKeyBlock {
		kn := min(attnKeyBlock, r1-k0)
		for i := range keep {
			keep[i] = min(max(r0+i/group-k0+1, 0), kn)
		}
		w.block(own, jb.kh, k0, kn, rows, c)
	}
	for i := 0; i < rows; i++ {
		t, h := sg.start+jb.r0+i/group, jb.kh*group+i%group
		scaleVec(out[t*qw+h*d:t*qw+(h+1)*d], o[i*d:(i+1)*d], 1/l[i])
	}
}

// block folds keys [k0, k0+kn) of the run (head kh) into the running state
// of the first rows query vectors; query vector i takes the block's first
// keep[i] keys (none: the block leaves it as it is).
func (w *attnScratch) block(keys *attnKeys, kh, k0, kn, rows int, c tensor.AttentionConfig) {
	const kbw = attnKeyBlock
	d := c.HeadDim
	s := w.s
	// The scores of whole panels of keys: the transposed block is zero past
	// kn, and the columns past kn are not read.
	gemmS(rows, (kn+nr-1)/nr*nr, d, w.q, d, 1, keys.kt[keys.ktOff(kh, k0, d):], kbw, s, kbw, false)
	// Each row's new maximum and weights, then every row's α = exp(m − m')
	// at once.
	alpha, sums := w.alpha[:rows], w.sums[:rows]
	for i := 0; i < rows; i++ {
		nk := w.keep[i]
		clear(s[i*kbw+nk : i*kbw+kn])
		if nk == 0 {
			alpha[i] = 0
			continue
		}
		mx, sum := softmaxShift(s[i*kbw:i*kbw+nk], w.m[i], attnSlack)
		flushTiny(s[i*kbw : i*kbw+nk]) // weights below 2⁻⁴⁰ of the largest (≥ 1) so far: 0
		alpha[i], sums[i] = w.m[i]-mx, sum
		w.m[i] = mx
	}
	expVec(alpha, alpha)
	flushTiny(alpha)
	for i := 0; i < rows; i++ {
		if w.keep[i] == 0 {
			continue
		}
		w.l[i] = w.l[i]*alpha[i] + sums[i]
		if alpha[i] != 1 {
			oi := w.o[i*d : (i+1)*d]
			scaleVec(oi, oi, alpha[i])
		}
	}
	// o += p·v for every query vector at once: the weights past a vector's
	// keep are zero and leave its sums as they are.
	gemmS(rows, d, kn, s, kbw, 1, keys.vh[(kh*keys.n+k0)*d:], d, w.o, d, true)
}
