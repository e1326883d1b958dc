package cpu

import (
	"math"
	"slices"
	"sync"
)

// The delta rule's chunked form on matrix products, as flash-linear-attention
// computes it. Per chunk of m ≤ cl tokens of one value head, with γ the
// in-chunk cumulative log decay, Γ = exp(γ), L the strictly lower
// (β_r k_r·k_s)·exp(γ_r−γ_s) and T = (I+L)⁻¹ (unit lower triangular):
//
//	W = −T·diag(βΓ)·K, U = T·diag(β)·V        (independent of the state)
//	V_new = U + W·S, O₀ = diag(Γ)·Q·S          (the new values δ)
//	O = O₀ + (QKᵀ ⊙ decay, s ≤ r)·V_new
//	S' = Γ_m·S + (diag(exp(γ_m−γ))·K)ᵀ·V_new
//
// Every product is a gemmS on the chunk's rows alone, so a segment's bits
// depend on that segment alone: the same alone or beside others, whatever
// the thread count. Each column of the state evolves apart from the others.

// deltaTri is the row block of the triangular products: a block of rows
// takes the columns (or the reduction) up to its last row, about half of
// the square's work. 16 rows run as two tiles of 8 on the AVX-512 kernel.
const deltaTri = 16

// deltaChunk holds one chunk's products that do not depend on the state,
// and the scratch that makes them. Square scratch has rows cw = cl rounded
// up to a multiple of nr apart, so the products run on whole panels.
type deltaChunk struct {
	cl, dk, dv int       // the sizes it was made for
	cw         int       // cl rounded up to a multiple of nr
	c0, m      int       // first row and rows of the chunk
	gam, ngam  []float32 // [cl] γ and −γ
	e          []float32 // [cl] scratch: a row's decays, then Γ, then exp(γ_m−γ)
	bv, bg     []float32 // [cl] β and −βΓ
	QK         []float32 // [cl, cw] (q_r·k_s)·exp(γ_r−γ_s) for s ≤ r, zero above
	WQ         []float32 // [2cl, dk] rows < m: W = −T·diag(βΓ)·K; rows m…2m−1: diag(Γ)·Q
	U          []float32 // [cl, dv] U = T·diag(β)·V, then V_new
	Q, K       []float32 // [cl, dk] the chunk's normalised queries (scaled) and keys
	Kd         []float32 // [cl, dk] exp(γ_m−γ_s)·k_s
	KT         []float32 // [dk, cw] the chunk's keys transposed, zero past m
	L, T, TB   []float32 // [cl, cw] scratch
	S          []float32 // [dk, dv] a state, for the goroutine that holds it
}

func newDeltaChunk(cl, dk, dv int) *deltaChunk {
	cw := (cl + nr - 1) / nr * nr
	return &deltaChunk{
		cl: cl, dk: dk, dv: dv, cw: cw, S: make([]float32, dk*dv),
		gam: make([]float32, cl), ngam: make([]float32, cl), e: make([]float32, cl),
		bv: make([]float32, cl), bg: make([]float32, cl),
		QK: make([]float32, cl*cw), WQ: make([]float32, 2*cl*dk), U: make([]float32, cl*dv),
		Q: make([]float32, cl*dk), K: make([]float32, cl*dk), Kd: make([]float32, cl*dk), KT: make([]float32, dk*cw),
		L: make([]float32, cl*cw), T: make([]float32, cl*cw), TB: make([]float32, cl*cw),
	}
}

// deltaChunks recycles chunk buffers (about 400 KiB each at d 128) between
// calls.
var deltaChunks sync.Pool

// getDeltaChunk returns chunk buffers for the sizes, recycled when at hand.
func getDeltaChunk(cl, dk, dv int) *deltaChunk {
	if ch, ok := deltaChunks.Get().(*deltaChunk); ok && ch.cl == cl && ch.dk == dk && ch.dv == dv {
		return ch
	}
	return newDeltaChunk(cl, dk, dv)
}

