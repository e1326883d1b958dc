package cuda

// The FP8 GEMM's tile plan: which tile width a product of a given shape runs with. Pure Go without the driver (no
// build tag), so that its tests run anywhere; GEMMFP8 (fp8.go) applies it.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// fp8Width is one FP8 tile kernel of kernels/fp8_sm90a.cu (FP8_TILE): 128 rows × bn columns, a TMA ring of stages
// k tiles of 128 codes.
type fp8Width struct{ bn, stages int }

// fp8Widths are the FP8 tile kernels, narrowest first. Narrow tiles exist so that products with few columns (the
// 2,560-column projections) or few rows still fill the multiprocessors; every width sums an output element's
// products in the same order, so a row's bits do not depend on the width (TestGEMMFP8Tiles) and the plan may
// follow M.
var fp8Widths = []fp8Width{{24, 10}, {32, 10}, {40, 10}, {48, 10}, {64, 8}, {80, 8}, {96, 8}, {128, 6}, {144, 6}}

// fp8GatedWidths are the widths of the SwiGLU-fused kernels (gemm_fp8_wgmma_g128xBN: BN/2 gate and BN/2 up rows of
// W a tile, so BN a multiple of 16); each has the ring depth of the plain kernel of its width.
var fp8GatedWidths = []int{32, 48, 64, 80, 96, 128, 144}

// fp8Stages is the ring depth of the FP8 tile kernel bn columns wide, or 0 when there is none.
func fp8Stages(bn int) int {
	for _, w := range fp8Widths {
		if w.bn == bn {
			return w.stages
		}
	}
	return 0
}

// The FP8 plan's cost model, in µs, fitted to BenchmarkGEMMFP8's every-width sweep on the H100
// (testdata/fp8_widths_h100.txt: 20 shapes at 40 to 16,384 rows). A k tile (128 codes) of a 128 × bn tile takes a
// fixed time — the consumer's wait for its products before its fp32 adds, the barrier hand-over — and a time per
// column for the products: 0.28 + 0.0035·bn with both 64-row halves live (0.36 at 24 columns, 0.78 at 144). With
// one half live (M ≤ 64) a block's k tile is bound by its W tile's stream from device memory, which slows as more
// blocks stream at once: 0.26 + 0.0035·bn/2 + 0.2 × the share of the multiprocessors running (so the narrowest
// tiles, which fill them all, lose to 48–64 columns on the 2,560-column products). Tiles run in rounds of one block
// per multiprocessor; a call takes at least its W and X from device memory, and a launch's fixed time. Over the
// sweep the planned width is within 5 % of the fastest measured at every shape (TestFP8PlanMeasured).
const (
	fp8StepFixed  = 0.28   // µs per k tile, both halves live
	fp8StepFixed1 = 0.26   // µs per k tile, one half live
	fp8StepCol    = 0.0035 // µs per k tile and tile column (both halves)
	fp8StepBusy   = 0.2    // µs per k tile with one half live and every multiprocessor streaming W
	fp8Fixed      = 3.0    // µs: launch, ring fill, the last epilogue
)

// fp8Cost models the FP8 GEMM [M, K] × [N, K]ᵀ with 128 × bn tiles on sms multiprocessors.
func fp8Cost(M, N, K, sms, bn int) float64 {
	nk := (K + 127) / 128
	blocks := ((M + 127) / 128) * ((N + bn - 1) / bn)
	rounds := (blocks + sms - 1) / sms
	step := fp8StepFixed + fp8StepCol*float64(bn)
	if M <= 64 {
		step = fp8StepFixed1 + fp8StepCol*float64(bn)/2 + fp8StepBusy*float64(min(blocks, sms))/float64(sms)
	}
	floor := (float64(N) + float64(M)) * float64(K) / schedDRAM * 1e6
	return max(float64(rounds*nk)*step, floor) + fp8Fixed
}

