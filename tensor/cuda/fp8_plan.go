package cuda

// The FP8 GEMM's tile plan: which tile width a product of a given shape runs with. Pure Go without the driver (no
// build tag), so that its tests run anywhere; GEMMFP8 (fp8.go) applies it.

// fp8Width is one FP8 tile kernel of kernels/fp8_sm90a.cu (FP8_TILE): 128 rows × bn columns, a TMA ring of stages
// k tiles of 128 codes.
type fp8Width struct{ bn, stages int }

// fp8Widths are the FP8 tile kernels, narrowest first. Narrow tiles exist so that products with few columns (the
// 2,560-column projections) or few rows still fill the multiprocessors; every width sums an output element's
// products in the same order, so a row's bits do not depend on the width (TestGEMMFP8Tiles) and the plan may
// follow M.
var fp8Widths = []fp8Width{{24, 10}, {32, 10}, {40, 10}, {48, 10}, {64, 8}, {80, 8}, {96, 8}, {128, 6}, {144, 6}}

// fp8Promo2Widths are the widths of the experimental kernels that sum 256 codes before each fp32 add.
var fp8Promo2Widths = []int{64, 128}

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

// The FP8 plan's cost model, in µs. A k tile (128 codes) of a 128 × bn tile takes the longest of: the time its
// multiprocessor needs to bring the tile's X and W rows from L2 (only the rows that exist cross: the copy engine
// fills the rest with zeros), the tensor cores' time for the live 64-row halves at the rate the kernel reaches
// (fitted to BenchmarkGEMMFP8 on the H100: a 128 × 128 k tile of two live halves takes ~0.85 µs at 2,392 rows),
// and the latency of one consumer's wait for its products before its fp32 adds. Tiles run in rounds of one block per
// multiprocessor; a call takes at least its W and X from device memory.
const (
	fp8SMBW    = 53e9   // bytes/s one multiprocessor fills shared memory from L2 with (128 × 128 k tiles at 240 rows)
	fp8TCSM    = 4.9e12 // FLOP/s of one multiprocessor's tensor cores in the FP8 kernel
	fp8StepMin = 0.2    // µs: the shortest k tile (barrier, products, wait, adds)
	fp8Epi     = 0.015  // µs per output column of a tile: the epilogue of one round
	fp8Fixed   = 3.0    // µs: launch, ring fill, the last epilogue
)

// fp8Cost models the FP8 GEMM [M, K] × [N, K]ᵀ with 128 × bn tiles on sms multiprocessors.
func fp8Cost(M, N, K, sms, bn int) float64 {
	rows := min(M, 128)
	live := float64((rows + 63) / 64)
	nk := (K + 127) / 128
	step := max(float64((rows+bn)*128)/fp8SMBW*1e6, live*64*float64(bn)*128*2/fp8TCSM*1e6, fp8StepMin)
	blocks := ((M + 127) / 128) * ((N + bn - 1) / bn)
	rounds := (blocks + sms - 1) / sms
	floor := (float64(N) + float64(M)) * float64(K) / schedDRAM * 1e6
	return max(float64(rounds*nk)*step, floor) + float64(rounds)*fp8Epi*float64(bn) + fp8Fixed
}

// fp8Plan returns the tile width with the least fp8Cost (the wider on a tie: fewer blocks read each X row); with
// promo 2 only the widths of the experimental kernels count, with gated only those of the SwiGLU-fused ones (whose
// tiles of bn W rows give bn/2 output columns: the same blocks and k tiles as the plain product of N columns).
func fp8Plan(M, N, K, sms, promo int, gated bool) int {
	var widths []int
	switch {
	case gated:
		widths = fp8GatedWidths
	case promo == 2:
		widths = fp8Promo2Widths
	default:
		for _, w := range fp8Widths {
			widths = append(widths, w.bn)
		}
	}
	best, pick := -1.0, 0
	for _, bn := range widths {
		if c := fp8Cost(M, N, K, sms, bn); best < 0 || c <= best+1e-9 {
			best, pick = c, bn
		}
	}
	return pick
}
