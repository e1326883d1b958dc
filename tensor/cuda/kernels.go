//go:build cuda

package cuda

import (
	"fmt"

	"github.com/kevgo/kev/internal/cudrv"
)

// ArgError reports a kernel argument that does not fit: a size, a stride, an alignment or a buffer too small.
type ArgError struct {
	Kernel string // e.g. "GEMM"
	Arg    string // e.g. "W"
	Reason string
}

// Error formats the failure as "cuda: Kernel: Arg: Reason".
func (e *ArgError) Error() string { return fmt.Sprintf("cuda: %s: %s: %s", e.Kernel, e.Arg, e.Reason) }

// need checks that b is 16-byte aligned and holds at least n bytes.
func need(kernel, arg string, b Buffer, n int64) error {
	if b.Ptr == 0 {
		return &ArgError{kernel, arg, "nil buffer"}
	}
	if b.Ptr%16 != 0 {
		return &ArgError{kernel, arg, fmt.Sprintf("address %#x is not 16-byte aligned", uintptr(b.Ptr))}
	}
	if b.Bytes < n {
		return &ArgError{kernel, arg, fmt.Sprintf("buffer has %d bytes, need %d", b.Bytes, n)}
	}
	return nil
}

// GEMM describes Y[M,N] = X[M,K] · W[N,K]ᵀ (+ R[M,N]) with bf16 X and W and fp32 accumulation.
type GEMM struct {
	Y Buffer // output, bf16 (or fp32 when F32Out), row stride LdY
	X Buffer // bf16 [M, K], row stride LdX
	W Buffer // bf16 [N, K], contiguous (PyTorch Linear layout)
	R Buffer // optional residual, same type and stride as Y; may be Y itself (in-place add)

	M, N, K int
	LdX     int // elements between X rows; 0 means K
	LdY     int // elements between Y (and R) rows; 0 means N
	F32Out  bool
	// SwiGLU: W = [Wg; Wu] (N = 2F rows) and Y [M, F] (LdY ≥ F; 0 means F) = silu(X·Wgᵀ)·(X·Wuᵀ), the bits of
	// SwiGLU on the bf16 output of the plain GEMM. Only where the plan is a one-split tile plan (SwiGLUFused says
	// so); no residual, bf16 Y.
	SwiGLU bool
	// WLoaded: W holds data uploaded from the host that no kernel writes (weights), so the tile kernels may load
	// their first W tiles before waiting for the kernel before them. Leave it false for a W a kernel computed.
	WLoaded bool

	kern     gemmKernel // 0: choose (tests force one)
	tile     int        // 64 or 128: force the mma.sync kernel of that square tile (tests)
	splits   int        // 0: choose; ≥ 1 (tests)
	chunk    int        // wg128 with one split, or sk: force chunked accumulation of this many k tiles (tests)
	sk       int        // with kern sk: stream-K tiles, 0: chosen, < 0: none (tests)
	grid     int        // with kern sk or xc, or a persistent tile kernel: blocks, 0: one per multiprocessor (tests)
	byM      bool       // plan from M as well, as before batch invariance (benchmarks: what invariance costs)
	noStream bool       // with byM: plan as if the streaming kernel did not exist (benchmarks)
	v3       bool       // the batch-invariant plan before the stream-K schedule (benchmarks: old against new)
	xt       wgTile     // force this wgmma tile kernel, with splits (0: 1) of equal k tiles (tests, benchmarks)
	xc       wgTile     // force this chunked tile kernel (wcTiles), chunks of chunk k tiles (0: fixedChunk's)
	waves    bool       // tile kernels with one split: a block per tile, not the persistent kernel (tests, benchmarks)
	gn       int        // wgmma kernels' tile order (tile_at): n-tiles per group, −1 m-fastest rotated by rounds, 0 planned
}

// gemmPlan is a chosen GEMM launch: kernel, tile, k tiles per split.
type gemmPlan struct {
	kern          gemmKernel
	mod, fn       string
	bm, bn, bk    int
	threads       int
	shared        int  // dynamic shared memory, bytes
	splits, tps   int  // gridDim.z and k tiles (of bk) per split
	chunk         int  // wg128 (one split), sk or wgc: k tiles per chunk of the chunked accumulation (0: none)
	skTiles       int  // sk: output tiles dealt out by chunk (stream-K); the others are whole
	grid          int  // sk: blocks (persistent)
	reduce        bool // split-K finished by gemm_splitk_reduce (a launch of its own), not by each tile's last split
	persist       bool // one split on the persistent tile kernel: min(tiles, grid) blocks looping over the tiles
	blocksM, blkN int
}

// threads is the block size of tile kernel t: one producer warpgroup and a consumer warpgroup per 64 rows.
func (t wgTile) threads() int { return 128 * (t.bm/64 + 1) }

// shared is the tile kernel's dynamic shared memory: the ring, 1 KiB of alignment, the barriers.
func (t wgTile) shared() int { return t.stages*(t.bm+t.bn)*64*2 + 1024 + 16*t.stages }

// tilePlan is the wgmma tile kernel t with splits splits of tps k tiles each; with splits, the partial sums are
// added in split order by gemm_splitk_reduce after the tile kernel (the bits of the in-kernel finish).
func tilePlan(t wgTile, M, N, K, splits, tps int) gemmPlan {
	p := gemmPlan{kern: t.kern(), mod: "gemm_sm90a", bm: t.bm, bn: t.bn, bk: 64, threads: t.threads(), splits: splits,
		tps: tps, shared: t.shared(), fn: fmt.Sprintf("gemm_wgmma_%dx%d", t.bm, t.bn), reduce: splits > 1}
	p.blocksM, p.blkN = (M+p.bm-1)/p.bm, (N+p.bn-1)/p.bn
	return p
}

// wcSumBytes is the chunked tile kernel t's shared memory for its chunk sums: bn/2 floats per consumer thread.
func wcSumBytes(t wgTile) int { return t.bm / 64 * 128 * t.bn / 2 * 4 }