// fp8Plan returns the tile width with the least fp8Cost (the wider on a tie: fewer blocks read each X row); with
// gated only the widths of the SwiGLU-fused kernels count (whose tiles of bn W rows give bn/2 output columns: the
// same blocks and k tiles as the plain product of N columns).
func fp8Plan(M, N, K, sms int, gated bool) int {
	best, pick := -1.0, 0
	for _, w := range fp8Widths {
		if gated && !slices.Contains(fp8GatedWidths, w.bn) {
			continue
		}
		if c := fp8Cost(M, N, K, sms, w.bn); best < 0 || c <= best+1e-9 {
			best, pick = c, w.bn
		}
	}
	return pick
}

// fp8FastWidths are the widths of the FP8 kernels without an fp32 total (FP8_FAST in kernels/fp8_sm90a.cu: the
// tensor cores sum all of K, so the sums' registers can hold 192 or 256 columns), plain and gated, one tile a block
// and persistent. They give the bits of every kernel at the promotion interval fp8PromoMax, and run only at it.
var fp8FastWidths = []fp8Width{{192, 5}, {256, 4}}

// fp8FastStages is the ring depth of the FAST kernel bn columns wide, or 0 when there is none.
func fp8FastStages(bn int) int {
	for _, w := range fp8FastWidths {
		if w.bn == bn {
			return w.stages
		}
	}
	return 0
}

// fp8WideDefault is the FAST width fp8Wide moves products to unless KEV_CUDA_FP8_WIDE says otherwise.
const fp8WideDefault = 256

// parseFP8Wide reads KEV_CUDA_FP8_WIDE: "off" (0), or a width of fp8FastWidths that fp8Wide may move products to
// when the promotion interval is fp8PromoMax (fp8WideDefault when s is empty).
func parseFP8Wide(s string) (int, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return fp8WideDefault, nil
	case strings.EqualFold(s, "off"):
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || fp8FastStages(n) == 0 {
		return 0, fmt.Errorf("KEV_CUDA_FP8_WIDE=%q: want off or one of the widths %v", s, fp8FastWidths)
	}
	return n, nil
}

// fp8Wide returns the width a product of M rows and N columns (SwiGLU-fused: gated, N = 2F) planned bn wide runs at
// when the tensor cores sum all of K (the promotion interval fp8PromoMax) and the FAST kernels wide columns wide
// are on (wide > 0): wide when bn is 128 or more and the wide tiles still number at least fp8WideRounds rounds of the
// sms multiprocessors, else bn. Measured on the H100 (the design log v46): at 2,392 and 16,384 rows the 256-column
// tiles are 6–18 % faster than the planned width on the products with that many tiles, level on the 2,560-column
// products at 2,392 rows (190 tiles), and 10–85 % slower at 240 rows, where one round of wide tiles leaves
// multiprocessors idle.
func fp8Wide(M, N, sms, bn, wide int, gated bool) int {
	if wide == 0 || bn < 128 {
		return bn
	}
	nOut, tn := N, wide
	if gated {
		nOut, tn = N/2, wide/2
	}
	if tiles := ((M + 127) / 128) * ((nOut + tn - 1) / tn); tiles < fp8WideRounds*sms {
		return bn
	}
	return wide
}

// fp8WideRounds is the rounds of wide tiles fp8Wide asks for.
const fp8WideRounds = 4

// fp8Cluster reports whether a product of M rows with tiles bn columns wide runs on the cluster kernels
// (gemm_fp8_wgmma_m128xBN: two blocks on row tiles 2p and 2p + 1 share each W tile, read once from L2 and multicast
// into both): when it has more than one row tile and the width has a cluster kernel (bn a multiple of 16), and the
// device has them on (KEV_CUDA_FP8_MC=on; off by default). The same bits either way (TestGEMMFP8Cluster).
func fp8Cluster(M, bn int) bool { return M > 128 && bn%16 == 0 }

