package cuda

// The GEMM schedule model of the sm_90a kernels: which kernel, tile, k partition and schedule a GEMM of a given
// shape runs with, and what it costs. Pure Go without the driver (no build tag), so that its tests run anywhere;
// the planner that applies it to a device is in kernels.go.

import "sync"

// gemmKernel names a GEMM kernel family.
type gemmKernel int

const (
	gemmAuto   gemmKernel = iota
	gemmMMA64             // mma.sync, 64×64 tiles, 4 stages (compute_80)
	gemmMMA128            // mma.sync, 128×128 tiles, 4 stages (compute_80)
	gemmWG128             // wgmma + TMA, 128×128 tiles, 6 stages, warp-specialised (sm_90a)
	gemmWG256             // wgmma + TMA, 128×256 tiles, 4 stages, warp-specialised (sm_90a)
	gemmStream            // weight streaming, 128 W rows per block, M ≤ 128 (compute_80; gemm_stream.go)
	gemmSK                // wgmma + TMA, 128×128 tiles, persistent stream-K over fixed k chunks (sm_90a)
	gemmWGX               // wgmma + TMA, another tile of wgTiles (sm_90a; the plan's bm × bn)
	gemmWGC               // wgmma + TMA, persistent whole tiles of wcTiles summing fixed k chunks (sm_90a)
)

// String returns the kernel's short name, as the benchmarks print it.
func (k gemmKernel) String() string {
	return [...]string{"auto", "mma64", "mma128", "wg128", "wg256", "stream", "sk", "wgx", "wgc"}[k]
}

// maxGEMMTiles bounds the output tiles of one split-K GEMM (the in-kernel tile counters).
const maxGEMMTiles = 1 << 16

// wgTile is one of the wgmma tile kernels of gemm_sm90a.cu: bm × bn output tiles (bm = 128), a TMA ring of stages
// k steps.
type wgTile struct{ bm, bn, stages int }

// wgTiles are the wgmma tile kernels: the first two are the 128×256 and 128×128 kernels (gemmWG256, gemmWG128),
// the others (gemmWGX) exist so that at small M the tiles, or the tiles times the splits of a chunked shape, fill
// the multiprocessors, and — 192 rows, three consumer warpgroups — so that an M just above a multiple of 128 does
// not read every W tile once more for a few rows (M = 257 needs three 128-row tiles but two of 192). (Tiles of 256
// rows, two m64 tiles per consumer, were measured slower at every M on the H200: docs/design-log.md, "GEMM tiles per
// M".)
var wgTiles = []wgTile{
	{128, 256, 4}, {128, 128, 6},
	{128, 64, 8}, {128, 96, 7}, {128, 144, 6}, {128, 192, 5},
	{192, 64, 7}, {192, 96, 6}, {192, 128, 5}, {192, 144, 5}, {192, 192, 4},
}

// wcTiles are the persistent chunked tile kernels (gemm_wgmma_cBMxBN): for a chunked (N, K), each block sums its
// tiles' k chunks in order in a second accumulator set in shared memory — the bits of the stream-K kernel and of
// split-K with one split per chunk — with no partial sums in memory, in tiles wider than the stream-K kernel's.
var wcTiles = []wgTile{{128, 160, 4}}

// kern is the kernel family of the tile kernel t.
func (t wgTile) kern() gemmKernel {
	switch {
	case t.bm == 128 && t.bn == 256:
		return gemmWG256
	case t.bm == 128 && t.bn == 128:
		return gemmWG128
	}
	return gemmWGX
}