// wcPlan is the persistent chunked tile kernel t with chunks of c k tiles, on at most grid blocks.
func wcPlan(t wgTile, M, N, K, c, grid int) gemmPlan {
	kTiles := (K + 63) / 64
	c = max(1, min(c, kTiles))
	p := gemmPlan{kern: gemmWGC, mod: "gemm_sm90a", fn: fmt.Sprintf("gemm_wgmma_c%dx%d", t.bm, t.bn), bm: t.bm,
		bn: t.bn, bk: 64, threads: t.threads(), shared: t.shared() + wcSumBytes(t), splits: 1, tps: kTiles, chunk: c,
		persist: true}
	p.blocksM, p.blkN = (M+p.bm-1)/p.bm, (N+p.bn-1)/p.bn
	p.grid = min(p.blocksM*p.blkN, grid)
	return p
}

// skShared is the stream-K kernel's dynamic shared memory: 5 stages of 32 KiB, 1 KiB of alignment, 256 bytes of
// barriers, the 64 KiB running sum.
const skShared = 5*(128+128)*64*2 + 1024 + 256 + 128*128*4

// skPlan is the stream-K kernel with chunks of c k tiles (c ≥ the k tiles: unchunked), skTiles tiles dealt out
// by chunk, on grid blocks.
func skPlan(M, N, K, c, skTiles, grid int) gemmPlan {
	kTiles := (K + 63) / 64
	c = max(1, min(c, kTiles))
	p := gemmPlan{kern: gemmSK, mod: "gemm_sm90a", fn: "gemm_wgmma_sk_128x128", bm: 128, bn: 128, bk: 64,
		threads: 384, shared: skShared, splits: 1, tps: c, skTiles: skTiles, grid: grid}
	if c < kTiles {
		p.chunk = c
	}
	p.blocksM, p.blkN = (M+p.bm-1)/p.bm, (N+p.bn-1)/p.bn
	return p
}

// skWorkspace is the bytes of partial-sum slots the stream-K plan p needs at M rows: one slot of min(M, 128) ×
// 128 fp32 per (stream-K tile, chunk), none when tiles are never split.
func skWorkspace(p gemmPlan, M, K int) int64 {
	kTiles := (K + 63) / 64
	nch := (kTiles + p.tps - 1) / p.tps
	if p.skTiles == 0 || nch == 1 {
		return 0
	}
	return int64(p.skTiles) * int64(nch) * int64(min(M, 128)) * 128 * 4
}

// hopper reports whether the sm_90a kernels run here (compute capability exactly 9.0).
func (d *Device) hopper() bool { return d.info.Major == 9 && d.info.Minor == 0 }

func (d *Device) sms() int {
	if d.info.SMs <= 0 {
		return 132
	}
	return d.info.SMs
}

// plan chooses the kernel for g. Unless a test or benchmark forces something (kern, tile, splits, chunk, byM), the
// choice is batch-invariant: the kernel family, its tile and the k partition of every output element depend on
// (N, K) and the device only, never on M, so a row of X gets the same bits in Y whatever rows it is stacked with
// (planFixed). The streaming kernel is only used when forced or with byM.
func (d *Device) plan(g *GEMM) gemmPlan {
	if p, ok := d.planStream(g); ok {
		return p
	}
	if g.kern == gemmSK {
		return d.planSK(g)
	}
	if g.xc.bm != 0 {
		c, grid := d.forcedChunkGrid(g)
		return wcPlan(g.xc, g.M, g.N, g.K, c, grid)
	}
	if g.xt.bm != 0 {
		kTiles := (g.K + 63) / 64
		sp := max(1, min(g.splits, kTiles))
		tps := (kTiles + sp - 1) / sp
		return d.persistent(tilePlan(g.xt, g.M, g.N, g.K, (kTiles+tps-1)/tps, tps), g)
	}
	if g.kern == gemmAuto && g.tile == 0 && g.splits == 0 && g.chunk == 0 && !g.byM && !d.byM {
		if g.v3 {
			return d.planFixedV3(g)
		}
		return d.planFixed(g)
	}
	p := d.planByM(g)
	if g.chunk > 0 && p.kern == gemmWG128 && p.splits == 1 {
		p.chunk = g.chunk
	}
	return p
}

// wgCost models the time in µs of the wgmma kernel k with sp splits of tps k tiles each: waves × k tiles per split
// × tile time, plus the partial sums' traffic; the tile time is the tensor-core time of its live rows or, for
// M ≤ 128, the time to stream its W tile at 40 GB/s per multiprocessor, whichever is longer, and the whole call
// takes at least W's bytes at 4 TB/s.
func wgCost(k gemmKernel, M, N, K, sms, sp, tps int) float64 {
	bn, tileUS := 256, 0.92 // µs per 128×bn×64 tile at ~600 TFLOP/s per GPU
	if k == gemmWG128 {
		bn, tileUS = 128, 0.52
	}
	blocks := ((M + 127) / 128) * ((N + bn - 1) / bn)
	live := float64((min(M, 128)+63)/64) / 2 // consumers with rows, of 2 (per m tile, M ≤ 128)
	if M > 128 {
		live = 1
	}
	tile := tileUS * live
	if M <= 128 {
		tile = max(tile, float64(bn*128)/40e3) // W tile bytes at 40 GB/s per multiprocessor
	}
	floor := float64(N) * float64(K) * 2 / 4e6 // W at 4 TB/s, µs
	waves := (blocks*sp + sms - 1) / sms
	t := max(float64(waves*tps)*tile, floor)
	if sp > 1 {
		t += float64(M) * float64(N) * 8 * float64(sp) / 3e6
	}
	return t
}

// Reference token counts of the batch-invariant plan: a short pass (question rows) and a long one (a prefill).
const (
	fixedSmallM = 64
	fixedLargeM = 2048
)

// fixedChoice is the (N, K)-only part of a batch-invariant plan on Hopper.
type fixedChoice struct {
	kern  gemmKernel
	chunk int // k tiles per chunk (wg128); all of them for wg256
}