// fp8XCluster reports whether a product of mT × nT tiles runs on the X-sharing cluster kernels
// (gemm_fp8_wgmma_x128xBN: two blocks on column tiles 2q and 2q + 1 of the same rows share each X tile, each copying
// half its rows and multicasting them into both) when the device has them on (KEV_CUDA_FP8_XC=on): when it has at
// least two column tiles and its tiles, nT rounded up to whole pairs, fill at most one round of the sms
// multiprocessors — the narrow products of a question pass, whose k loops read each X tile once for every column
// tile. Every width has such a kernel. The same bits either way (TestGEMMFP8XCluster).
func fp8XCluster(mT, nT, sms int) bool { return nT >= 2 && mT*(nT+nT&1) <= sms }

// fp8PersistWidths are the widths of the persistent FP8 kernels (gemm_fp8_wgmma_p128xBN and the gated
// gemm_fp8_wgmma_pg128xBN): the widths the plan picks for products of many rounds of tiles.
var fp8PersistWidths = []int{96, 128, 144}

// fp8Persistent reports whether a product of tiles 128 × bn tiles runs on the persistent kernels (one block per
// multiprocessor, each computing tile after tile, its ring copying the next tile's first k tiles while it finishes
// the one before): when the tiles take more than one round of the sms multiprocessors and the width has a
// persistent kernel (fp8HasPersistent), and the device has them on (unless KEV_CUDA_FP8_PERSIST=off). The same bits either way
// (TestGEMMFP8Persistent). With the cluster kernels on too (fp8Cluster), such products run on the persistent
// cluster kernels (gemm_fp8_wgmma_pm128xBN): clusters of two, as many as run at once, taking pair after pair of row
// tiles.
func fp8Persistent(tiles, sms, bn int) bool {
	return tiles > sms && fp8HasPersistent(bn)
}

// fp8HasPersistent reports whether the width bn has persistent kernels: fp8PersistWidths and the FAST widths.
func fp8HasPersistent(bn int) bool {
	return slices.Contains(fp8PersistWidths, bn) || fp8FastStages(bn) > 0
}

// fp8HalfWidths and fp8HalfGatedWidths are the widths of the FP8 kernels for products of at most 64 rows that split
// each tile's columns between the two consumer warpgroups (gemm_fp8_wgmma_h128xBN, hg128xBN): plain widths whose
// half, gated widths whose quarter (half the gate rows, half the up rows), is a multiple of 8 columns.
var (
	fp8HalfWidths      = []int{32, 48, 64, 80, 96, 128, 144}
	fp8HalfGatedWidths = []int{32, 64, 96, 128}
)

// fp8Half reports whether a product of M rows at width bn (SwiGLU-fused: gated) has a half-column kernel: at most
// 64 rows, and a width in fp8HalfWidths (fp8HalfGatedWidths). One tile a block only.
func fp8Half(M, bn int, gated bool) bool {
	if gated {
		return M <= 64 && slices.Contains(fp8HalfGatedWidths, bn)
	}
	return M <= 64 && slices.Contains(fp8HalfWidths, bn)
}

// The FP8 tile kernels' flags parameter (fp8Flags), as kernels/fp8_sm90a.cu defines it (TestFP8FlagsMatchSource):
// bit 0 (FP8_PIPE) runs the k loop that keeps one k tile's products in flight when the tensor cores sum all of K;
// bits 8 … 15 (FP8_PROMO_SHIFT) hold the promotion interval less one.
const (
	fp8FlagPipe   = 1
	fp8PromoShift = 8
)

// fp8PromoMax is the longest promotion interval the flags hold, in k tiles of 128 codes: 256 k tiles (32,768 codes,
// more than any K of the Kev family) sums all of K in the tensor cores.
const fp8PromoMax = 256

