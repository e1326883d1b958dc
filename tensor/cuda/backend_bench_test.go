//go:build cuda

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// benchBuffers allocates bf16 buffers of the given element counts filled with uniform values in [−scale, scale).
// It runs inside Device.Do, so it returns errors rather than failing the benchmark.
func benchBuffers(q *Queue, scale float32, ns ...int64) ([]Buffer, error) {
	out := make([]Buffer, 0, len(ns))
	for i, n := range ns {
		buf, err := q.Alloc(2 * n)
		if err != nil {
			freeAll(q, out)
			return nil, err
		}
		out = append(out, buf)
		if err := q.FillUniform(buf, n, uint32(i+1)*2654435761, scale); err != nil {
			freeAll(q, out)
			return nil, err
		}
	}
	return out, nil
}

func freeAll(q *Queue, bs []Buffer) {
	for _, x := range bs {
		q.Free(x)
	}
}

func bf(b Buffer) Operand { return Operand{b, tensor.BF16} }

// BenchmarkKernels times the backend's general kernels on Kev-4B shapes (device time, median of 20).
func BenchmarkKernels(b *testing.B) {
	const H, KV, D, N = 16, 4, 256, 512
	const hk, hv, dk, dv = 16, 32, 128, 128
	conv := 2*hk*dk + hv*dv
	cases := []struct {
		name  string
		bytes float64 // bytes read and written, for GB/s
		run   func(q *Queue, bufs []Buffer, seg, lens Buffer) error
		sizes []int64
	}{
		{"attention N=512 P=0", 2 * N * (2*H*D + 2*KV*D), func(q *Queue, x []Buffer, seg, lens Buffer) error {
			return q.Attention(Attention{O: bf(x[0]), Q: bf(x[1]), K: bf(x[2]), V: bf(x[3]), SegStart: seg, N: N, H: H, KV: KV, D: D, Scale: 1.0 / 16})
		}, []int64{N * H * D, N * H * D, N * KV * D, N * KV * D}},
		{"attention N=8 P=2048", 2 * 2048 * 2 * KV * D, func(q *Queue, x []Buffer, seg, lens Buffer) error {
			return q.Attention(Attention{O: bf(x[0]), Q: bf(x[1]), K: bf(x[2]), V: bf(x[3]), KP: bf(x[4]), VP: bf(x[5]), SegStart: seg,
				N: 8, P: 2048, H: H, KV: KV, D: D, Scale: 1.0 / 16})
		}, []int64{8 * H * D, 8 * H * D, 8 * KV * D, 8 * KV * D, 2048 * KV * D, 2048 * KV * D}},
		{"delta rule N=512", 2*N*float64(conv+hv*dv) + 4*2*hv*dk*dv, func(q *Queue, x []Buffer, seg, lens Buffer) error {
			return q.DeltaRule(DeltaRule{O: bf(x[0]), Final: x[1], QKV: bf(x[2]), G: bf(x[3]), Beta: bf(x[4]), S0: Operand{x[5], tensor.BF16},
				SegStart: seg, SegLen: lens, Segs: 1, N: N, HK: hk, HV: hv, DK: dk, DV: dv})
		}, []int64{N * hv * dv, 2 * hv * dk * dv, N * int64(conv), N * hv, N * hv, hv * dk * dv}},
		{"conv1d+silu N=512", 2 * 2 * N * float64(conv), func(q *Queue, x []Buffer, seg, lens Buffer) error {
			return q.Conv1dSiLU(bf(x[0]), bf(x[1]), bf(x[2]), bf(x[3]), seg, N, conv, 4)
		}, []int64{N * int64(conv), N * int64(conv), int64(conv) * 4, 3 * int64(conv)}},
		{"qk norm rope N=512", 2 * N * float64(3*H*D+2*KV*D), func(q *Queue, x []Buffer, seg, lens Buffer) error {
			return q.QKNormRope(QKNormRope{QOut: bf(x[0]), KOut: bf(x[1]), Gate: bf(x[2]), Q: bf(x[3]), K: bf(x[4]), QGain: bf(x[5]),
				KGain: bf(x[6]), Positions: seg, T: N, H: H, KV: KV, D: D, R: 64, Theta: 1e7, Eps: 1e-6, Gated: true})
		}, []int64{N * H * D, N * KV * D, N * H * D, 2 * N * H * D, N * KV * D, D, D}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				var sec float64
				err := dev.Do(func(q *Queue) error {
					bufs, err := benchBuffers(q, 0.05, c.sizes...)
					if err != nil {
						return err
					}
					defer freeAll(q, bufs)
					// One segment from row 0: segment starts and positions all zero (position 0 times like any
					// other), the delta rule's one segment length N.
					seg, err := q.Alloc(4 * N)
					if err != nil {
						return err
					}
					defer q.Free(seg)
					if err := q.Memset16(seg, 0, 2*N); err != nil {
						return err
					}
					lens, err := q.Alloc(16)
					if err != nil {
						return err
					}
					defer q.Free(lens)
					if err := q.Upload(lens, []byte{N & 0xff, N >> 8, 0, 0}); err != nil {
						return err
					}
					sec, err = medianTime(q, 20, func(int) error { return c.run(q, bufs, seg, lens) })
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(sec*1e6, "us")
				b.ReportMetric(c.bytes/sec/1e9, "GB/s")
				fmt.Printf("KEVBENCH kernel %q us=%.1f GB/s=%.0f\n", c.name, sec*1e6, c.bytes/sec/1e9)
			}
		})
	}
}

// BenchmarkModelPrefill times layers' Prefill on the CUDA backend (wall time, including the host round trips)
// for a model of Kev-4B width with two layers (one DeltaNet, one attention) and random bf16 weights.
func BenchmarkModelPrefill(b *testing.B) {
	c := qwen35.Config{HiddenSize: 2560, NumLayers: 2, IntermediateSize: 9216, VocabSize: 1024, RMSNormEps: 1e-6,
		LayerTypes: []qwen35.LayerType{qwen35.LinearAttention, qwen35.FullAttention},
		NumHeads:   16, NumKVHeads: 4, HeadDim: 256, RopeTheta: 1e7, PartialRotaryFactor: 0.25, AttnOutputGate: true,
		LinearNumKeyHeads: 16, LinearNumValueHeads: 32, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearConvKernel: 4}
	r := rand.New(rand.NewPCG(1, 2))
	w := modelWeights(r, c)
	be := NewOn(dev)
	defer be.Trim()
	m, err := layers.New(be, w)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{64, 512} {
		b.Run(fmt.Sprintf("T=%d", n), func(b *testing.B) {
			ids := randomIDs(r, n, c.VocabSize)
			run := func() time.Duration {
				t0 := time.Now()
				s, h, err := m.Prefill(ids)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := be.ToHost(h); err != nil { // waits for the device
					b.Fatal(err)
				}
				d := time.Since(t0)
				s.Free()
				be.Free(h)
				return d
			}
			for range 2 {
				run()
			}
			for range b.N {
				ts := make([]time.Duration, 9)
				for i := range ts {
					ts[i] = run()
				}
				slicesSort(ts)
				med := ts[len(ts)/2]
				b.ReportMetric(float64(med.Microseconds())/1e3, "ms/prefill")
				fmt.Printf("KEVBENCH prefill layers=2 d=2560 T=%d ms=%.2f\n", n, float64(med.Microseconds())/1e3)
			}
		})
	}
}

func slicesSort(ts []time.Duration) {
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j] < ts[j-1]; j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}