// fixedWG chooses, on Hopper, between the 128×256 wgmma kernel without split-K and the 128×128 one whose k tiles
// are reduced in chunks of c tiles (c = ⌈k tiles / s⌉ for s = 1 … 16, at least 4 tiles per chunk): the one with
// the least sum of its modelled times at fixedSmallM and fixedLargeM, each relative to the best candidate there.
// The chunked kernel runs at a given M either as one split per chunk or as one split summing the chunks in
// registers in the same order — the same bits —, whichever the model says is faster, so chunks cost the long
// passes nothing.
func fixedWG(N, K, sms int) fixedChoice {
	kTiles := (K + 63) / 64
	type cand struct {
		c            fixedChoice
		small, large float64
	}
	cands := []cand{{c: fixedChoice{gemmWG256, kTiles}}}
	for s := 1; s <= 16; s++ {
		c := (kTiles + s - 1) / s
		if sp := (kTiles + c - 1) / c; sp != s || (s > 1 && c < 4) {
			continue
		}
		cands = append(cands, cand{c: fixedChoice{gemmWG128, c}})
	}
	bestS, bestL := -1.0, -1.0
	for i := range cands {
		c := &cands[i]
		c.small = fixedCost(c.c, fixedSmallM, N, K, sms)
		c.large = fixedCost(c.c, fixedLargeM, N, K, sms)
		if bestS < 0 || c.small < bestS {
			bestS = c.small
		}
		if bestL < 0 || c.large < bestL {
			bestL = c.large
		}
	}
	best, pick := -1.0, cands[0].c
	for _, c := range cands {
		if score := c.small/bestS + c.large/bestL; best < 0 || score < best-1e-9 {
			best, pick = score, c.c
		}
	}
	return pick
}

// fixedSplits returns the splits the fixed choice c runs with at M: for a chunked choice, one split per chunk when
// the model prefers that to one split summing the chunks in registers, else 1.
func fixedSplits(c fixedChoice, M, N, K, sms int) int {
	kTiles := (K + 63) / 64
	n := (kTiles + c.chunk - 1) / c.chunk
	if c.kern != gemmWG128 || n <= 1 {
		return 1
	}
	if wgCost(c.kern, M, N, K, sms, n, c.chunk) < wgCost(c.kern, M, N, K, sms, 1, kTiles) {
		return n
	}
	return 1
}

// fixedCost is the modelled time of the fixed choice c at M.
func fixedCost(c fixedChoice, M, N, K, sms int) float64 {
	if sp := fixedSplits(c, M, N, K, sms); sp > 1 {
		return wgCost(c.kern, M, N, K, sms, sp, c.chunk)
	}
	return wgCost(c.kern, M, N, K, sms, 1, (K+63)/64)
}

// planFixedV3 is the batch-invariant plan before the stream-K schedule (kept for benchmarks, GEMM.v3). On Hopper
// the wgmma kernel fixedWG picks for (N, K): 128×256 tiles without split-K, or 128×128 tiles with the k tiles
// reduced in fixed chunks (split-K over the chunks when M is small, the chunks summed in registers in split order
// when it is large). Elsewhere as planFixed.
func (d *Device) planFixedV3(g *GEMM) gemmPlan {
	if !d.hopper() {
		return d.planFixed(g)
	}
	sms := d.sms()
	var p gemmPlan
	c := fixedWG(g.N, g.K, sms)
	kTiles := (g.K + 63) / 64
	p.kern, p.mod, p.bm, p.bk, p.threads = c.kern, "gemm_sm90a", 128, 64, 384
	p.splits, p.tps = fixedSplits(c, g.M, g.N, g.K, sms), kTiles
	if p.splits > 1 {
		p.tps = c.chunk
	} else if c.kern == gemmWG128 && c.chunk < kTiles {
		p.chunk = c.chunk
	}
	if c.kern == gemmWG128 {
		p.bn, p.fn, p.shared = 128, "gemm_wgmma_128x128", 6*(128+128)*64*2+1024+16*6
	} else {
		p.bn, p.fn, p.shared = 256, "gemm_wgmma_128x256", 4*(128+256)*64*2+1024+16*4
	}
	p.blocksM, p.blkN = (g.M+p.bm-1)/p.bm, (g.N+p.bn-1)/p.bn
	return p
}

// planFixed is the batch-invariant plan. On Hopper every output element is reduced over the fixed k chunks
// fixedChunk gives for (N, K) — each chunk summed from zero, the chunk sums added in order —, and M only picks the
// schedule that runs them (schedAt): the persistent stream-K kernel, or, for an unchunked (N, K), also the
// 128×256 and 128×128 tile kernels (a k step of wgmma gives every output the same bits whatever the tile width,
// TestGEMMBatchInvariant checks it). Elsewhere the 64×64 mma.sync kernel with the split count that fills the GPU
// four times at M = fixedSmallM, for every M (its split-K has no chunked twin, so long passes pay the partial
// sums).
func (d *Device) planFixed(g *GEMM) gemmPlan {
	sms := d.sms()
	if d.hopper() {
		c := fixedChunk(g.N, g.K, sms)
		s := schedAt(g.M, g.N, g.K, sms, c)
		switch s.kern {
		case gemmSK:
			return skPlan(g.M, g.N, g.K, c, s.skTiles, sms)
		case gemmWGC:
			return wcPlan(s.tile, g.M, g.N, g.K, c, sms)
		}
		kTiles := (g.K + 63) / 64
		if s.splits > 1 {
			return tilePlan(s.tile, g.M, g.N, g.K, s.splits, min(c, kTiles))
		}
		return d.persistent(tilePlan(s.tile, g.M, g.N, g.K, 1, kTiles), g)
	}
	var p gemmPlan
	p.kern, p.mod, p.bk, p.threads = gemmMMA64, "gemm", 32, 128
	p.bm, p.bn, p.fn = 64, 64, "gemm_bf16_64x64"
	p.shared = 4 * (p.bm + p.bn) * p.bk * 2
	kTiles := (g.K + p.bk - 1) / p.bk
	blocks := (g.N + p.bn - 1) / p.bn // one row of tiles: M = fixedSmallM
	splits := max(1, min((4*sms+blocks-1)/blocks, kTiles))
	p.tps = (kTiles + splits - 1) / splits
	p.splits = (kTiles + p.tps - 1) / p.tps
	p.blocksM, p.blkN = (g.M+p.bm-1)/p.bm, (g.N+p.bn-1)/p.bn
	return p
}