// parseFP8Promote reads KEV_CUDA_FP8_PROMOTE: the k tiles (128 codes each) whose products the tensor cores sum
// before each fp32 add, from 1 (every k tile) to fp8PromoMax, or "all" (fp8PromoMax, the default when s is empty:
// measured as fast as any interval and faster than 1 at every size, with answers that agree with bf16 as often as
// every k tile's do; the design log v46).
func parseFP8Promote(s string) (int, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "", strings.EqualFold(s, "all"):
		return fp8PromoMax, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > fp8PromoMax {
		return 0, fmt.Errorf("KEV_CUDA_FP8_PROMOTE=%q: want k tiles from 1 to %d, or all", s, fp8PromoMax)
	}
	return n, nil
}

// fp8Flags is the kernels' flags parameter for promotion interval promo (1 … fp8PromoMax) and, with pipe, the k loop
// that keeps one k tile's products in flight.
func fp8Flags(promo int, pipe bool) int32 {
	f := int32(promo-1) << fp8PromoShift
	if pipe {
		f |= fp8FlagPipe
	}
	return f
}

// fp8Form is what GEMMFP8 asks of the FP8 kernels: the product's shape, and the width and kernel forms that tests
// and benchmarks set (GEMMFP8's unexported fields, 0 meaning as planned).
type fp8Form struct {
	M, N, K                                int
	swiglu                                 bool
	bn, mc, xc, persist, half, promo, pipe int
}

// fp8Knobs are the device's FP8 settings (Device.fp8Promo, fp8Wide, fp8MC, fp8XC, fp8Persist, fp8Half, fp8Pipe: the
// KEV_CUDA_FP8_* variables) and its multiprocessors.
type fp8Knobs struct {
	sms, promo, wide            int
	mc, xc, persist, half, pipe bool
}

// fp8Launch is the FP8 kernel GEMMFP8 launches for a form: its name, grid (column tiles along y, or along x for the
// X-sharing clusters and a count of blocks for the persistent kernels), shared memory, the rows of its X and W tensor
// maps' boxes, and its gn and flags parameters. clusterPersist: the persistent cluster kernels, whose grid the caller
// sets from the clusters that fit at once.
type fp8Launch struct {
	fn                 string
	gridX, gridY       int
	mT, nT             int
	shared, boxX, boxW int
	gn, flags          int32
	clusterPersist     bool
}

// fp8FormError is a form planFP8 refuses; GEMMFP8 reports it as an *ArgError on arg.
type fp8FormError struct{ arg, reason string }