// The schedule model: times in µs of the wgmma kernels, fitted to the H200's per-launch profiles of Kev-4B passes
// (docs/design-log.md, "GEMM schedule"). A k step of a 128×bn tile costs the longer of its tensor-core time and the
// time its multiprocessor's copy engine needs to bring the X and W tiles from L2 (the measured bound: 128×128
// steps take ~0.6 µs, 128×256 ~0.9 µs, whatever M ≥ 128); a call takes at least its W and X from device memory.
const (
	schedSMBW     = 56e9   // bytes/s one multiprocessor fills shared memory from L2 with while all of them load
	schedTC       = 660e12 // FLOP/s of the tensor cores of the whole GPU in these kernels
	schedDRAM     = 2.6e12 // bytes/s from device memory as these kernels stream it (measured 2.1–2.6 TB/s at M ≤ 128)
	schedFixed    = 3.0    // µs: launch, pipeline fill, the last epilogue
	schedFixBW    = 150e9  // bytes/s one block moves partial sums with (batched loads through L2)
	schedFixLat   = 1.0    // µs: fence, counter and first loads of a fix-up
	schedWSMax    = 256 << 20
	schedPartBW   = 8e12     // bytes/s split-K partial sums are written, read back and Y stored with, within L2
	schedDRAMPart = 2.5e12   // the same when they do not fit in L2
	schedL2       = 40e6     // bytes of partial-sum traffic that stay in L2
	schedReduce   = 2.0      // µs: gemm_splitk_reduce's launch and tail
	schedSKSplit  = 1.4      // the stream-K kernel's measured time over the model when it splits tiles (fix-ups)
	schedChunkEnd = 0.5      // µs: a chunked tile kernel's wait for a chunk's products
	schedWCStep   = 0.83     // a chunked tile kernel's k step over tileStepUS (fitted, BenchmarkGEMMTiles run=e)
	schedWCX      = 48 << 20 // bytes of X above which the chunked tile kernels are weighed (X beyond L2)
)

// schedMs are the token counts fixedChunk weighs: question-row passes (64, 240), a medium pass and a prefill.
var schedMs = []int{64, 240, 567, 2392}

// stepUS is the modelled time of one 64-deep k step of a 128×bn tile at M rows.
func stepUS(bn, M, sms int) float64 {
	rows := min(M, 128)
	live := float64((rows+63)/64) / 2 // consumer warpgroups with rows
	tc := 128 * float64(bn) * 64 * 2 * live / (schedTC / float64(sms)) * 1e6
	return max(tc, float64((rows+bn)*64*2)/schedSMBW*1e6)
}

// tileStepUS is the modelled time of one 64-deep k step of a bm×bn tile at M rows (stepUS for any tile).
func tileStepUS(t wgTile, M, sms int) float64 {
	rows := min(M, t.bm)
	live := float64((rows + 63) / 64) // 64-row wgmma tiles with rows
	tc := live * 64 * float64(t.bn) * 64 * 2 / (schedTC / float64(sms)) * 1e6
	return max(tc, float64((rows+t.bn)*64*2)/schedSMBW*1e6)
}

// tileCost models the tile kernel t with splits splits of tps k tiles: waves of one block per multiprocessor;
// with splits, each block also stores its partial sums, all of them cross device memory (written, then read by
// gemm_splitk_reduce), and the reduce is a launch of its own.
//
// A partial tile costs what a whole one does: one consumer warpgroup alone waits out its wgmma chain's latency
// (measured: M = 129 takes 1.84× M = 128 with 128×144 tiles, one or two tiles a block).
func tileCost(t wgTile, M, N, K, sms, splits, tps int) float64 {
	blocks := ((M + t.bm - 1) / t.bm) * ((N + t.bn - 1) / t.bn) * splits
	waves := (blocks + sms - 1) / sms
	us := max(float64(waves*tps)*tileStepUS(t, M, sms), floorUS(M, N, K)) + schedFixed
	if splits > 1 {
		slot := float64(min(M, t.bm) * t.bn * 4)
		part := float64(2*splits*4+2) * float64(M) * float64(N)
		bw := schedPartBW
		if part > schedL2 {
			bw = schedDRAMPart
		}
		us += float64(waves)*slot/(2*schedFixBW)*1e6 + schedReduce + part/bw*1e6
	}
	return us
}

// floorUS is the time to read W and X once from device memory.
func floorUS(M, N, K int) float64 {
	return (float64(N) + float64(M)) * float64(K) * 2 / schedDRAM * 1e6
}

// skCost models the stream-K kernel with chunks of c k tiles and skTiles stream-K tiles on grid blocks: the
// busiest block's k steps (its whole tiles, then its share of the units rounded up), plus, when tiles are shared,
// the partial sums it stores and the last block's fix-up, which reads every chunk slot of its tile.
func skCost(M, N, K, grid, c, skTiles int) float64 {
	kTiles := (K + 63) / 64
	c = max(1, min(c, kTiles))
	nch := (kTiles + c - 1) / c
	T := ((M + 127) / 128) * ((N + 127) / 128)
	whole := (T - skTiles + grid - 1) / grid
	units := skTiles * nch
	per := (units + grid - 1) / grid
	steps := whole*kTiles + per*c
	t := max(float64(steps)*stepUS(128, M, grid), floorUS(M, N, K)) + schedFixed
	if skTiles > 0 && nch > 1 {
		slot := float64(min(M, 128) * 128 * 4)
		t += schedFixLat + float64(nch)*slot/schedFixBW*1e6 + float64(min(per, nch))*slot/(2*schedFixBW)*1e6
		t *= schedSKSplit
	}
	return t
}