// persistent turns a one-split tile plan into the persistent kernel of the same tile (gemm_wgmma_persist: the same
// bits), with one block per multiprocessor at most, unless g asks for waves of one block per tile.
func (d *Device) persistent(p gemmPlan, g *GEMM) gemmPlan {
	if p.splits != 1 || g.waves {
		return p
	}
	p.persist, p.fn = true, fmt.Sprintf("gemm_wgmma_p%dx%d", p.bm, p.bn)
	p.grid = min(p.blocksM*outTilesN(p, g), d.sms())
	if g.grid > 0 { // tests and benchmarks: fewer blocks
		p.grid = min(p.grid, g.grid)
	}
	return p
}

// outTilesN is the tiles across the output columns of plan p for g: p.blkN, or with SwiGLU tiles of bn/2 output
// columns over N/2.
func outTilesN(p gemmPlan, g *GEMM) int {
	if g.SwiGLU {
		return (g.N/2 + p.bn/2 - 1) / (p.bn / 2)
	}
	return p.blkN
}

// SwiGLUFused reports whether GEMM{M, N, K, SwiGLU: true} has a fused kernel on this device (its plan is a
// one-split tile plan); when not, the caller runs the GEMM and SwiGLU apart (the same bits).
func (d *Device) SwiGLUFused(M, N, K int) bool {
	if !d.hopper() || N%16 != 0 || K%8 != 0 {
		return false
	}
	g := GEMM{M: M, N: N, K: K, SwiGLU: true}
	p := d.plan(&g)
	return p.persist && p.kern != gemmWGC
}

// planSK is the stream-K plan when forced (tests): chunk g.chunk (0: fixedChunk's), g.sk stream-K tiles (0: the
// model's choice, < 0: none), g.grid blocks (0: one per multiprocessor).
func (d *Device) planSK(g *GEMM) gemmPlan {
	c, grid := d.forcedChunkGrid(g)
	T := ((g.M + 127) / 128) * ((g.N + 127) / 128)
	sk := 0
	switch {
	case g.sk > 0:
		sk = min(g.sk, T)
	case g.sk == 0:
		sk = bestSK(g.M, g.N, g.K, grid, c)
	}
	return skPlan(g.M, g.N, g.K, c, sk, grid)
}

// forcedChunkGrid is the chunk and grid of a forced stream-K or chunked tile plan: g.chunk and g.grid, or where
// they are not positive fixedChunk's chunk and one block per multiprocessor.
func (d *Device) forcedChunkGrid(g *GEMM) (chunk, grid int) {
	chunk, grid = g.chunk, g.grid
	if chunk <= 0 {
		chunk = fixedChunk(g.N, g.K, d.sms())
	}
	if grid <= 0 {
		grid = d.sms()
	}
	return chunk, grid
}

// planByM is the planner from before batch invariance, for forced kernels, tiles or splits and for benchmarks: on
// Hopper the wgmma kernel whose tile width and split count minimise wgCost at g.M; elsewhere the 128×128 mma.sync
// tile when it fills the GPU four times over, else 64×64 with split-K.
func (d *Device) planByM(g *GEMM) gemmPlan {
	sms := d.sms()
	kern := g.kern
	switch {
	case kern != gemmAuto:
	case g.tile == 64:
		kern = gemmMMA64
	case g.tile == 128:
		kern = gemmMMA128
	case d.hopper():
		kern = gemmWG256 // or gemmWG128: decided below with the splits
	default:
		kern = gemmMMA64
		if ((g.M+127)/128)*((g.N+127)/128) >= 4*sms {
			kern = gemmMMA128
		}
	}
	var p gemmPlan
	fix := func(splits, kTiles int) {
		splits = max(1, min(splits, kTiles))
		p.tps = (kTiles + splits - 1) / splits
		p.splits = (kTiles + p.tps - 1) / p.tps
	}
	switch kern {
	case gemmMMA64, gemmMMA128:
		p.mod, p.bk, p.threads = "gemm", 32, 128
		p.bm, p.bn, p.fn = 64, 64, "gemm_bf16_64x64"
		if kern == gemmMMA128 {
			p.bm, p.bn, p.fn, p.threads = 128, 128, "gemm_bf16_128x128", 256
		}
		p.shared = 4 * (p.bm + p.bn) * p.bk * 2
		kTiles := (g.K + p.bk - 1) / p.bk
		blocks := ((g.M + p.bm - 1) / p.bm) * ((g.N + p.bn - 1) / p.bn)
		splits := g.splits
		if splits == 0 {
			splits = 1
			if kern == gemmMMA64 && blocks < 4*sms {
				splits = (4*sms + blocks - 1) / blocks
			}
		}
		fix(splits, kTiles)
	default:
		kTiles := (g.K + 63) / 64
		best := -1.0
		for _, k := range []gemmKernel{gemmWG256, gemmWG128} {
			if g.kern != gemmAuto && k != g.kern {
				continue
			}
			lo, hi := 1, 16
			if g.splits > 0 {
				lo, hi = g.splits, g.splits
			}
			for s := lo; s <= hi; s++ {
				tps := (kTiles + s - 1) / s
				sp := (kTiles + tps - 1) / tps
				if sp != s || (s > 1 && g.splits == 0 && tps < 4) {
					continue
				}
				t := wgCost(k, g.M, g.N, g.K, sms, sp, tps)
				if best < 0 || t < best {
					best, kern = t, k
					p.splits, p.tps = sp, tps
				}
			}
		}
		if best < 0 { // forced split count beyond the k tiles
			fix(g.splits, kTiles)
		}
		p.mod, p.bm, p.bk, p.threads = "gemm_sm90a", 128, 64, 384
		if kern == gemmWG128 {
			p.bn, p.fn, p.shared = 128, "gemm_wgmma_128x128", 6*(128+128)*64*2+1024+16*6
		} else {
			p.bn, p.fn, p.shared = 256, "gemm_wgmma_128x256", 4*(128+256)*64*2+1024+16*4
		}
	}
	p.kern = kern
	p.blocksM, p.blkN = (g.M+p.bm-1)/p.bm, (g.N+p.bn-1)/p.bn
	return p
}

