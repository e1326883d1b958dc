//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
)

// rotateBytes is how much input the benchmarks cycle through: several times the 60 MB L2 of an H200, so that
// weights come from device memory as they do in a forward pass.
const rotateBytes = 256 << 20

// medianTime enqueues warm-up launches, then iters launches each bracketed by CUDA events, and returns the
// median launch time in seconds. launch(i) should use input set i.
func medianTime(q *Queue, iters int, launch func(i int) error) (float64, error) {
	for i := 0; i < 3; i++ {
		if err := launch(i); err != nil {
			return 0, err
		}
	}
	evs := make([]cu.Event, iters+1)
	for i := range evs {
		e, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			return 0, cudrv.Wrap("cuEventCreate", err)
		}
		defer cu.DestroyEvent(&e)
		evs[i] = e
	}
	for i := 0; i < iters; i++ {
		if err := evs[i].Record(q.Stream()); err != nil {
			return 0, cudrv.Wrap("cuEventRecord", err)
		}
		if err := launch(i); err != nil {
			return 0, err
		}
	}
	if err := evs[iters].Record(q.Stream()); err != nil {
		return 0, cudrv.Wrap("cuEventRecord", err)
	}
	if err := evs[iters].Synchronize(); err != nil {
		return 0, cudrv.Wrap("cuEventSynchronize", err)
	}
	ts := make([]float64, iters)
	for i := range ts {
		ms, err := evs[i].Elapsed(evs[i+1])
		if err != nil {
			return 0, cudrv.Wrap("cuEventElapsedTime", err)
		}
		ts[i] = ms / 1e3
	}
	slices.Sort(ts)
	return ts[iters/2], nil
}

// GEMM shapes of Kev-4B (N×K): fused GDN in-projection, fused attention QKV, fused gate|up, down, out/o.
var gemmShapes = [][2]int{{12352, 2560}, {10240, 2560}, {18432, 2560}, {2560, 9216}, {2560, 4096}}

func BenchmarkGEMM(b *testing.B) {
	for _, M := range []int{1, 16, 64, 256, 1024, 2048} {
		for _, s := range gemmShapes {
			N, K := s[0], s[1]
			for _, byM := range []bool{false, true} {
				b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/byM=%v", M, N, K, byM), func(b *testing.B) { benchGEMM(b, M, N, K, byM) })
			}
		}
	}
}

// BenchmarkGEMMSchedule times the Kev-4B GEMM shapes at the token counts of question-row passes (64, 240), a
// medium pass (567) and a prefill (2392) under three plans, side by side: "v3" (the batch-invariant plan before
// the stream-K schedule), "new" (the default plan) and "byM" (chosen from M, not batch-invariant). Each prints a
// line "KEVBENCH gemm-sched M= N= K= plan= kern= chunk= skTiles= splits= us= model= GB/s= TFLOP/s=" (model: the
// schedule model's prediction for the default plan, µs).
func BenchmarkGEMMSchedule(b *testing.B) {
	for _, M := range []int{64, 240, 567, 2392} {
		for _, s := range gemmShapes {
			N, K := s[0], s[1]
			for _, plan := range []string{"v3", "new", "byM"} {
				g := GEMM{M: M, N: N, K: K, v3: plan == "v3", byM: plan == "byM"}
				b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/plan=%s", M, N, K, plan), func(b *testing.B) {
					t, p := timeGEMM(b, g)
					model := 0.0
					if dev.hopper() {
						model = schedAt(M, N, K, dev.sms(), fixedChunk(N, K, dev.sms())).us
					}
					fmt.Printf("KEVBENCH gemm-sched M=%d N=%d K=%d plan=%s kern=%v chunk=%d skTiles=%d splits=%d us=%.2f model=%.1f GB/s=%.0f TFLOP/s=%.1f\n",
						M, N, K, plan, p.kern, p.chunk, p.skTiles, p.splits, t*1e6, model,
						float64(2*(M*K+N*K+M*N))/t/1e9, 2*float64(M)*float64(N)*float64(K)/t/1e12)
				})
			}
		}
	}
}

