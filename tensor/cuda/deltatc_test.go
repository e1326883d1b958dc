//go:build cuda

package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gorgonia.org/cu"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// i32Bytes returns v as little-endian bytes for upload.
func i32Bytes(v []int32) []byte {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = math.Float32frombits(uint32(x))
	}
	return bytesOf32(f)
}

// tcErr returns the worst and the RMS absolute error of got against want, both relative to the RMS of want, and
// the number of NaN or infinite values in got.
func tcErr(got, want []float32) (worst, rmsErr float64, bad int) {
	var sw, se float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		if math.IsNaN(d) || math.IsInf(d, 0) {
			bad++
			continue
		}
		sw += float64(want[i]) * float64(want[i])
		se += d * d
		worst = math.Max(worst, math.Abs(d))
	}
	r := math.Sqrt(sw / float64(len(want)))
	return worst / r, math.Sqrt(se/float64(len(want))) / r, bad
}

// TC error bounds, relative to the RMS of the fp32 reference. Every product reads TF32 operands (11 significant
// bits: each rounding is at most 2⁻¹¹ ≈ 4.9e-4 relative) and sums in fp32, so a k-term dot product of independent
// terms carries ≈ √2·2⁻¹¹·(its own size) of rounding noise: ~7e-4 of the RMS per product, and O = γQ̂S + MU, U = T·R,
// R = β(V − γK̂S) chain three of them, ~1.2e-3 (the fp32 forward substitution for T adds nothing visible). The
// state carries its own per-chunk rounding forward, damped by the decays. Bounds: RMS error 3e-3, worst 2.5e-2
// (the largest of ~10⁷ roughly normal errors is ~6σ) — a layout or indexing bug gives errors of order 1.
const (
	tcRMSBound   = 3e-3
	tcWorstBound = 2.5e-2
)