// prepare computes the state-free products of value head h's chunk of m
// rows from row c0: it normalises the chunk's queries and keys, and the
// micro-kernels read them and v where they lie.
func (ch *deltaChunk) prepare(in *deltaInput, h, c0, m, cl int) {
	dk, dv, cw := in.dk, in.dv, ch.cw
	ch.c0, ch.m = c0, m
	kh := h / (in.hv / in.hk)
	ld := dk // stride between tokens in q and k
	// The next chunk's rows lie a page apart each, past the reach of the
	// hardware's prefetching: ask for its queries, keys and values a part
	// at a time while this chunk computes.
	fetch := func(part int) {}
	if n1 := min(cl, in.n-c0-m); n1 > 0 {
		row := in.x[(c0+m)*in.width:]
		offs, lens := [3]int{kh * dk, (in.hk + kh) * dk, 2*in.hk*dk + h*dv}, [3]int{dk, dk, dv}
		fetch = func(part int) { prefetchRows(&row[offs[part]], in.width, n1, lens[part]) }
	}
	fetch(0)
	qs, ks := ch.Q, ch.K
	in.normalise(qs, ks, kh, c0, m)
	vs := in.x[c0*in.width+2*in.hk*dk+h*dv:]
	gam, ngam, e, bv, bg := ch.gam[:m], ch.ngam[:m], ch.e[:m], ch.bv[:m], ch.bg[:m]
	var acc float32
	for r := range gam {
		acc += in.g[(c0+r)*in.hv+h]
		gam[r], ngam[r] = acc, -acc
		bv[r] = in.beta[(c0+r)*in.hv+h]
	}
	// K·Kᵀ and Q·Kᵀ, each row block up to its last row.
	KT := ch.KT
	transpose(KT, cw, ks, ld, m, dk)
	if m < cw {
		for p := range dk {
			clear(KT[p*cw+m : (p+1)*cw])
		}
	}
	L, QK, T, TB := ch.L, ch.QK, ch.T, ch.TB
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		w := (r1 + nr - 1) / nr * nr
		gemmS(r1-r0, w, dk, ks[r0*ld:], ld, 1, KT, cw, L[r0*cw:], cw, false)
		gemmS(r1-r0, w, dk, qs[r0*ld:], ld, 1, KT, cw, QK[r0*cw:], cw, false)
	}
	fetch(1)
	// The decays exp(γ_r−γ_s), s ≤ r, a row at a time: QK masked and
	// decayed, L's strict lower triangle decayed and scaled by −β_r (the
	// solve below takes −L).
	for r := 0; r < m; r++ {
		d := e[:r+1]
		expShift(d, ngam[:r+1], ngam[r])
		flushTiny(d)
		lr, qr := L[r*cw:r*cw+r], QK[r*cw:r*cw+m]
		mulVec(lr, lr, d[:r])
		scaleVec(lr, lr, -bv[r])
		mulVec(qr[:r+1], qr[:r+1], d)
		clear(qr[r+1:])
	}
	// T = (I+L)⁻¹ by rows: T_r = e_r − Σ_{s<r} L_rs T_s, in blocks of
	// deltaTri rows: the terms of the rows above a block in one product,
	// then the block's own rows one by one (the same chain of fused
	// multiply-adds over s). The sums run on past a row's last nonzero
	// column, to whole panels and to a multiple of 8 columns (the vector
	// kernel's width), where every T_s is zero.
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		w := 0
		if r0 > 0 {
			w = (r0 + nr - 1) / nr * nr
			gemmS(r1-r0, w, r0, L[r0*cw:], cw, 1, T, cw, T[r0*cw:], cw, false)
		}
		for r := r0; r < r1; r++ {
			clear(T[r*cw+min(w, m) : r*cw+m])
			mulAddRows(T[r*cw:r*cw+min((r+7)&^7, cw)], T[r0*cw:], cw, L[r*cw+r0:r*cw+r])
			T[r*cw+r] = 1
			flushTiny(T[r*cw : r*cw+r])
		}
	}
	fetch(2)
	// W = (T·diag(−βΓ))·K and U = (T·diag(β))·V, with K and V read where
	// they lie: T's columns scaled, lower triangle only.
	expVec(e, gam)
	flushTiny(e)
	mulVec(bg, bv, e)
	scaleVec(bg, bg, -1)
	for r := 0; r < m; r++ {
		tr := T[r*cw : r*cw+r+1]
		mulVec(L[r*cw:r*cw+r+1], tr, bg)
		mulVec(TB[r*cw:r*cw+r+1], tr, bv)
		clear(L[r*cw+r+1 : r*cw+m])
		clear(TB[r*cw+r+1 : r*cw+m])
	}
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		gemmS(r1-r0, dk, r1, L[r0*cw:], cw, 1, ks, ld, ch.WQ[r0*dk:], dk, false)
		gemmS(r1-r0, dv, r1, TB[r0*cw:], cw, 1, vs, in.width, ch.U[r0*dv:], dv, false)
	}
	for r := 0; r < m; r++ {
		scaleVec(ch.WQ[(m+r)*dk:(m+r+1)*dk], qs[r*ld:r*ld+dk], e[r])
	}
	// exp(γ_m−γ_s)·k_s for the state update.
	expShift(e, ngam, ngam[m-1])
	flushTiny(e)
	for s := 0; s < m; s++ {
		scaleVec(ch.Kd[s*dk:(s+1)*dk], ks[s*ld:s*ld+dk], e[s])
	}
}