// BenchmarkGEMMTiles times the default plan and every schedule it chooses among, at Kev-4B's shapes and the token
// counts of its passes, each beside the model's time: every wgmma tile kernel with one split (unchunked shapes) or
// with one split per chunk (split-K), and the stream-K kernel, for chunks of ⌈k tiles / s⌉ (s = 2 … 8): the data
// the schedule model and the chunk choice are fitted to. KEV_TILES_M lists the token counts (default
// 64,89,240,567,2392); KEV_TILES_CHUNKS=plan times the planned chunk only (the schedules the planner picks among);
// KEV_TILES_SHAPES=chunked times only the shapes whose planned k tiles are summed in chunks; KEV_TILES_NK=NxK,…
// times other shapes instead of Kev-4B's; KEV_TILES_GN=g runs the tile kernels in tile order g (GEMM.gn);
// KEV_TILES_ZEROFILL=1 ends the X tensor maps at row M, so that TMA fills the rows past it with zeros (gemmZeroFill).
func BenchmarkGEMMTiles(b *testing.B) {
	if !dev.hopper() {
		b.Skip("wgmma kernels need compute capability 9.0")
	}
	sms := dev.sms()
	Ms := []int{64, 89, 240, 567, 2392}
	if v := os.Getenv("KEV_TILES_M"); v != "" {
		Ms = nil
		for _, f := range strings.Split(v, ",") {
			if m, err := strconv.Atoi(f); err == nil && m > 0 {
				Ms = append(Ms, m)
			}
		}
	}
	grid, _ := strconv.Atoi(os.Getenv("KEV_TILES_GRID")) // persistent kernels on fewer blocks
	gnT, _ := strconv.Atoi(os.Getenv("KEV_TILES_GN"))    // the tiles' order (GEMM.gn: 1 m-fastest, −1 rotated)
	gemmZeroFill = os.Getenv("KEV_TILES_ZEROFILL") == "1"
	defer func() { gemmZeroFill = false }()
	shapes := gemmShapes
	if v := os.Getenv("KEV_TILES_NK"); v != "" { // other shapes, "NxK,…" (what L2 holds, for instance)
		shapes = nil
		for _, f := range strings.Split(v, ",") {
			var n, k int
			if _, err := fmt.Sscanf(f, "%dx%d", &n, &k); err == nil && n > 0 && k > 0 {
				shapes = append(shapes, [2]int{n, k})
			}
		}
	}
	for _, M := range Ms {
		for _, s := range shapes {
			N, K := s[0], s[1]
			kTiles := (K + 63) / 64
			c0 := fixedChunk(N, K, sms)
			if c0 >= kTiles && os.Getenv("KEV_TILES_SHAPES") == "chunked" {
				continue
			}
			// the plan, and the plan with its tiles m-fastest (the tile order before L2 groups)
			for _, v := range []struct {
				name string
				gn   int
			}{{"plan", 0}, {"plan-mfast", 1}} {
				b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/%s", M, N, K, v.name), func(b *testing.B) {
					t, p := timeGEMM(b, GEMM{M: M, N: N, K: K, gn: v.gn})
					fmt.Printf("KEVBENCH gemm-tile M=%d N=%d K=%d chunk=%d tile=%s:%s splits=%d skTiles=%d us=%.2f model=%.1f\n",
						M, N, K, c0, v.name, p.fn, p.splits, p.skTiles, t*1e6, schedAt(M, N, K, sms, c0).us)
				})
			}
			chunks := []int{kTiles}
			if c0 < kTiles && os.Getenv("KEV_TILES_CHUNKS") == "plan" {
				chunks = []int{c0}
			} else if c0 < kTiles {
				chunks = nil
				for sp := 2; sp <= 8; sp++ {
					if c := (kTiles + sp - 1) / sp; (kTiles+c-1)/c == sp {
						chunks = append(chunks, c)
					}
				}
			}
			for _, c := range chunks {
				sp := (kTiles + c - 1) / c
				for _, xt := range wgTiles {
					for _, waves := range []bool{false, true} {
						if waves && sp > 1 {
							continue
						}
						name := fmt.Sprintf("%dx%d", xt.bm, xt.bn)
						if sp == 1 && !waves {
							name = "p" + name // the persistent kernel
						}
						b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/c=%d/%s", M, N, K, c, name), func(b *testing.B) {
							t, _ := timeGEMM(b, GEMM{M: M, N: N, K: K, xt: xt, splits: sp, waves: waves, grid: grid, gn: gnT})
							fmt.Printf("KEVBENCH gemm-tile M=%d N=%d K=%d chunk=%d tile=%s splits=%d us=%.2f model=%.1f\n",
								M, N, K, c, name, sp, t*1e6, tileCost(xt, M, N, K, sms, sp, c))
						})
					}
				}
				if c < kTiles {
					b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/c=%d/sk", M, N, K, c), func(b *testing.B) {
						sk, force := bestSK(M, N, K, sms, c), -1 // planSK: sk < 0 means no stream-K tiles
						if sk > 0 {
							force = sk
						}
						t, _ := timeGEMM(b, GEMM{M: M, N: N, K: K, kern: gemmSK, chunk: c, sk: force})
						fmt.Printf("KEVBENCH gemm-tile M=%d N=%d K=%d chunk=%d tile=sk splits=1 skTiles=%d us=%.2f model=%.1f\n",
							M, N, K, c, sk, t*1e6, skCost(M, N, K, sms, c, sk))
					})
					for _, xc := range wcTiles {
						b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/c=%d/c%dx%d", M, N, K, c, xc.bm, xc.bn), func(b *testing.B) {
							t, _ := timeGEMM(b, GEMM{M: M, N: N, K: K, xc: xc, chunk: c})
							fmt.Printf("KEVBENCH gemm-tile M=%d N=%d K=%d chunk=%d tile=c%dx%d splits=1 us=%.2f model=%.1f\n",
								M, N, K, c, xc.bm, xc.bn, t*1e6, wcCost(xc, M, N, K, sms, c))
						})
					}
				}
			}
		}
	}
}