// TestDeltaTC checks deltatc_dk*_cw* against the one-warp fp32 recurrent kernel (delta_rule_rec, run once per
// segment) on fresh random inputs: Kev-4B heads, d_k 64 with GVA 3, segments of 1, 7, 40, 63, 64, 65, 130 and
// 2,400 tokens from a zero and from a cached state, six rows continuing one cached state, 130 segments of mixed
// lengths (some empty) with mixed initial states and some final states not stored, ill-conditioned keys (every
// key of a head 5 % noise around one vector, β ≈ 1), bf16 input and fp32 or bf16 output. It also checks that
// cached states are not written, that unstored finals stay untouched, and logs the worst and RMS error per case.
func TestDeltaTC(t *testing.T) {
	mixed := func(r *rand.Rand, k int) []int {
		v := make([]int, k)
		for i := range v {
			switch i % 5 {
			case 0:
				v[i] = 40
			case 1:
				v[i] = 1 + r.IntN(64)
			case 2:
				v[i] = 64 + r.IntN(100)
			case 3:
				v[i] = 0
			default:
				v[i] = 13
			}
		}
		return v
	}
	r := newRand(t)
	cases := []struct {
		name           string
		hk, hv, dk, dv int
		lens           []int
		state          string // "zero", "cached" or "mixed" (odd segments cached)
		corr           bool
		odt            tensor.DType
	}{
		{"1", 16, 32, 128, 128, []int{1}, "cached", false, tensor.F32},
		{"7", 16, 32, 128, 128, []int{7}, "zero", false, tensor.F32},
		{"40", 16, 32, 128, 128, []int{40}, "cached", false, tensor.F32},
		{"63", 16, 32, 128, 128, []int{63}, "cached", false, tensor.F32},
		{"64", 16, 32, 128, 128, []int{64}, "zero", false, tensor.F32},
		{"65", 16, 32, 128, 128, []int{65}, "cached", false, tensor.F32},
		{"130", 16, 32, 128, 128, []int{130}, "zero", false, tensor.F32},
		{"130/corr", 16, 32, 128, 128, []int{130}, "cached", true, tensor.F32},
		{"2400", 16, 32, 128, 128, []int{2400}, "zero", false, tensor.F32},
		{"2400/cached/bf16", 16, 32, 128, 128, []int{2400}, "cached", false, tensor.BF16},
		{"rows 6x40", 16, 32, 128, 128, []int{40, 40, 40, 40, 40, 40}, "cached", false, tensor.F32},
		{"rows 6x40/corr", 16, 32, 128, 128, []int{40, 40, 40, 40, 40, 40}, "cached", true, tensor.F32},
		{"mixed 130", 16, 32, 128, 128, mixed(r, 130), "mixed", false, tensor.F32},
		{"mixed 130/bf16", 16, 32, 128, 128, mixed(r, 130), "mixed", false, tensor.BF16},
		{"dk64 gva3", 2, 6, 64, 96, []int{1, 7, 40, 63, 64, 65, 130}, "mixed", false, tensor.F32},
		{"dk64 gva3 2400", 2, 6, 64, 64, []int{2400}, "cached", false, tensor.F32},
		{"dk64 gva3 corr", 2, 6, 64, 64, []int{130, 65}, "cached", true, tensor.F32},
		{"dk64 gva3 mixed 100", 2, 6, 64, 128, mixed(r, 100), "mixed", false, tensor.F32},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			segs := len(c.lens)
			starts := make([]int, segs)
			n := 0
			for i, l := range c.lens {
				starts[i] = n
				n += l
			}
			xs, gs, bs, ss := deltaInputs(r, n, c.hk, c.hv, c.dk, c.dv, c.corr)
			on, sn := n*c.hv*c.dv, c.hv*c.dk*c.dv
			cached := func(i int) bool { return c.state == "cached" || (c.state == "mixed" && i%2 == 1) }
			kept := func(i int) bool { return segs == 1 || i%3 != 1 }
			var got, want, gotF, wantF []float32
			var s0After []byte
			do(t, func(q *Queue) error {
				X, G, B := upload(t, q, bytesOf16(xs), 0), upload(t, q, bytesOf32(gs), 0), upload(t, q, bytesOf32(bs), 0)
				S0 := upload(t, q, bytesOf32(ss), 0)
				O, Oref := poisoned(t, q, on*int(elemSize(c.odt))), poisoned(t, q, on*4)
				F, Fref := poisoned(t, q, segs*sn*4), poisoned(t, q, segs*sn*4)
				bufs := []Buffer{X, G, B, S0, O, Oref, F, Fref}
				defer func() { freeAll(q, bufs) }()
				descs := make([]segDesc, segs)
				for i := range segs {
					var a, b cu.DevicePtr
					if cached(i) {
						a = S0.Ptr
					}
					if kept(i) {
						b = F.Ptr + cu.DevicePtr(i*sn*4)
					}
					descs[i].set(starts[i], c.lens[i], 0, tensor.F32, 0, tensor.F32, a, b)
				}
				D := upload(t, q, i32Bytes(flat(descs)), 0)
				bufs = append(bufs, D)
				err := q.deltaTC(Operand{O, c.odt}, Operand{X, tensor.BF16}, Operand{G, tensor.F32}, Operand{B, tensor.F32},
					D, segs, n, c.hk, c.hv, c.dk, c.dv)
				if err != nil {
					return err
				}
				for i := range segs {
					St := upload(t, q, i32Bytes([]int32{int32(starts[i])}), 0)
					Ln := upload(t, q, i32Bytes([]int32{int32(c.lens[i])}), 0)
					bufs = append(bufs, St, Ln)
					var s0 Buffer
					if cached(i) {
						s0 = S0
					}
					fi := Buffer{Fref.Ptr + cu.DevicePtr(i*sn*4), int64(sn * 4)}
					if err := q.DeltaRule(DeltaRule{O: Operand{Oref, tensor.F32}, Final: fi, QKV: Operand{X, tensor.BF16},
						G: Operand{G, tensor.F32}, Beta: Operand{B, tensor.F32}, S0: Operand{s0, tensor.F32}, SegStart: St,
						SegLen: Ln, Segs: 1, N: n, HK: c.hk, HV: c.hv, DK: c.dk, DV: c.dv, simple: true}); err != nil {
						return err
					}
				}
				if c.odt == tensor.BF16 {
					got = widenF32(from16(download(t, q, O, on*2)))
				} else {
					got = from32(download(t, q, O, on*4))
				}
				want = from32(download(t, q, Oref, on*4))
				gotF, wantF = from32(download(t, q, F, segs*sn*4)), from32(download(t, q, Fref, segs*sn*4))
				s0After = download(t, q, S0, sn*4)
				return nil
			})
			t.Logf("width %d columns per block", dev.deltaTCWidth(segs, c.hv, c.dv))
			if !bytes.Equal(s0After, bytesOf32(ss)) {
				t.Errorf("the cached initial state was written")
			}
			check := func(what string, got, want []float32, extra float64) {
				t.Helper()
				worst, rmsE, bad := tcErr(got, want)
				t.Logf("%s: %d values, worst error %.2e, RMS error %.2e (of the reference RMS)", what, len(want), worst, rmsE)
				if bad > 0 || worst > tcWorstBound+extra || rmsE > tcRMSBound+extra/4 {
					t.Errorf("%s: worst %.2e (bound %.1e), RMS %.2e (bound %.1e), %d NaN/Inf", what, worst, tcWorstBound+extra, rmsE, tcRMSBound+extra/4, bad)
				}
			}
			// bf16 output adds its own rounding (2⁻⁹ relative, up to |o|max/RMS ≈ 5 times that of the RMS).
			extra := 0.0
			if c.odt == tensor.BF16 {
				extra = 1e-2
			}
			check("o", got, want, extra)
			var gk, wk []float32
			for i := range segs {
				part := gotF[i*sn : (i+1)*sn]
				if !kept(i) {
					for j, v := range part {
						if !math.IsNaN(float64(v)) {
							t.Fatalf("segment %d: final state not requested but written (element %d = %g)", i, j, v)
						}
					}
					continue
				}
				gk = append(gk, part...)
				wk = append(wk, wantF[i*sn:(i+1)*sn]...)
			}
			check("final", gk, wk, 0)
		})
	}
}