// GEMM enqueues g. Requirements: K and N multiples of 8, LdX a multiple of 8, LdY even, buffers 16-byte aligned.
func (q *Queue) GEMM(g GEMM) error {
	p, err := q.gemm(&g, false)
	if err != nil || !p.reduce {
		return err
	}
	a := &q.args
	yF32 := int32(0)
	if g.F32Out {
		yF32 = 1
	}
	a.Reset()
	a.Ptr(g.Y.Ptr).Ptr(g.R.Ptr).Ptr(q.d.ws.Ptr).I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.LdY)).I32(yF32).I32(int32(p.splits))
	return q.tagged(&g, p, func() error {
		return q.launch("gemm_sm90a", "gemm_splitk_reduce", gridFor(int64(g.M)*int64(g.N)/4, 256, q.d.sms()), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
	})
}

// AddRMSNormFused reports whether GEMM{M, N, K} followed by AddRMSNorm of its [M, N] output runs as
// GEMMAddRMSNorm on this device: its plan is split-K finished by a reduce launch, which the norm then takes over.
func (d *Device) AddRMSNormFused(M, N, K int) bool {
	return M > 0 && d.normFusable(N, K) && d.plan(&GEMM{M: M, N: N, K: K}).reduce
}

// normFusable reports whether splitk_add_rmsnorm_bf16 can finish a GEMM of N × K weights whose plan has a reduce.
func (d *Device) normFusable(N, K int) bool {
	return d.hopper() && N%8 == 0 && K%8 == 0 && N <= rmsMaxFused
}

// rmsMaxFused is the widest row splitk_add_rmsnorm_bf16 takes (RMS_VEC · RMS_THREADS · 8 in kernels/ops.cu).
const rmsMaxFused = 4 * 128 * 8