// benchGEMM times Y = X·Wᵀ at one shape, planned batch-invariantly or (byM) from M as well.
func benchGEMM(b *testing.B, M, N, K int, byM bool) {
	t, p := timeGEMM(b, GEMM{M: M, N: N, K: K, byM: byM})
	xb, wb, yb := int64(2*M*K), int64(2*N*K), int64(2*M*N)
	gbs := float64(xb+wb+yb) / t / 1e9
	tfs := 2 * float64(M) * float64(N) * float64(K) / t / 1e12
	b.ReportMetric(t*1e6, "us/gemm")
	b.ReportMetric(gbs, "GB/s")
	b.ReportMetric(tfs, "TFLOP/s")
	fmt.Printf("KEVBENCH gemm M=%d N=%d K=%d byM=%v tile=%v-%dx%d splits=%d chunk=%d us=%.2f GB/s=%.0f TFLOP/s=%.1f\n", M, N, K, byM, p.kern, p.bm, p.bn, p.splits, p.chunk, t*1e6, gbs, tfs)
}

// timeGEMM returns the median device time in seconds of the GEMM g (its M, N, K and plan fields) over rotating
// inputs larger than L2, and its plan.
func timeGEMM(b *testing.B, g GEMM) (float64, gemmPlan) {
	M, N, K := g.M, g.N, g.K
	xb, wb, yb := int64(2*M*K), int64(2*N*K), int64(2*M*N)
	xb += int64(2 * tileRoom(M) * K) // room past row M, as the backend's results have (xRows)
	sets := int(max(2, min(16, (rotateBytes+xb+wb-1)/(xb+wb))))
	var t float64
	p := dev.plan(&g)
	splits := p.splits
	err := dev.Do(func(q *Queue) error {
		var bufs []Buffer
		defer func() {
			for _, x := range bufs {
				q.Free(x)
			}
		}()
		alloc := func(n int64, seed uint32, scale float32) (Buffer, error) {
			x, err := q.Alloc(n)
			if err != nil {
				return x, err
			}
			bufs = append(bufs, x)
			return x, q.FillUniform(x, n/2, seed, scale)
		}
		xs, ws := make([]Buffer, sets), make([]Buffer, sets)
		for i := range xs {
			var err error
			if xs[i], err = alloc(xb, uint32(2*i+1), 1); err != nil {
				return err
			}
			if ws[i], err = alloc(wb, uint32(2*i+2), 0.02); err != nil {
				return err
			}
		}
		y, err := alloc(yb, 99, 1)
		if err != nil {
			return err
		}
		if splits > 1 {
			if err := q.ReserveWorkspace(4 * int64(splits) * int64(M) * int64(N)); err != nil {
				return err
			}
		}
		b.ResetTimer()
		t, err = medianTime(q, max(b.N, 25), func(i int) error {
			h := g
			h.Y, h.X, h.W = y, xs[i%sets], ws[i%sets]
			return q.GEMM(h)
		})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(t*1e6, "us/gemm")
	return t, p
}

// BenchmarkCopy measures a device-to-device copy of 1 GiB, the bandwidth ceiling (bytes read + written).
func BenchmarkCopy(b *testing.B) {
	const n = 1 << 30
	var t float64
	err := dev.Do(func(q *Queue) error {
		src, err := q.Alloc(n)
		if err != nil {
			return err
		}
		defer q.Free(src)
		dst, err := q.Alloc(n)
		if err != nil {
			return err
		}
		defer q.Free(dst)
		if err := q.FillUniform(src, n/2, 3, 1); err != nil {
			return err
		}
		t, err = medianTime(q, max(b.N, 25), func(int) error {
			return cudrv.Wrap("cuMemcpyDtoDAsync", cu.MemcpyDtoDAsync(dst.Ptr, src.Ptr, n, q.Stream()))
		})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(2*n/t/1e9, "GB/s")
	fmt.Printf("KEVBENCH copy bytes=%d us=%.2f GB/s=%.0f\n", 2*n, t*1e6, 2*n/t/1e9)
}

// BenchmarkOps measures the memory-bound kernels at 2048 tokens of Kev-4B.
func BenchmarkOps(b *testing.B) {
	const M, d, F = 2048, 2560, 9216
	type op struct {
		name  string
		bytes int64
		run   func(q *Queue, bufs []Buffer) error
	}
	ops := []op{
		{"rmsnorm+residual", 2 * M * d * 4, func(q *Queue, x []Buffer) error {
			return q.RMSNorm(x[1], x[2], x[0], x[2], x[3], M, d, 1e-6, true)
		}},
		{"swiglu", 2 * M * F * 3, func(q *Queue, x []Buffer) error { return q.SwiGLU(x[1], x[4], M, F) }},
		{"sigmoid-gate", 2 * M * 4096 * 3, func(q *Queue, x []Buffer) error { return q.SigmoidGate(x[1], x[0], x[2], M*4096) }},
	}
	for _, o := range ops {
		b.Run(o.name, func(b *testing.B) {
			var t float64
			err := dev.Do(func(q *Queue) error {
				var bufs []Buffer
				defer func() {
					for _, x := range bufs {
						q.Free(x)
					}
				}()
				for i, n := range []int64{2 * M * 4096, 2 * M * F, 2 * M * 4096, 4 * d, 4 * M * F} {
					x, err := q.Alloc(n)
					if err != nil {
						return err
					}
					bufs = append(bufs, x)
					if err := q.FillUniform(x, n/2, uint32(10+i), 0.5); err != nil {
						return err
					}
				}
				var err error
				t, err = medianTime(q, max(b.N, 25), func(int) error { return o.run(q, bufs) })
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(t*1e6, "us/op")
			b.ReportMetric(float64(o.bytes)/t/1e9, "GB/s")
			fmt.Printf("KEVBENCH %s M=%d us=%.2f GB/s=%.0f\n", o.name, M, t*1e6, float64(o.bytes)/t/1e9)
		})
	}
}