// TestDeltaTCShapes checks that shapes the tensor-core kernels do not take are refused with errDeltaTCShape
// before anything is enqueued, and that bad arguments give an ArgError.
func TestDeltaTCShapes(t *testing.T) {
	do(t, func(q *Queue) error {
		buf, err := q.Alloc(1 << 20)
		if err != nil {
			return err
		}
		defer q.Free(buf)
		f := Operand{buf, tensor.F32}
		for _, c := range []struct{ dk, dv int }{{32, 128}, {256, 128}, {96, 64}, {128, 40}, {64, 48}} {
			err := q.deltaTC(f, f, f, f, buf, 1, 4, 1, 2, c.dk, c.dv)
			if !errors.Is(err, errDeltaTCShape) {
				panic(fmt.Sprintf("d_k %d, d_v %d: got %v, want errDeltaTCShape", c.dk, c.dv, err))
			}
		}
		var ae *ArgError
		if err := q.deltaTC(f, f, f, f, buf, 1, 4, 3, 4, 128, 128); !errors.As(err, &ae) || ae.Arg != "hv" {
			panic(fmt.Sprintf("hv %% hk != 0: got %v", err))
		}
		if err := q.deltaTC(f, f, f, f, buf, 1, 1<<20, 16, 32, 128, 128); !errors.As(err, &ae) {
			panic(fmt.Sprintf("small buffers: got %v", err))
		}
		return nil
	})
}

