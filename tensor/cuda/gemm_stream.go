//go:build cuda

package cuda

// The weight-streaming GEMM (kernels/gemm_stream.cu) for small M: a block owns 128 consecutive W rows and a K
// range, each warp 16 rows, read in 256-byte row segments straight into registers; the X tile of a 128-wide k step
// sits in shared memory, shared by all 128 rows.

const (
	streamRows  = 128 // W rows (output columns) per block
	streamStep  = 128 // k per step
	streamMaxM  = 128 // largest M the kernel takes (8 m16 tiles)
	streamAutoM = 16  // largest M the planner gives it: measured faster than the wgmma path up to 16, slower from 32

	// Cost model, fitted to the split sweeps of BenchmarkGEMMSmall at M = 16 on the H200 (docs/design-log.md, v5).
	streamBW    = 2.7e12 // bytes/s of W for the whole GPU
	streamCTABW = 27e9   // bytes/s of W for one block (one step of each warp in flight)
	streamL2BW  = 3e12   // bytes/s for the split-K partial sums (written and read back through L2)
	streamTail  = 1e-6   // s, the last split's reduction
)

// streamTiles returns the number of m16 tiles the kernel instance for M rows has: 1, 2, 4 or 8.
func streamTiles(M int) int {
	mt := 1
	for 16*mt < M {
		mt *= 2
	}
	return mt
}

// streamCost models the time of the streaming GEMM with the given splits (each of tps steps of 128 k) on sms
// multiprocessors: W at streamBW overall, or the busiest multiprocessor's waves of resident blocks at streamCTABW
// each, whichever is longer, plus the partial sums' round trip and the finishing tail when split.
func streamCost(M, N, K, sms, splits, tps int) float64 {
	resident := 2 // blocks per multiprocessor (registers, shared memory)
	if streamTiles(M) == 8 {
		resident = 1
	}
	blocks := (N + streamRows - 1) / streamRows * splits
	waves := (blocks + sms*resident - 1) / (sms * resident)
	t := max(float64(N)*float64(K)*2/streamBW, float64(waves*tps)*streamRows*streamStep*2/streamCTABW)
	if splits > 1 {
		t += float64(M)*float64(N)*8*float64(splits)/streamL2BW + streamTail
	}
	return t
}

// planStream returns the streaming kernel's plan for g, and whether it applies: when forced (g.kern ==
// gemmStream, M ≤ 128), or chosen by the M-dependent planner (g.byM, no kernel or tile forced, M ≤ streamAutoM).
// The batch-invariant planner never takes it: its mma.sync products sum k in another order than the wgmma
// kernels, so a row's bits would change with the batch size. Splits are g.splits when set, else the count that
// minimises streamCost.
func (d *Device) planStream(g *GEMM) (gemmPlan, bool) {
	var p gemmPlan
	if g.M > streamMaxM || g.tile != 0 || g.noStream || (g.kern != gemmStream && (g.kern != gemmAuto || !(g.byM || d.byM) || g.M > streamAutoM)) {
		return p, false
	}
	mt := streamTiles(g.M)
	kt := (g.K + streamStep - 1) / streamStep
	p.kern, p.mod, p.fn = gemmStream, "gemm_stream", [...]string{1: "gemm_stream_mt1", 2: "gemm_stream_mt2", 4: "gemm_stream_mt4", 8: "gemm_stream_mt8"}[mt]
	p.bm, p.bn, p.bk, p.threads = 16*mt, streamRows, streamStep, 256
	p.shared = 2 * 16 * mt * (2*streamStep + 64)
	p.blocksM, p.blkN = 1, (g.N+streamRows-1)/streamRows
	fix := func(s int) (int, int) {
		s = max(1, min(s, kt))
		tps := (kt + s - 1) / s
		return (kt + tps - 1) / tps, tps
	}
	if g.splits > 0 {
		p.splits, p.tps = fix(g.splits)
		return p, true
	}
	best := -1.0
	for s := 1; s <= min(kt, 32); s++ {
		sp, tps := fix(s)
		if sp != s {
			continue
		}
		if t := streamCost(g.M, g.N, g.K, d.sms(), sp, tps); best < 0 || t < best {
			best, p.splits, p.tps = t, sp, tps
		}
	}
	return p, true
}