// step advances columns [j0, j1) of value head h's state S [dk, dv] over
// the prepared chunk and writes those columns of the chunk's outputs into
// out [n, hv·dv]. Columns of the state evolve apart: steps over disjoint
// columns of the same chunk may run at once.
func (ch *deltaChunk) step(in *deltaInput, S []float32, h, cl int, out []float32, j0, j1 int) {
	dk, dv, m, c0, cw := in.dk, in.dv, ch.m, ch.c0, ch.cw
	ldo, w := in.hv*dv, j1-j0
	U, O, Sj := ch.U[j0:m*dv], out[c0*ldo+h*dv+j0:], S[j0:]
	// V_new = U + W·S; O = diag(Γ)·Q·S + QK·V_new, in place in out.
	gemmS(m, w, dk, ch.WQ, dk, 1, Sj, dv, U, dv, true)
	gemmS(m, w, dk, ch.WQ[m*dk:], dk, 1, Sj, dv, O, ldo, false)
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		gemmS(r1-r0, w, r1, ch.QK[r0*cw:], cw, 1, U, dv, O[r0*ldo:], ldo, true)
	}
	// S' = Γ_m·S + (diag(exp(γ_m−γ))·K)ᵀ·V_new, Kd read transposed.
	gm := decay(ch.gam[m-1])
	if w == dv {
		scaleVec(S, S, gm)
	} else {
		for i := range dk {
			scaleVec(Sj[i*dv:i*dv+w], Sj[i*dv:i*dv+w], gm)
		}
	}
	gemmS(dk, w, m, ch.Kd, 1, dk, U, dv, Sj, dv, true)
}

// deltaJob is one value head of one segment: rows [s0, s0+l), the state it
// starts from (nil: zero) and where its final state goes (nil: dropped).
type deltaJob struct {
	h, s0, l int
	from, to []float32
}

// deltaWindow is how many chunks of each job one round of the split form
// prepares, per job: enough rounds' work to keep every goroutine busy.
func deltaWindow(jobs, threads int) int { return max(1, (2*threads+jobs-1)/jobs) }

// runDelta runs the jobs, writing outputs into out. With at least as many
// jobs as goroutines (or the recurrent form) each job runs whole on one
// goroutine; with fewer, rounds prepare a window of each job's chunks in
// parallel over (job, chunk), then advance the states over them in
// parallel over (job, block of the state's columns). Both give the same
// bits.
func (b *Backend) runDelta(in *deltaInput, jobs []deltaJob, cl int, out []float32) {
	if len(jobs) == 0 {
		return
	}
	dk, dv := in.dk, in.dv
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return jobs[y].l - jobs[x].l })
	threads := max(b.Threads, 1)
	if cl == 0 || len(jobs) >= threads {
		var mu sync.Mutex
		var held []*deltaChunk
		defer func() {
			for _, ch := range held {
				deltaChunks.Put(ch)
			}
		}()
		b.each(len(jobs), func() func(int) {
			ch := getDeltaChunk(max(cl, 1), dk, dv)
			mu.Lock()
			held = append(held, ch)
			mu.Unlock()
			S := ch.S
			return func(j int) {
				jb := jobs[order[j]]
				if jb.from != nil {
					copy(S, jb.from)
				} else {
					clear(S)
				}
				if cl == 0 {
					in.recurrent(S, jb.h, jb.s0, jb.l, out)
				} else {
					for c0 := jb.s0; c0 < jb.s0+jb.l; c0 += cl {
						ch.prepare(in, jb.h, c0, min(cl, jb.s0+jb.l-c0), cl)
						ch.step(in, S, jb.h, cl, out, 0, dv)
					}
				}
				if jb.to != nil {
					copy(jb.to, S)
				}
			}
		})
		return
	}
	b.splitDelta(in, jobs, cl, out)
}