// BenchmarkDeltaTC times one Kev-4B DeltaNet layer's delta rule (16 key, 32 value heads of 128, bf16 input and
// output) with the tensor-core chunked kernels ("tc") and the register kernels GatedDeltaRuleSegments launches
// today ("reg": delta_rule_segs_one/long_dk128 on the same descriptors): 6 question rows of 40 tokens continuing
// one cached state; 384 rows of 40 (64 requests × 6 rows, each request's rows continuing its own state); 64 new
// segments of 13 tokens with kept states (the first phase of that pass); single segments of 512 and 2,400 tokens
// from a zero state, final state kept. Device time, median of 20 launches; one line
// "KEVBENCH deltatc "<case>/<kernel>" us=…" per case.
func BenchmarkDeltaTC(b *testing.B) {
	const hk, hv, dk, dv = 16, 32, 128, 128
	const width = 2*hk*dk + hv*dv
	const sn = hv * dk * dv
	type seg struct{ len, state, final int } // state, final: index into the state buffers, −1: none
	rows := func(reqs, k, l int) []seg {
		var v []seg
		for r := range reqs {
			for range k {
				v = append(v, seg{l, r, -1})
			}
		}
		return v
	}
	cases := []struct {
		name string
		segs []seg
	}{
		{"rows 6x40", rows(1, 6, 40)},
		{"rows 384x40", rows(64, 6, 40)},
		{"new 64x13", func() []seg {
			v := make([]seg, 64)
			for i := range v {
				v[i] = seg{13, -1, i}
			}
			return v
		}()},
		{"N=512", []seg{{512, -1, 0}}},
		{"N=2400", []seg{{2400, -1, 0}}},
	}
	for _, c := range cases {
		for _, kind := range []string{"tc", "reg"} {
			name := fmt.Sprintf("%s/%s", c.name, kind)
			b.Run(name, func(b *testing.B) {
				n, states, finals, maxLen := 0, 0, 0, 0
				for _, s := range c.segs {
					n += s.len
					states = max(states, s.state+1)
					finals = max(finals, s.final+1)
					maxLen = max(maxLen, s.len)
				}
				var sec float64
				err := dev.Do(func(q *Queue) error {
					bufs, err := benchBuffers(q, 0.05, int64(n)*hv*dv, int64(n)*width, int64(max(states, 1))*sn*2, int64(max(finals, 1))*sn*2)
					if err != nil {
						return err
					}
					defer freeAll(q, bufs)
					descs := make([]segDesc, len(c.segs))
					start := 0
					for i, s := range c.segs {
						var a, f cu.DevicePtr
						if s.state >= 0 {
							a = bufs[2].Ptr + cu.DevicePtr(s.state*sn*4)
						}
						if s.final >= 0 {
							f = bufs[3].Ptr + cu.DevicePtr(s.final*sn*4)
						}
						descs[i].set(start, s.len, 0, tensor.F32, 0, tensor.F32, a, f)
						start += s.len
					}
					d := upload(b, q, i32Bytes(flat(descs)), 0)
					gs, bs := make([]float32, n*hv), make([]float32, n*hv)
					for i := range gs {
						gs[i] = -0.05 - 0.1*float32(i%7)/7
						bs[i] = 0.3 + 0.5*float32(i%5)/5
					}
					gb, bb := upload(b, q, bytesOf32(gs), 0), upload(b, q, bytesOf32(bs), 0)
					defer freeAll(q, []Buffer{d, gb, bb})
					o, x := bf(bufs[0]), bf(bufs[1])
					g, beta := Operand{gb, tensor.F32}, Operand{bb, tensor.F32}
					reg := func() error {
						vec := width%8 == 0 && x.Ptr%16 == 0
						q.args.Reset()
						q.put(o).put(x).put(g).put(beta)
						q.args.Ptr(d.Ptr).I32(hk).I32(hv).I32(dv).I32(b2i(vec))
						kind, sh := q.d.deltaKernel(dk, maxLen, false)
						return q.launch("delta", fmt.Sprintf("delta_rule_segs_%s_dk%d", kind, dk),
							cudrv.Dim3{X: dv / 32, Y: hv, Z: len(c.segs)}, cudrv.Dim3{X: 256, Y: 1, Z: 1}, sh)
					}
					sec, err = medianTime(q, 20, func(int) error {
						if kind == "reg" {
							return reg()
						}
						return q.deltaTC(o, x, g, beta, d, len(c.segs), n, hk, hv, dk, dv)
					})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(sec*1e6, "us")
				fmt.Printf("KEVBENCH deltatc %q us=%.1f\n", name, sec*1e6)
			})
		}
	}
}