// wcCost models the chunked tile kernel t with chunks of c k tiles: waves of whole tiles whose k steps take
// schedWCStep of tileStepUS's (measured: 0.55 µs a 128×160 step at M = 8,000 and 16,192 against 0.66 modelled),
// plus a wait for the products at every chunk end.
func wcCost(t wgTile, M, N, K, sms, c int) float64 {
	kTiles := (K + 63) / 64
	c = max(1, min(c, kTiles))
	nch := (kTiles + c - 1) / c
	blocks := ((M + t.bm - 1) / t.bm) * ((N + t.bn - 1) / t.bn)
	waves := (blocks + sms - 1) / sms
	steps := float64(waves*kTiles) * tileStepUS(t, M, sms) * schedWCStep
	return max(steps, floorUS(M, N, K)) + schedFixed + float64(waves*nch)*schedChunkEnd
}

// skOptions are the stream-K tile counts worth modelling for T tiles on grid blocks: all of them or none when
// they fit in one wave, else the last partial wave (and one full wave more) or none.
func skOptions(T, grid int) []int {
	if T <= grid {
		return []int{T, 0}
	}
	r := T % grid
	if r == 0 {
		return []int{0, grid}
	}
	return []int{r, r + grid, 0}
}

// bestSK returns the stream-K tile count with the least skCost whose partial-sum slots fit schedWSMax.
func bestSK(M, N, K, grid, c int) int {
	kTiles := (K + 63) / 64
	c = max(1, min(c, kTiles))
	nch := (kTiles + c - 1) / c
	T := ((M + 127) / 128) * ((N + 127) / 128)
	best, pick := -1.0, 0
	for _, sk := range skOptions(T, grid) {
		if nch > 1 && int64(sk)*int64(nch)*int64(min(M, 128))*128*4 > schedWSMax {
			continue
		}
		if t := skCost(M, N, K, grid, c, sk); best < 0 || t < best-1e-9 {
			best, pick = t, sk
		}
	}
	return pick
}

// schedChoice is the schedule schedAt picks for one M.
type schedChoice struct {
	kern    gemmKernel // gemmSK, or a tile kernel (tile)
	tile    wgTile     // tile kernels (gemmWGC: of wcTiles): which one
	splits  int        // tile kernels: 1, or one split per chunk
	skTiles int
	us      float64
}

// schedAt picks the fastest schedule by the model for chunks of c k tiles at M: a tile kernel (any of wgTiles)
// with one split when c covers all k tiles, or with one split per chunk (split-K, the partials added in chunk
// order: the same bits) when its workspace fits; or, chunked, a persistent chunked tile kernel of wcTiles; or the
// stream-K kernel with bestSK's tile count.
func schedAt(M, N, K, sms, c int) schedChoice {
	s := schedWith(M, N, K, sms, c, schedBM)
	kTiles := (K + 63) / 64
	// Measured (run=e): where X fits in L2 the stream-K kernel's whole 128×128 tiles are as fast or faster (M = 567,
	// 2,392); beyond it the 128×160 tiles take 12–20 % less time (M = 8,000, 16,192).
	if schedPrev || schedNoWC || c >= kTiles || int64(M)*int64(K)*2 <= schedWCX {
		return s
	}
	for _, t := range wcTiles {
		if schedBM != 0 && t.bm != schedBM {
			continue
		}
		if us := wcCost(t, M, N, K, sms, c); us < s.us-1e-9 {
			s = schedChoice{kern: gemmWGC, tile: t, splits: 1, us: us}
		}
	}
	return s
}

// schedNoWC leaves the chunked tile kernels out of schedAt, for benchmarks that compare the schedules with and
// without them in one run. Set only on the device thread, between GEMMs.
var schedNoWC bool

// schedBM restricts schedAt to the tile kernels of that many rows (0: all), for benchmarks that compare the
// schedules with and without the 192-row tiles in one run. Set only on the device thread, between GEMMs.
var schedBM int