// planFP8 picks the FP8 kernel for form f on a device with knobs k: the promotion interval (f.promo, else the
// device's), the width (f.bn, else fp8Plan, moved to a FAST width by fp8Wide at all of K), and the kernel's form —
// row clusters (fp8Cluster with KEV_CUDA_FP8_MC=on), X-sharing clusters (fp8XCluster with KEV_CUDA_FP8_XC=on),
// persistent blocks (fp8Persistent), half-column tiles (fp8Half with KEV_CUDA_FP8_HALF=on) or one tile a block,
// each forced on (1) or off (−1) by f. A combination without a kernel is refused, naming the field.
func planFP8(f fp8Form, k fp8Knobs) (fp8Launch, *fp8FormError) {
	var l fp8Launch
	if f.promo < 0 || f.promo > fp8PromoMax {
		return l, &fp8FormError{"promo", fmt.Sprintf("%d k tiles: want 1 to %d (0: the device's)", f.promo, fp8PromoMax)}
	}
	promo := f.promo
	if promo == 0 {
		promo = max(k.promo, 1)
	}
	bn := f.bn
	if bn == 0 {
		bn = fp8Plan(f.M, f.N, f.K, k.sms, f.swiglu)
		if promo == fp8PromoMax {
			bn = fp8Wide(f.M, f.N, k.sms, bn, k.wide, f.swiglu)
		}
	}
	stages, fast := fp8Stages(bn), false
	if stages == 0 {
		stages, fast = fp8FastStages(bn), true
	}
	if stages == 0 || f.swiglu && !fast && !slices.Contains(fp8GatedWidths, bn) {
		return l, &fp8FormError{"bn", fmt.Sprintf("no FP8 tile kernel %d columns wide (SwiGLU %v)", bn, f.swiglu)}
	}
	if fast && promo != fp8PromoMax {
		return l, &fp8FormError{"bn", fmt.Sprintf("the %d-column FP8 kernels sum all of K in the tensor cores: promotion interval %d, want %d", bn, promo, fp8PromoMax)}
	}
	mc := f.mc > 0 || f.mc == 0 && !fast && k.mc && fp8Cluster(f.M, bn)
	if mc && (bn%16 != 0 || fast) {
		return l, &fp8FormError{"bn", fmt.Sprintf("no FP8 cluster kernel %d columns wide", bn)}
	}
	tn, nOut := bn, f.N // a tile's output columns, Y's
	if f.swiglu {
		tn, nOut = bn/2, f.N/2
	}
	mT, nT := (f.M+127)/128, (nOut+tn-1)/tn
	xc := f.xc > 0 || f.xc == 0 && k.xc && !fast && !mc && f.persist <= 0 && f.half <= 0 && fp8XCluster(mT, nT, k.sms)
	if xc && (fast || mc || f.persist > 0 || f.half > 0) {
		return l, &fp8FormError{"xc", fmt.Sprintf("no X-sharing cluster kernel %d columns wide (FAST %v) with clusters %v, persistent %v, half %v", bn, fast, mc, f.persist > 0, f.half > 0)}
	}
	persist := !xc && (f.persist > 0 || f.persist == 0 && k.persist && fp8Persistent(mT*nT, k.sms, bn))
	if persist && !fp8HasPersistent(bn) {
		return l, &fp8FormError{"bn", fmt.Sprintf("no persistent FP8 kernel %d columns wide", bn)}
	}
	half := false // each tile's columns split between the consumers (M ≤ 64)
	switch {
	case f.half > 0:
		if mc || persist || !fp8Half(f.M, bn, f.swiglu) {
			return l, &fp8FormError{"half", fmt.Sprintf("no half-column FP8 kernel for %d rows at %d columns (SwiGLU %v, clusters %v, persistent %v)", f.M, bn, f.swiglu, mc, persist)}
		}
		half = true
	case f.half == 0:
		half = k.half && !mc && !persist && !xc && fp8Half(f.M, bn, f.swiglu)
	}
	l.mT, l.nT = mT, nT
	l.boxW, l.boxX = bn, 128 // W rows a copy brings (a gated tile's gate rows, then its up rows), X rows
	if f.swiglu || mc {
		l.boxW = bn / 2 // a row cluster's block copies half the tile's W rows
	}
	if xc {
		l.boxX = 64 // an X-sharing cluster's block copies half the tile's X rows
	}
	l.flags = fp8Flags(promo, f.pipe > 0 || f.pipe == 0 && k.pipe)
	// l2Group counts bf16 elements of K: half as many bytes here. The X-sharing kernels group pairs of column tiles.
	l.gn = int32(l2Group(f.M, bn, (f.K+1)/2, nT))
	if xc {
		l.gn = max(l.gn/2, 1)
	}
	l.shared = stages*(128+bn)*128 + 1024 + 16*stages
	kind := ""
	l.gridX, l.gridY = mT, nT
	switch {
	case mc && persist:
		kind, l.clusterPersist = "pm", true
	case mc:
		kind = "m"
		l.gridX += mT & 1 // whole clusters of two row tiles
	case persist:
		kind = "p"
		l.gridX, l.gridY = min(mT*nT, k.sms), 1
	case xc:
		kind = "x"
		l.gridX, l.gridY = nT+nT&1, mT // column tiles along x, in whole clusters of two
	case half:
		kind = "h"
	}
	if fast {
		kind += "f"
	}
	if f.swiglu {
		kind += "g"
	}
	l.fn = fmt.Sprintf("gemm_fp8_wgmma_%s128x%d", kind, bn)
	return l, nil
}