// GEMMAddRMSNorm enqueues Y = g.X·g.Wᵀ (bf16, g.M × g.N, no residual, dense rows) followed by sum = Y + res and
// y = RMSNorm(sum, gain, eps, plusOne), as GEMM then RMSNorm with a residual would, for a plan that AddRMSNormFused
// accepts: the GEMM's split partial sums are added, rounded, summed with res and normalised by one kernel
// (splitk_add_rmsnorm_bf16), so Y is never stored and the reduce is not launched. Same bits as the two calls.
func (q *Queue) GEMMAddRMSNorm(g GEMM, y, sum, res, gain Buffer, eps float32, plusOne bool) error {
	const op = "GEMMAddRMSNorm"
	if g.R.Ptr != 0 || g.F32Out || g.SwiGLU || (g.LdY != 0 && g.LdY != g.N) || g.Y.Ptr != 0 {
		return &ArgError{op, "g", "a plain GEMM: no Y, residual, fp32 output, SwiGLU or row stride"}
	}
	if !q.d.normFusable(g.N, g.K) {
		return &ArgError{op, "N, K", fmt.Sprintf("%d, %d: not a GEMM this kernel can finish", g.N, g.K)}
	}
	sz := 2 * int64(g.M) * int64(g.N)
	for _, c := range []struct {
		name string
		b    Buffer
		n    int64
	}{{"y", y, sz}, {"sum", sum, sz}, {"res", res, sz}, {"gain", gain, 4 * int64(g.N)}} {
		if err := need(op, c.name, c.b, c.n); err != nil {
			return err
		}
	}
	g.Y = y // checked and planned as the GEMM's output; the split kernels only write their partial sums
	p, err := q.gemm(&g, true)
	if err != nil {
		return err
	}
	p1 := int32(0)
	if plusOne {
		p1 = 1
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(sum.Ptr).Ptr(q.d.ws.Ptr).Ptr(res.Ptr).Ptr(gain.Ptr).I32(int32(g.M)).I32(int32(g.N)).
		I32(int32(p.splits)).F32(eps).I32(p1)
	return q.tagged(&g, p, func() error {
		return q.launch("ops", "splitk_add_rmsnorm_bf16", cudrv.Dim3{X: g.M, Y: 1, Z: 1}, cudrv.Dim3{X: 512, Y: 1, Z: 1}, 0)
	})
}

// gemm checks and plans g and enqueues its kernel; a plan with reduce leaves the split partial sums in the
// workspace for the caller to finish. With reduce set, a plan without one is refused (GEMMAddRMSNorm).
func (q *Queue) gemm(gp *GEMM, reduce bool) (gemmPlan, error) {
	g := *gp
	const op = "GEMM"
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return gemmPlan{}, &ArgError{op, "M, N, K", fmt.Sprintf("%d, %d, %d must be positive", g.M, g.N, g.K)}
	}
	if g.K%8 != 0 || g.N%8 != 0 {
		return gemmPlan{}, &ArgError{op, "N, K", fmt.Sprintf("%d, %d must be multiples of 8", g.N, g.K)}
	}
	if g.LdX == 0 {
		g.LdX = g.K
	}
	outN := g.N // columns of Y
	if g.SwiGLU {
		if g.N%16 != 0 || g.R.Ptr != 0 || g.F32Out {
			return gemmPlan{}, &ArgError{op, "SwiGLU", fmt.Sprintf("N = %d must be a multiple of 16, with no residual and bf16 Y", g.N)}
		}
		outN = g.N / 2
	}
	if g.LdY == 0 {
		g.LdY = outN
	}
	if g.LdX < g.K || g.LdX%8 != 0 {
		return gemmPlan{}, &ArgError{op, "LdX", fmt.Sprintf("%d must be ≥ K = %d and a multiple of 8", g.LdX, g.K)}
	}
	if g.LdY < outN || g.LdY%2 != 0 {
		return gemmPlan{}, &ArgError{op, "LdY", fmt.Sprintf("%d must be ≥ %d columns and even", g.LdY, outN)}
	}
	ysz := int64(2)
	if g.F32Out {
		ysz = 4
	}
	if err := need(op, "X", g.X, 2*(int64(g.M-1)*int64(g.LdX)+int64(g.K))); err != nil {
		return gemmPlan{}, err
	}
	if err := need(op, "W", g.W, 2*int64(g.N)*int64(g.K)); err != nil {
		return gemmPlan{}, err
	}
	ybytes := ysz * (int64(g.M-1)*int64(g.LdY) + int64(outN))
	if err := need(op, "Y", g.Y, ybytes); err != nil {
		return gemmPlan{}, err
	}
	if g.R.Ptr != 0 {
		if err := need(op, "R", g.R, ybytes); err != nil {
			return gemmPlan{}, err
		}
	}
	if g.tile != 0 && g.tile != 64 && g.tile != 128 {
		return gemmPlan{}, &ArgError{op, "tile", fmt.Sprintf("%d is not 64 or 128", g.tile)}
	}
	d := q.d
	if (g.kern == gemmWG128 || g.kern == gemmWG256 || g.kern == gemmSK || g.kern == gemmWGX || g.xt.bm != 0 || g.xc.bm != 0) && !d.hopper() {
		return gemmPlan{}, &ArgError{op, "kernel", fmt.Sprintf("%v needs compute capability 9.0", g.kern)}
	}
	p := d.plan(&g)
	if reduce && !p.reduce {
		return gemmPlan{}, &ArgError{"GEMMAddRMSNorm", "M, N, K", fmt.Sprintf("%d, %d, %d: not a split-K plan this kernel can finish", g.M, g.N, g.K)}
	}
	if g.SwiGLU {
		if !p.persist || p.kern == gemmWGC {
			return gemmPlan{}, &ArgError{op, "SwiGLU", fmt.Sprintf("no fused kernel for the %s plan of N = %d, K = %d, M = %d", p.fn, g.N, g.K, g.M)}
		}
		p.fn = fmt.Sprintf("gemm_wgmma_g%dx%d", p.bm, p.bn)
	}
	if p.kern == gemmSK {
		if p.skTiles > maxGEMMTiles {
			return gemmPlan{}, &ArgError{op, "M, N", fmt.Sprintf("%d stream-K tiles exceed the %d tile counters", p.skTiles, maxGEMMTiles)}
		}
		if err := q.ReserveWorkspace(max(skWorkspace(p, g.M, g.K), 16)); err != nil {
			return gemmPlan{}, err
		}
	}
	if p.splits > 1 {
		if p.blocksM*p.blkN > maxGEMMTiles {
			return gemmPlan{}, &ArgError{op, "M, N", fmt.Sprintf("%d output tiles exceed the %d split-K tile counters", p.blocksM*p.blkN, maxGEMMTiles)}
		}
		if err := q.ReserveWorkspace(4 * int64(p.splits) * int64(g.M) * int64(g.N)); err != nil {
			return gemmPlan{}, err
		}
	}
	yF32 := int32(0)
	if g.F32Out {
		yF32 = 1
	}
	a := &q.args
	a.Reset()
	if p.mod == "gemm_sm90a" {
		tmX, err := d.tensorMap(cudrv.Tile2D{Addr: g.X.Ptr, Rows: xRows(&g, p.bm), Cols: g.K, Stride: 2 * g.LdX,
			BoxRows: p.bm, BoxCols: p.bk, Swizzle128: true})
		if err != nil {
			return gemmPlan{}, fmt.Errorf("cuda: GEMM: X: %w", err)
		}
		wBox := p.bn
		if g.SwiGLU {
			wBox = p.bn / 2 // the gate rows and the up rows of a tile, loaded side by side
		}
		tmW, err := d.tensorMap(cudrv.Tile2D{Addr: g.W.Ptr, Rows: g.N, Cols: g.K, Stride: 2 * g.K,
			BoxRows: wBox, BoxCols: p.bk, Swizzle128: true})
		if err != nil {
			return gemmPlan{}, fmt.Errorf("cuda: GEMM: W: %w", err)
		}
		cnt := d.cnt.Ptr
		if p.reduce {
			cnt = 0 // no in-kernel finish: gemm_splitk_reduce below
		}
		wpre := int32(0) // the W tiles of the first k steps before the wait: only for uploaded weights
		if g.WLoaded {
			wpre = 1
		}
		gn := int32(l2Group(g.M, p.bn, g.K, outTilesN(p, &g)))
		if gn == 1 && p.persist {
			gn = -1 // m-fastest, each n-tile's m-tiles rotated by its round (tile_at): partial tiles shared out
		}
		if g.gn != 0 {
			gn = int32(g.gn)
		} else if d.gn > 0 {
			gn = int32(d.gn)
		}
		switch {
		case p.persist:
			a.Bytes(tmX[:], 64).Bytes(tmW[:], 64).Ptr(g.Y.Ptr).Ptr(g.R.Ptr).
				I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.K)).I32(int32(g.LdY)).I32(yF32).I32(gn)
			if p.kern == gemmWGC {
				a.I32(int32(p.chunk))
			}
			a.I32(wpre)
		case p.kern == gemmSK:
			a.Bytes(tmX[:], 64).Bytes(tmW[:], 64).Ptr(g.Y.Ptr).Ptr(g.R.Ptr).Ptr(d.ws.Ptr).Ptr(cnt).
				I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.K)).I32(int32(g.LdY)).I32(yF32).I32(int32(p.tps)).
				I32(int32(p.tps)).I32(gn).I32(int32(p.skTiles)) // chunk: k tiles per chunk (all of them when unchunked)
		default:
			a.Bytes(tmX[:], 64).Bytes(tmW[:], 64).Ptr(g.Y.Ptr).Ptr(g.R.Ptr).Ptr(d.ws.Ptr).Ptr(cnt).
				I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.K)).I32(int32(g.LdY)).I32(yF32).I32(int32(p.tps)).
				I32(int32(p.chunk)).I32(gn).I32(wpre)
		}
	} else {
		a.Ptr(g.Y.Ptr).Ptr(g.R.Ptr).Ptr(d.ws.Ptr).Ptr(d.cnt.Ptr).Ptr(g.X.Ptr).Ptr(g.W.Ptr).
			I32(int32(g.M)).I32(int32(g.N)).I32(int32(g.K)).I32(int32(g.LdX)).I32(int32(g.LdY)).I32(yF32).I32(int32(p.tps))
	}
	grid := cudrv.Dim3{X: p.blocksM, Y: p.blkN, Z: p.splits}
	if p.kern == gemmSK || p.persist {
		grid = cudrv.Dim3{X: p.grid, Y: 1, Z: 1}
	}
	if d.tagLaunches() {
		q.tag = gemmTag(&g, p)
		defer func() { q.tag = "" }()
	}
	*gp = g
	return p, q.launch(p.mod, p.fn, grid, cudrv.Dim3{X: p.threads, Y: 1, Z: 1}, p.shared)
}