// schedWith is schedAt over the tile kernels of wgTiles with bm rows (0: all of them) and the stream-K kernel —
// without the chunked tile kernels, which fixedChunk does not weigh.
func schedWith(M, N, K, sms, c, bm int) schedChoice {
	kTiles := (K + 63) / 64
	c = max(1, min(c, kTiles))
	nch := (kTiles + c - 1) / c
	var best schedChoice
	best.us = -1
	for i, t := range wgTiles {
		if schedPrev && (i > 1 || nch > 1) || bm != 0 && t.bm != bm {
			continue
		}
		tps, sp := kTiles, 1
		if nch > 1 {
			tps, sp = c, nch
			if 4*int64(sp)*int64(M)*int64(N) > schedWSMax ||
				((M+t.bm-1)/t.bm)*((N+t.bn-1)/t.bn) > maxGEMMTiles {
				continue
			}
		}
		if us := tileCost(t, M, N, K, sms, sp, tps); best.us < 0 || us < best.us-1e-9 {
			best = schedChoice{kern: t.kern(), tile: t, splits: sp, us: us}
		}
	}
	sk := bestSK(M, N, K, sms, c)
	if t := skCost(M, N, K, sms, c, sk); best.us < 0 || t < best.us-1e-9 {
		best = schedChoice{kern: gemmSK, skTiles: sk, us: t}
	}
	return best
}

// schedPrev restricts the schedule to what it was before the per-M tile kernels (the 128×256 and 128×128 tiles
// for unchunked shapes, stream-K for chunked ones), for benchmarks that compare both in one run. Set only on the
// device thread, between GEMMs.
var schedPrev bool

type chunkKey struct {
	N, K, sms int
	prev      bool
}

var chunkMemo sync.Map // chunkKey → int

// fixedChunk returns the k tiles per chunk of the batch-invariant plan for (N, K) on sms multiprocessors (all the
// k tiles: unchunked): among c = ⌈k tiles / s⌉ for s = 1 … 16 chunks (at least 4 tiles per chunk), the one with the
// least sum over schedMs of its modelled time relative to the best c at that M. The time is modelled with the
// 128-row tiles only, without the chunked tile kernels: the chunks were chosen so before the 192-row and chunked
// tiles existed, and keeping them keeps every GEMM's bits (a tile only runs the partition; it does not choose it).
func fixedChunk(N, K, sms int) int {
	key := chunkKey{N, K, sms, schedPrev}
	if c, ok := chunkMemo.Load(key); ok {
		return c.(int)
	}
	kTiles := (K + 63) / 64
	var cs []int
	for s := 1; s <= 16; s++ {
		c := (kTiles + s - 1) / s
		if (kTiles+c-1)/c != s || (s > 1 && c < 4) {
			continue
		}
		cs = append(cs, c)
	}
	us := make([][]float64, len(cs))
	best := make([]float64, len(schedMs))
	for i, c := range cs {
		us[i] = make([]float64, len(schedMs))
		for j, M := range schedMs {
			us[i][j] = schedWith(M, N, K, sms, c, 128).us
			if i == 0 || us[i][j] < best[j] {
				best[j] = us[i][j]
			}
		}
	}
	pick, score := cs[0], -1.0
	for i, c := range cs {
		sc := 0.0
		for j := range schedMs {
			sc += us[i][j] / best[j]
		}
		if score < 0 || sc < score-1e-9 {
			pick, score = c, sc
		}
	}
	chunkMemo.Store(key, pick)
	return pick
}

// l2GroupBytes bounds the W rows of one group of n-tiles in the wgmma kernels' tile order.
const l2GroupBytes = 16 << 20

// l2Group is the n-tiles per group of the wgmma kernels' tile order (tile_at in kernels/gemm_sm90a.cu) for an X of
// M rows of K bf16 and tiles that read bn rows of W, nT tiles across. While X fits in L2 with room to spare (up to
// 2·l2GroupBytes), 1: m-fastest, the blocks running at once share W tiles and X stays in L2 (measured faster at
// M = 240). A taller X streamed from memory once per n-tile in that order, so then groups of as many n-tiles as
// keep a group's W rows within l2GroupBytes, a quarter of the H200's 60 MiB of L2: the blocks running at once (a
// group's n-tiles × some 132/gn m-tiles) reuse both their X rows and their W rows from L2, and X is read once per
// group.
func l2Group(M, bn, K, nT int) int {
	if int64(M)*int64(K)*2 <= 2*l2GroupBytes {
		return 1
	}
	return max(1, min(nT, l2GroupBytes/max(1, bn*K*2)))
}
