//go:build cuda

package cuda

import (
	"fmt"
	"testing"
)

// TestGEMMStreamPlan checks the streaming kernel's plans: which M it takes (only when forced, or with byM up to
// streamAutoM), the instance per M, and splits that cover every k step exactly once with no empty split.
func TestGEMMStreamPlan(t *testing.T) {
	d := &Device{}
	for _, c := range []struct {
		M, N, K, splits int
		kern            gemmKernel
		tile            int
		byM             bool
		want            bool
		fn              string
	}{
		{M: 1, N: 12352, K: 2560},
		{M: 16, N: 2560, K: 9216},
		{M: 1, N: 12352, K: 2560, byM: true, want: true, fn: "gemm_stream_mt1"},
		{M: 16, N: 2560, K: 9216, byM: true, want: true, fn: "gemm_stream_mt1"},
		{M: 17, N: 2560, K: 4096, byM: true},
		{M: 17, N: 2560, K: 4096, kern: gemmStream, want: true, fn: "gemm_stream_mt2"},
		{M: 64, N: 18432, K: 2560, kern: gemmStream, want: true, fn: "gemm_stream_mt4"},
		{M: 65, N: 10240, K: 2560},
		{M: 65, N: 10240, K: 2560, kern: gemmStream, want: true, fn: "gemm_stream_mt8"},
		{M: 128, N: 264, K: 4096, kern: gemmStream, splits: 5, want: true, fn: "gemm_stream_mt8"},
		{M: 129, N: 264, K: 4096, kern: gemmStream},
		{M: 16, N: 264, K: 4096, tile: 64},
		{M: 16, N: 264, K: 4096, kern: gemmWG128},
		{M: 3, N: 128, K: 256, kern: gemmStream, splits: 7, want: true, fn: "gemm_stream_mt1"},
	} {
		g := GEMM{M: c.M, N: c.N, K: c.K, splits: c.splits, kern: c.kern, tile: c.tile, byM: c.byM}
		p, ok := d.planStream(&g)
		if ok != c.want {
			t.Errorf("M=%d N=%d K=%d kern=%v tile=%d: stream = %v, want %v", c.M, c.N, c.K, c.kern, c.tile, ok, c.want)
			continue
		}
		if !ok {
			continue
		}
		kt := (c.K + streamStep - 1) / streamStep
		if p.fn != c.fn || p.bm < c.M || p.bn != streamRows || p.blkN*streamRows < c.N || p.blocksM != 1 {
			t.Errorf("M=%d N=%d K=%d: plan %+v, want %s", c.M, c.N, c.K, p, c.fn)
		}
		if p.splits < 1 || p.splits > kt || p.splits*p.tps < kt || (p.splits-1)*p.tps >= kt {
			t.Errorf("M=%d N=%d K=%d: %d splits of %d steps for %d steps", c.M, c.N, c.K, p.splits, p.tps, kt)
		}
		if c.splits > 0 && p.splits != min(c.splits, kt) {
			t.Errorf("M=%d N=%d K=%d: %d splits, forced %d", c.M, c.N, c.K, p.splits, c.splits)
		}
	}
}

// BenchmarkGEMMSmall times the Kev-4B GEMM shapes at small M: the batch-invariant plan ("fixed"), the M-dependent
// plan with the streaming kernel ("byM") and without it ("old"), the streaming kernel forced (as planned, and for
// M = 16 and 64 with forced split counts), on the same rotating inputs. One KEVBENCH line per launch
// configuration: median device time of 25 launches, W+X+Y bytes per second.
func BenchmarkGEMMSmall(b *testing.B) {
	Ms := []int{1, 16, 32, 64, 128, 256}
	for _, s := range gemmShapes {
		N, K := s[0], s[1]
		b.Run(fmt.Sprintf("N=%d/K=%d", N, K), func(b *testing.B) {
			const maxM = 256
			xb, wb := int64(2*maxM*K), int64(2*N*K)
			sets := int(max(2, min(16, (rotateBytes+xb+wb-1)/(xb+wb))))
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
				y, err := alloc(4*maxM*int64(N), 99, 1)
				if err != nil {
					return err
				}
				if err := q.ReserveWorkspace(4 * 32 * maxM * int64(N)); err != nil {
					return err
				}
				run := func(label string, g GEMM) error {
					p := dev.plan(&g)
					t, err := medianTime(q, 25, func(i int) error {
						g.Y, g.X, g.W = y, xs[i%sets], ws[i%sets]
						return q.GEMM(g)
					})
					if err != nil {
						return fmt.Errorf("%s M=%d: %w", label, g.M, err)
					}
					bytes := float64(wb) + float64(2*g.M*K) + float64(2*g.M*N)
					fmt.Printf("KEVBENCH gemmsmall %s M=%d N=%d K=%d kern=%v-%dx%d splits=%d tps=%d chunk=%d us=%.2f GB/s=%.0f model_us=%.2f\n",
						label, g.M, N, K, p.kern, p.bm, p.bn, p.splits, p.tps, p.chunk, t*1e6, bytes/t/1e9,
						streamCost(g.M, N, K, dev.sms(), p.splits, p.tps)*1e6)
					return nil
				}
				for _, M := range Ms {
					if err := run("fixed", GEMM{M: M, N: N, K: K}); err != nil {
						return err
					}
					if err := run("byM", GEMM{M: M, N: N, K: K, byM: true}); err != nil {
						return err
					}
					if err := run("old", GEMM{M: M, N: N, K: K, byM: true, noStream: true}); err != nil {
						return err
					}
					if M <= streamMaxM {
						if err := run("stream", GEMM{M: M, N: N, K: K, kern: gemmStream}); err != nil {
							return err
						}
					}
				}
				for _, M := range []int{16, 64} {
					for _, sp := range []int{1, 2, 3, 4, 6, 8, 12, 16} {
						if err := run("sweep", GEMM{M: M, N: N, K: K, kern: gemmStream, splits: sp}); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}