// gemmTag is what a launch profile prints after the kernels of GEMM g with plan p.
func gemmTag(g *GEMM, p gemmPlan) string {
	switch p.kern {
	case gemmSK:
		return fmt.Sprintf(" N=%d K=%d M=%d chunk=%d skTiles=%d", g.N, g.K, g.M, p.tps, p.skTiles)
	case gemmWGC:
		return fmt.Sprintf(" N=%d K=%d M=%d chunk=%d", g.N, g.K, g.M, p.chunk)
	}
	return fmt.Sprintf(" N=%d K=%d M=%d sp=%d", g.N, g.K, g.M, p.splits)
}

// tagged runs launch with the profile tag of GEMM g (its reduce or fused finish) when a launch profile runs.
func (q *Queue) tagged(g *GEMM, p gemmPlan, launch func() error) error {
	if q.d.tagLaunches() {
		q.tag = gemmTag(g, p)
		defer func() { q.tag = "" }()
	}
	return launch()
}

// gridFor sizes a grid-stride loop over n items: enough blocks to cover n, at most 8 per multiprocessor.
func gridFor(n int64, block, sms int) cudrv.Dim3 {
	if sms <= 0 {
		sms = 132
	}
	b := (n + int64(block) - 1) / int64(block)
	b = max(1, min(b, int64(8*sms)))
	return cudrv.Dim3{X: int(b), Y: 1, Z: 1}
}

// Embedding enqueues y[t] = table[ids[t]] for t < T: table bf16 [V, d], ids int32 [T] on the device, y bf16
// [T, d]. An id outside [0, V) yields a zero row (validate ids on the host to report them).
func (q *Queue) Embedding(y, table, ids Buffer, T, V, d int) error {
	const op = "Embedding"
	if T <= 0 || V <= 0 || d <= 0 || d%8 != 0 {
		return &ArgError{op, "T, V, d", fmt.Sprintf("%d, %d, %d must be positive, d a multiple of 8", T, V, d)}
	}
	if err := need(op, "y", y, 2*int64(T)*int64(d)); err != nil {
		return err
	}
	if err := need(op, "table", table, 2*int64(V)*int64(d)); err != nil {
		return err
	}
	if err := need(op, "ids", ids, 4*int64(T)); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(table.Ptr).Ptr(ids.Ptr).I32(int32(T)).I32(int32(d)).I32(int32(V))
	block := min(128, d/8)
	return q.launch("ops", "embed_bf16", cudrv.Dim3{X: T, Y: (d/8 + block - 1) / block, Z: 1}, cudrv.Dim3{X: block, Y: 1, Z: 1}, 0)
}

// RMSNorm enqueues, for each of the M rows of width n:
//
//	s = x (+ res: then s is rounded to bf16 and stored to sum)
//	y = s / sqrt(mean(s²) + eps) · g,   g = 1 + gain if plusOne, else gain
//
// x, res, sum, y are bf16 [M, n]; gain is fp32 [n]. res and sum are both set or both zero; sum may be res or x
// (in place), y may be x.
func (q *Queue) RMSNorm(y, sum, x, res, gain Buffer, M, n int, eps float32, plusOne bool) error {
	if err := q.rmsnormArgs("RMSNorm", y, sum, x, res, gain, M, n, eps, plusOne); err != nil {
		return err
	}
	return q.launch("ops", "rmsnorm_bf16", cudrv.Dim3{X: M, Y: 1, Z: 1}, cudrv.Dim3{X: 128, Y: 1, Z: 1}, 0)
}

// RMSNormE4M3 is RMSNorm that also writes y's E4M3 codes qb [M, n] (rows n bytes apart) and row scales s [M]: the
// bits QuantRowsE4M3 makes from y (rmsnorm_bf16_e4m3, kernels/ops.cu), without reading y again. n a multiple of
// 16; compute capability 9.0.
func (q *Queue) RMSNormE4M3(y, sum, x, res, gain, qb, s Buffer, M, n int, eps float32, plusOne bool) error {
	const op = "RMSNormE4M3"
	if n%16 != 0 {
		return &ArgError{op, "n", fmt.Sprintf("%d must be a multiple of 16", n)}
	}
	if err := q.rmsnormArgs(op, y, sum, x, res, gain, M, n, eps, plusOne); err != nil {
		return err
	}
	if err := q.needCodes(op, qb, s, M, n); err != nil {
		return err
	}
	q.args.Ptr(qb.Ptr).Ptr(s.Ptr)
	return q.launch("ops", "rmsnorm_bf16_e4m3", cudrv.Dim3{X: M, Y: 1, Z: 1}, cudrv.Dim3{X: 128, Y: 1, Z: 1}, 0)
}

