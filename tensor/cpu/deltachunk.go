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
//	[V_new; O₀] = [U; 0] + [W; diag(Γ)·Q]·S     (the new values δ; one product)
//	O = O₀ + (QKᵀ ⊙ decay, s ≤ r)·V_new
//	S' = Γ_m·S + (diag(exp(γ_m−γ))·K)ᵀ·V_new
//
// Every product is gemmNT or gemmNN on the chunk's rows alone, so a
// segment's bits depend on that segment alone: the same alone or beside
// others, whatever the thread count.

// deltaTri is the row block of the triangular products: a block of rows
// takes the columns up to its last row, about half of the square's work.
const deltaTri = 16

// deltaChunk holds one chunk's products that do not depend on the state,
// and the scratch that makes them.
type deltaChunk struct {
	cl, dk, dv int       // the sizes it was made for
	c0, m      int       // first row and rows of the chunk
	gam        []float32 // [cl] γ
	QK         []float32 // [cl, cl] (q_r·k_s)·exp(γ_r−γ_s) for s ≤ r, zero above
	WQ         []float32 // [2cl, dk] rows < m: W = −T·diag(βΓ)·K; rows m…2m−1: diag(Γ)·Q
	UO         []float32 // [2cl, dv] rows < m: U = T·diag(β)·V, then V_new; rows m…2m−1: the outputs
	KdT        []float32 // [dk, cl] (exp(γ_m−γ_s)·k_s)ᵀ
	L, T       []float32 // [cl, cl] scratch
	X          []float32 // [cl, max(dk, dv)] scratch: scaled keys, then values
	cf         []float32 // [cl] scratch
	S          []float32 // [dk, dv] a state, for the goroutine that holds it
}

func newDeltaChunk(cl, dk, dv int) *deltaChunk {
	return &deltaChunk{
		cl: cl, dk: dk, dv: dv, S: make([]float32, dk*dv),
		gam: make([]float32, cl), QK: make([]float32, cl*cl), WQ: make([]float32, 2*cl*dk), UO: make([]float32, 2*cl*dv),
		KdT: make([]float32, dk*cl), L: make([]float32, cl*cl), T: make([]float32, cl*cl),
		X: make([]float32, cl*max(dk, dv)), cf: make([]float32, cl),
	}
}

// deltaChunks recycles chunk buffers (about 350 KiB each at d 128) between
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
// rows from row c0.
func (ch *deltaChunk) prepare(in *deltaInput, h, c0, m, cl int) {
	dk, dv := in.dk, in.dv
	ch.c0, ch.m = c0, m
	kh := h / (in.hv / in.hk)
	ld := in.hk * dk // stride between tokens in q and k
	qs, ks := in.q[(c0*in.hk+kh)*dk:], in.k[(c0*in.hk+kh)*dk:]
	gam := ch.gam[:m]
	var acc float32
	for r := range gam {
		acc += in.g[(c0+r)*in.hv+h]
		gam[r] = acc
	}
	L, QK, T := ch.L, ch.QK, ch.T
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		gemmNT(r1-r0, r1, dk, ks[r0*ld:], ld, ks, ld, L[r0*cl:], cl, false)
		gemmNT(r1-r0, r1, dk, qs[r0*ld:], ld, ks, ld, QK[r0*cl:], cl, false)
	}
	for r := 0; r < m; r++ {
		br := in.beta[(c0+r)*in.hv+h]
		for s := 0; s < r; s++ {
			d := float32(math.Exp(float64(gam[r] - gam[s])))
			L[r*cl+s] = br * L[r*cl+s] * d
			QK[r*cl+s] *= d
		}
		clear(QK[r*cl+r+1 : r*cl+m])
	}
	// T = (I+L)⁻¹ by rows: T_r = e_r − Σ_{s<r} L_rs T_s.
	for r := 0; r < m; r++ {
		tr := T[r*cl : r*cl+m]
		clear(tr)
		for s := 0; s < r; s++ {
			ch.cf[s] = -L[r*cl+s]
		}
		mulAddRows(tr[:r], T, cl, ch.cf[:r])
		tr[r] = 1
	}
	// W = T·(−diag(βΓ)·K), U = T·(diag(β)·V).
	X := ch.X
	for s := 0; s < m; s++ {
		a := -in.beta[(c0+s)*in.hv+h] * float32(math.Exp(float64(gam[s])))
		k := ks[s*ld : s*ld+dk]
		for i, v := range k {
			X[s*dk+i] = a * v
		}
	}
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		gemmNN(r1-r0, dk, r1, T[r0*cl:], cl, X, dk, ch.WQ[r0*dk:], dk, false)
	}
	for r := 0; r < m; r++ {
		a := float32(math.Exp(float64(gam[r])))
		q := qs[r*ld : r*ld+dk]
		for i, v := range q {
			ch.WQ[(m+r)*dk+i] = a * v
		}
	}
	for s := 0; s < m; s++ {
		a := in.beta[(c0+s)*in.hv+h]
		v := in.vRow(c0+s, h)
		for j, x := range v {
			X[s*dv+j] = a * x
		}
	}
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		gemmNN(r1-r0, dv, r1, T[r0*cl:], cl, X, dv, ch.UO[r0*dv:], dv, false)
	}
	clear(ch.UO[m*dv : 2*m*dv])
	// (exp(γ_m−γ_s)·k_s)ᵀ for the state update.
	for s := 0; s < m; s++ {
		a := float32(math.Exp(float64(gam[m-1] - gam[s])))
		k := ks[s*ld : s*ld+dk]
		for i, v := range k {
			ch.KdT[i*cl+s] = a * v
		}
	}
}

// step advances value head h's state S [dk, dv] over the prepared chunk
// and writes the chunk's outputs into out [n, hv·dv].
func (ch *deltaChunk) step(in *deltaInput, S []float32, h, cl int, out []float32) {
	dk, dv, m, c0 := in.dk, in.dv, ch.m, ch.c0
	ldo := in.hv * dv
	U, O := ch.UO[:m*dv], ch.UO[m*dv:2*m*dv]
	// [V_new; O] = [U; 0] + [W; diag(Γ)·Q]·S in one product.
	gemmNN(2*m, dv, dk, ch.WQ, dk, S, dv, ch.UO, dv, true)
	for r0 := 0; r0 < m; r0 += deltaTri {
		r1 := min(r0+deltaTri, m)
		gemmNN(r1-r0, dv, r1, ch.QK[r0*cl:], cl, U, dv, O[r0*dv:], dv, true)
	}
	for r := 0; r < m; r++ {
		copy(out[(c0+r)*ldo+h*dv:(c0+r)*ldo+(h+1)*dv], O[r*dv:(r+1)*dv])
	}
	gm := float32(math.Exp(float64(ch.gam[m-1])))
	for i := range S {
		S[i] *= gm
	}
	gemmNN(dk, dv, m, ch.KdT, cl, U, dv, S, dv, true)
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
// parallel over jobs. Both give the same bits.
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
						ch.step(in, S, jb.h, cl, out)
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

// splitDelta is runDelta's form for fewer jobs than goroutines.
func (b *Backend) splitDelta(in *deltaInput, jobs []deltaJob, cl int, out []float32) {
	dk, dv := in.dk, in.dv
	win := deltaWindow(len(jobs), max(b.Threads, 1))
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
		b.each(len(jobs), func() func(int) {
			return func(i int) {
				jb := jobs[i]
				for k := w0; k < w0+win && k*cl < jb.l; k++ {
					chunks[i*win+k-w0].step(in, states[i], jb.h, cl, out)
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