// splitDelta is runDelta's form for fewer jobs than goroutines: rounds
// prepare a window of each job's chunks in parallel over (job, chunk), then
// advance the states over them in parallel over (job, block of columns).
func (b *Backend) splitDelta(in *deltaInput, jobs []deltaJob, cl int, out []float32) {
	dk, dv := in.dk, in.dv
	threads := max(b.Threads, 1)
	win := deltaWindow(len(jobs), threads)
	// The state passes split each job's columns into ncb blocks of cbw (a
	// multiple of nr), enough for every goroutine where the columns allow.
	ncb := min((dv+nr-1)/nr, (threads+len(jobs)-1)/len(jobs))
	cbw := ((dv+ncb-1)/ncb + nr - 1) / nr * nr
	ncb = (dv + cbw - 1) / cbw
	states := make([][]float32, len(jobs))
	chunks := make([]*deltaChunk, len(jobs)*win)
	defer func() {
		for _, ch := range chunks {
			if ch != nil {
				deltaChunks.Put(ch)
			}
		}
	}()
	for i, jb := range jobs {
		states[i] = make([]float32, dk*dv)
		if jb.from != nil {
			copy(states[i], jb.from)
		}
	}
	type piece struct{ job, k int } // chunk k of a job
	var pieces []piece
	for w0 := 0; ; w0 += win {
		pieces = pieces[:0]
		for k := w0; k < w0+win; k++ {
			for i, jb := range jobs {
				if k*cl < jb.l {
					pieces = append(pieces, piece{i, k})
				}
			}
		}
		if len(pieces) == 0 {
			break
		}
		b.each(len(pieces), func() func(int) {
			return func(t int) {
				tk := pieces[t]
				slot := tk.job*win + tk.k - w0
				if chunks[slot] == nil {
					chunks[slot] = getDeltaChunk(cl, dk, dv)
				}
				jb := jobs[tk.job]
				c0 := jb.s0 + tk.k*cl
				chunks[slot].prepare(in, jb.h, c0, min(cl, jb.s0+jb.l-c0), cl)
			}
		})
		b.each(len(jobs)*ncb, func() func(int) {
			return func(u int) {
				i, j0 := u/ncb, u%ncb*cbw
				jb := jobs[i]
				for k := w0; k < w0+win && k*cl < jb.l; k++ {
					chunks[i*win+k-w0].step(in, states[i], jb.h, cl, out, j0, min(j0+cbw, dv))
				}
			}
		})
	}
	for i, jb := range jobs {
		if jb.to != nil {
			copy(jb.to, states[i])
		}
	}
}

// minDecay is the smallest decay the delta rule keeps: smaller ones are 0.
// A term decayed by less than 2⁻⁴⁰ lies 16 binary orders below float32's
// resolution of the undecayed terms it joins, and its products with keys,
// gates and values would otherwise run into subnormal numbers, which Intel
// processors compute about a hundred times slower (the fast-forgetting
// heads of a model reach them within one 64-token chunk).
const minDecay = 0x1p-40

// flushTiny sets the values in d of magnitude below minDecay to 0: the
// decays themselves, and the entries of T = (I+L)⁻¹, sums of chains of
// decayed terms each as small as the decay between its row and column.
func flushTiny(d []float32) {
	for i, v := range d {
		if v < minDecay && v > -minDecay {
			d[i] = 0
		}
	}
}

// decay returns e^g, or 0 below minDecay.
func decay(g float32) float32 {
	if a := float32(math.Exp(float64(g))); a >= minDecay {
		return a
	}
	return 0
}