// rmsnormArgs checks RMSNorm's arguments and sets q.args to them.
func (q *Queue) rmsnormArgs(op string, y, sum, x, res, gain Buffer, M, n int, eps float32, plusOne bool) error {
	if M <= 0 || n <= 0 || n%8 != 0 {
		return &ArgError{op, "M, n", fmt.Sprintf("%d, %d must be positive, n a multiple of 8", M, n)}
	}
	sz := 2 * int64(M) * int64(n)
	for _, c := range []struct {
		name string
		b    Buffer
		n    int64
	}{{"y", y, sz}, {"x", x, sz}, {"gain", gain, 4 * int64(n)}} {
		if err := need(op, c.name, c.b, c.n); err != nil {
			return err
		}
	}
	if (res.Ptr == 0) != (sum.Ptr == 0) {
		return &ArgError{op, "res, sum", "set both or neither"}
	}
	if res.Ptr != 0 {
		if err := need(op, "res", res, sz); err != nil {
			return err
		}
		if err := need(op, "sum", sum, sz); err != nil {
			return err
		}
	}
	p1 := int32(0)
	if plusOne {
		p1 = 1
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(sum.Ptr).Ptr(x.Ptr).Ptr(res.Ptr).Ptr(gain.Ptr).I32(int32(M)).I32(int32(n)).F32(eps).I32(p1)
	return nil
}

// SwiGLU enqueues y = silu(g) ⊙ u for x bf16 [M, 2F] = [g | u], y bf16 [M, F]; F a multiple of 8.
func (q *Queue) SwiGLU(y, x Buffer, M, F int) error {
	const op = "SwiGLU"
	if M <= 0 || F <= 0 || F%8 != 0 {
		return &ArgError{op, "M, F", fmt.Sprintf("%d, %d must be positive, F a multiple of 8", M, F)}
	}
	if err := need(op, "y", y, 2*int64(M)*int64(F)); err != nil {
		return err
	}
	if err := need(op, "x", x, 4*int64(M)*int64(F)); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(x.Ptr).I32(int32(M)).I32(int32(F))
	return q.launch("ops", "swiglu_bf16", gridFor(int64(M)*int64(F)/8, 256, q.d.info.SMs), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// SigmoidGate enqueues y = x ⊙ sigmoid(gate) over n bf16 values (n a multiple of 8); y may be x.
func (q *Queue) SigmoidGate(y, x, gate Buffer, n int64) error {
	const op = "SigmoidGate"
	if n <= 0 || n%8 != 0 {
		return &ArgError{op, "n", fmt.Sprintf("%d must be positive and a multiple of 8", n)}
	}
	for _, c := range []struct {
		name string
		b    Buffer
	}{{"y", y}, {"x", x}, {"gate", gate}} {
		if err := need(op, c.name, c.b, 2*n); err != nil {
			return err
		}
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(x.Ptr).Ptr(gate.Ptr).U64(uint64(n))
	return q.launch("ops", "sigmoid_gate_bf16", gridFor(n/8, 256, q.d.info.SMs), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// SigmoidGateE4M3 enqueues sigmoid_gate_bf16_e4m3: y = x ⊙ sigmoid(gate) over bf16 [M, n] (SigmoidGate's values;
// y must not alias x) and, for each row of y, its E4M3 codes into qb [M, n] and its scale into s [M] as
// QuantRowsE4M3 would make them from y. n a multiple of 16, at most 4,096. Hopper only.
func (q *Queue) SigmoidGateE4M3(y, x, gate, qb, s Buffer, M, n int) error {
	const op = "SigmoidGateE4M3"
	if M <= 0 || n <= 0 || n%16 != 0 || n > sigmoidGateE4M3Max {
		return &ArgError{op, "M, n", fmt.Sprintf("%d, %d must be positive, n a multiple of 16 up to %d", M, n, sigmoidGateE4M3Max)}
	}
	sz := 2 * int64(M) * int64(n)
	for _, c := range []struct {
		name string
		b    Buffer
		n    int64
	}{{"y", y, sz}, {"x", x, sz}, {"gate", gate, sz}} {
		if err := need(op, c.name, c.b, c.n); err != nil {
			return err
		}
	}
	if y.Ptr == x.Ptr {
		return &ArgError{op, "y", "must not alias x"}
	}
	if err := q.needCodes(op, qb, s, M, n); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(y.Ptr).Ptr(x.Ptr).Ptr(gate.Ptr).I32(int32(M)).I32(int32(n)).Ptr(qb.Ptr).Ptr(s.Ptr)
	return q.launch("ops", "sigmoid_gate_bf16_e4m3", cudrv.Dim3{X: M, Y: 1, Z: 1}, cudrv.Dim3{X: 128, Y: 1, Z: 1}, 0)
}

// sigmoidGateE4M3Max is the widest row sigmoid_gate_bf16_e4m3 takes (RMS_VEC·RMS_THREADS·8 in kernels/ops.cu).
const sigmoidGateE4M3Max = 4096

// FillUniform enqueues n bf16 values uniform in [-scale, scale) into b, from a hash of (seed, index).
func (q *Queue) FillUniform(b Buffer, n int64, seed uint32, scale float32) error {
	const op = "FillUniform"
	if n <= 0 {
		return &ArgError{op, "n", fmt.Sprintf("%d must be positive", n)}
	}
	if err := need(op, "b", b, 2*n); err != nil {
		return err
	}
	q.args.Reset()
	q.args.Ptr(b.Ptr).U64(uint64(n)).U32(seed).F32(scale)
	return q.launch("ops", "fill_uniform_bf16", gridFor(n, 256, q.d.info.SMs), cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0)
}

// gemmZeroFill makes the X tensor map of the wgmma kernels end at row M, as before xRows (benchmarks compare).
var gemmZeroFill bool

// xRows is the row count the X tensor map of a GEMM with tiles of bm rows declares: M, extended to the tiles' next
// multiple of bm rows as far as X's buffer holds them. TMA fills the rows of a box past the map's end with zeros,
// and on the H200 that costs more than reading them: a last row of tiles with a few live rows took as long as 1.4
// whole ones (docs/design-log.md v25). The rows past M reach only output rows past M, which no kernel stores or sums, so
// whatever they hold (another tensor's rows, NaN) changes no bit of Y. The backend's results have room past their
// last row for this (tileRoom). (W's last n-tile, filled past N the same way, measured no slower: one tile column
// of many, and W is not padded.)
func xRows(g *GEMM, bm int) int {
	if gemmZeroFill {
		return g.M
	}
	fit := int((g.X.Bytes/2-int64(g.K))/int64(g.LdX)) + 1 // rows whose K elements lie in the buffer
	return max(g.M, min(fit, (g.M+bm-1)/bm*bm))
}

// tileRoom is the room, in rows, that a matrix of rows rows has past its end when the backend computes it, so that
// the X boxes of any GEMM tile kernel reading its last rows lie in its buffer (xRows): at most 191.
func tileRoom(rows int) int {
	room := (rows+127)/128*128 - rows // the stream-K and chunked kernels' tiles
	for _, t := range wgTiles {
		room = max(room, (rows+t.bm-1)/t.bm*t.bm-rows)
	}
	return room
}
