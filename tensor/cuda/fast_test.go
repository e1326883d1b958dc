//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"testing"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/tensor"
)

// segInts returns the per-row segment starts, the segment starts and the segment lengths of lens as int32 bytes.
func segInts(lens []int) (rows, starts, ls []byte, n int) {
	var rs, ss, ll []int32
	for _, l := range lens {
		ss = append(ss, int32(n))
		ll = append(ll, int32(l))
		for range l {
			rs = append(rs, int32(n))
		}
		n += l
	}
	i32 := func(v []int32) []byte {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = math.Float32frombits(uint32(x))
		}
		return bytesOf32(f)
	}
	return i32(rs), i32(ss), i32(ll), n
}

// compareF32 checks got against want within tol relative to max(|want|, rms(want)).
func compareF32(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	w := make([]float64, len(want))
	for i, x := range want {
		w[i] = float64(x)
	}
	floor := rms(w)
	bad, worst := 0, 0.0
	for i := range want {
		d := math.Abs(float64(got[i])-w[i]) / math.Max(math.Abs(w[i]), floor)
		if math.IsNaN(float64(got[i])) {
			d = math.Inf(1)
		}
		worst = math.Max(worst, d)
		if d > tol {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g", what, i, got[i], want[i])
			}
			bad++
		}
	}
	t.Logf("%s: %d values, worst relative error %.2e (rms %.3g), %d over %.0e", what, len(want), worst, floor, bad, tol)
}

// TestDeltaRuleFast checks the register-state delta rule kernels against the one-warp kernel: Kev-4B heads, several
// segments continuing one state, value widths that are not multiples of 32, fp32 input (the scalar load path).
func TestDeltaRuleFast(t *testing.T) {
	cases := []struct {
		hk, hv, dk, dv int
		lens           []int
		state, f32     bool
	}{
		{16, 32, 128, 128, []int{130}, true, false},
		{16, 32, 128, 128, []int{23, 41, 60, 1}, true, false},
		{2, 4, 64, 96, []int{70}, false, true},
		{1, 2, 32, 32, []int{1, 5, 64, 65}, true, false},
		{2, 6, 64, 40, []int{200}, true, false},
	}
	r := newRand(t)
	for _, c := range cases {
		t.Run(fmt.Sprintf("hk=%d/hv=%d/dk=%d/dv=%d/lens=%v/state=%v/f32=%v", c.hk, c.hv, c.dk, c.dv, c.lens, c.state, c.f32), func(t *testing.T) {
			_, starts, ls, n := segInts(c.lens)
			width := 2*c.hk*c.dk + c.hv*c.dv
			xs := randBF16(r, n*width, 1)
			xb, xdt := bytesOf16(xs), tensor.BF16
			if c.f32 {
				xb, xdt = bytesOf32(widenF32(xs)), tensor.F32
			}
			gs := make([]float32, n*c.hv)
			bs := make([]float32, n*c.hv)
			for i := range gs {
				u := r.Float64()
				gs[i] = float32(-u * u)
				bs[i] = float32(r.Float64())
			}
			gs[len(gs)/2] = -9
			ss := make([]float32, c.hv*c.dk*c.dv)
			for i := range ss {
				ss[i] = float32(r.Float64() - 0.5)
			}
			single := len(c.lens) == 1
			on, sn := n*c.hv*c.dv*4, c.hv*c.dk*c.dv*4
			var outs [2][]float32
			var finals [2][]float32
			do(t, func(q *Queue) error {
				X, G, B := upload(t, q, xb, 0), upload(t, q, bytesOf32(gs), 0), upload(t, q, bytesOf32(bs), 0)
				St, Ls := upload(t, q, starts, 0), upload(t, q, ls, 0)
				var S0 Buffer
				if c.state {
					S0 = upload(t, q, bytesOf32(ss), 0)
				}
				defer func() { freeAll(q, []Buffer{X, G, B, St, Ls, S0}) }()
				for k, simple := range []bool{true, false} {
					O := poisoned(t, q, on)
					var F Buffer
					if single {
						F = poisoned(t, q, sn)
					}
					a := DeltaRule{O: Operand{O, tensor.F32}, Final: F, QKV: Operand{X, xdt}, G: Operand{G, tensor.F32},
						Beta: Operand{B, tensor.F32}, S0: Operand{S0, tensor.F32}, SegStart: St, SegLen: Ls, Segs: len(c.lens),
						N: n, HK: c.hk, HV: c.hv, DK: c.dk, DV: c.dv, simple: simple}
					if err := q.DeltaRule(a); err != nil {
						return err
					}
					outs[k] = from32(download(t, q, O, on))
					if single {
						finals[k] = from32(download(t, q, F, sn))
					}
					q.Free(O)
					q.Free(F)
				}
				return nil
			})
			compareF32(t, "o", outs[1], outs[0], 1e-4)
			if single {
				compareF32(t, "final", finals[1], finals[0], 1e-4)
			}
		})
	}
}

func widenF32(v []uint16) []float32 {
	f := widen(v)
	out := make([]float32, len(f))
	for i, x := range f {
		out[i] = float32(x)
	}
	return out
}

// TestFlashAttention checks the tiled tensor-core attention against the one-warp fp32 kernel: causal prefill,
// rows over a long prefix (split keys), several segments over a prefix, and the three head dimensions.
func TestFlashAttention(t *testing.T) {
	cases := []struct {
		h, kv, d, p int
		lens        []int
		splits      int
	}{
		{16, 4, 256, 0, []int{130}, 0},
		{16, 4, 256, 2048, []int{8}, 0},
		{16, 4, 256, 300, []int{40, 50, 60}, 3},
		{16, 4, 256, 100, []int{37, 1, 44, 40, 29, 41}, 0},
		{4, 2, 64, 0, []int{70}, 0},
		{2, 1, 128, 5, []int{20, 17}, 2},
		{8, 8, 64, 33, []int{3}, 4},
	}
	r := newRand(t)
	for _, c := range cases {
		t.Run(fmt.Sprintf("H=%d/KV=%d/D=%d/P=%d/lens=%v/splits=%d", c.h, c.kv, c.d, c.p, c.lens, c.splits), func(t *testing.T) {
			rows, _, _, n := segInts(c.lens)
			qs := randBF16(r, n*c.h*c.d, 1)
			ks := randBF16(r, n*c.kv*c.d, 1)
			vs := randBF16(r, n*c.kv*c.d, 1)
			var kps, vps []uint16
			if c.p > 0 {
				kps = randBF16(r, c.p*c.kv*c.d, 1)
				vps = randBF16(r, c.p*c.kv*c.d, 1)
			}
			on := n * c.h * c.d * 4
			var outs [2][]float32
			do(t, func(q *Queue) error {
				Q, K, V := upload(t, q, bytesOf16(qs), 0), upload(t, q, bytesOf16(ks), 0), upload(t, q, bytesOf16(vs), 0)
				Seg := upload(t, q, rows, 0)
				var KP, VP Buffer
				if c.p > 0 {
					KP, VP = upload(t, q, bytesOf16(kps), 0), upload(t, q, bytesOf16(vps), 0)
				}
				defer func() { freeAll(q, []Buffer{Q, K, V, Seg, KP, VP}) }()
				for k, simple := range []bool{true, false} {
					O := poisoned(t, q, on)
					a := Attention{O: Operand{O, tensor.F32}, Q: bf(Q), K: bf(K), V: bf(V), KP: bf(KP), VP: bf(VP), SegStart: Seg,
						N: n, P: c.p, H: c.h, KV: c.kv, D: c.d, Scale: float32(3 / math.Sqrt(float64(c.d))), simple: simple, splits: c.splits}
					if err := q.Attention(a); err != nil {
						return err
					}
					outs[k] = from32(download(t, q, O, on))
					q.Free(O)
				}
				return nil
			})
			compareF32(t, "o", outs[1], outs[0], 2e-2)
		})
	}
}

// BenchmarkServingKernels times the delta rule and attention at the shapes of Kev-4B serving passes: a state pass
// (one segment, no prefix) and a row pass (question rows of 40 tokens continuing a cached state).
func BenchmarkServingKernels(b *testing.B) {
	const H, KV, D = 16, 4, 256
	const hk, hv, dk, dv = 16, 32, 128, 128
	const width = 2*hk*dk + hv*dv
	rowsOf := func(k, l int) []int {
		v := make([]int, k)
		for i := range v {
			v[i] = l
		}
		return v
	}
	type bcase struct {
		name  string
		lens  []int
		p     int
		delta bool
	}
	cases := []bcase{
		{"delta rule N=512", []int{512}, 0, true},
		{"delta rule N=2200", []int{2200}, 0, true},
		{"delta rule rows 6x40", rowsOf(6, 40), 0, true},
		{"attention N=512 P=0", []int{512}, 0, false},
		{"attention N=8 P=2048", []int{8}, 2048, false},
		{"attention N=2200 P=0", []int{2200}, 0, false},
		{"attention rows 5x40 P=2200", rowsOf(5, 40), 2200, false},
		{"attention rows 6x40 P=100", rowsOf(6, 40), 100, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			rows, starts, ls, n := segInts(c.lens)
			var sec float64
			err := dev.Do(func(q *Queue) error {
				var sizes []int64
				if c.delta {
					sizes = []int64{int64(n) * hv * dv, int64(n) * width, 2 * hv * dk * dv, 2 * hv * dk * dv}
				} else {
					p := int64(max(c.p, 1))
					sizes = []int64{int64(n) * H * D, int64(n) * H * D, int64(n) * KV * D, int64(n) * KV * D, p * KV * D, p * KV * D}
				}
				bufs, err := benchBuffers(q, 0.05, sizes...)
				if err != nil {
					return err
				}
				defer freeAll(q, bufs)
				seg := upload(b, q, rows, 0)
				st := upload(b, q, starts, 0)
				ln := upload(b, q, ls, 0)
				defer freeAll(q, []Buffer{seg, st, ln})
				gs := make([]float32, n*hv)
				for i := range gs {
					gs[i] = -0.05
				}
				gb := upload(b, q, bytesOf32(gs), 0)
				defer q.Free(gb)
				var run func(int) error
				if c.delta {
					var final Buffer
					if len(c.lens) == 1 {
						final = bufs[3]
					}
					run = func(int) error {
						return q.DeltaRule(DeltaRule{O: bf(bufs[0]), Final: final, QKV: bf(bufs[1]), G: Operand{gb, tensor.F32},
							Beta: Operand{gb, tensor.F32}, S0: Operand{bufs[2], tensor.F32}, SegStart: st, SegLen: ln,
							Segs: len(c.lens), N: n, HK: hk, HV: hv, DK: dk, DV: dv})
					}
				} else {
					a := Attention{O: bf(bufs[0]), Q: bf(bufs[1]), K: bf(bufs[2]), V: bf(bufs[3]), SegStart: seg, N: n, P: c.p,
						H: H, KV: KV, D: D, Scale: 1.0 / 16}
					if c.p > 0 {
						a.KP, a.VP = bf(bufs[4]), bf(bufs[5])
					}
					run = func(int) error { return q.Attention(a) }
				}
				sec, err = medianTime(q, 20, run)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(sec*1e6, "us")
			fmt.Printf("KEVBENCH kernel %q us=%.1f\n", c.name, sec*1e6)
		})
	}
}

// TestAttnCombineRows checks attn_combine_rows (a warp per row and head, the splits' loads at once) against
// attn_combine (a block per row and head, one split after another) on the same partial outputs: the same bits, for
// every head dimension and split count, with splits that saw no key (l = 0, m = −inf) among them.
func TestAttnCombineRows(t *testing.T) {
	r := newRand(t)
	const N, H = 37, 6
	for _, D := range []int{64, 128, 256} {
		for _, splits := range []int{2, 3, 7, 16} {
			part := make([]float32, splits*N*H*D)
			for i := range part {
				part[i] = float32(r.NormFloat64())
			}
			ml := make([]float32, 2*splits*N*H)
			for i := 0; i < len(ml); i += 2 {
				ml[i], ml[i+1] = float32(4*r.NormFloat64()), float32(1+30*r.Float64())
				if r.IntN(9) == 0 { // a split whose keys were all masked
					ml[i], ml[i+1] = float32(math.Inf(-1)), 0
				}
			}
			rows := make([]int32, 0, 2*N)
			for i := range N {
				rows = append(rows, int32(i), int32(splits))
			}
			var got, want []uint16
			do(t, func(q *Queue) error {
				pb, mb := upload(t, q, bytesOf32(part), 0), upload(t, q, bytesOf32(ml), 0)
				rb := upload(t, q, bytesOf32(int32sAsFloat(rows)), 0)
				oa, ob := poisoned(t, q, 2*N*H*D), poisoned(t, q, 2*N*H*D)
				defer func() {
					for _, b := range []Buffer{pb, mb, rb, oa, ob} {
						_ = q.Free(b)
					}
				}()
				q.args.Reset()
				q.args.Ptr(oa.Ptr).I32(int32(tensor.BF16)).Ptr(pb.Ptr).Ptr(mb.Ptr).I32(N).I32(H).I32(int32(D)).I32(int32(splits))
				if err := q.launch("flash", "attn_combine", cudrv.Dim3{X: N, Y: H, Z: 1}, cudrv.Dim3{X: 64, Y: 1, Z: 1}, 0); err != nil {
					return err
				}
				q.args.Reset()
				q.args.Ptr(ob.Ptr).I32(int32(tensor.BF16)).Ptr(pb.Ptr).Ptr(mb.Ptr).Ptr(rb.Ptr).I32(N).I32(N).I32(H).I32(int32(D))
				if err := q.launch("flash", "attn_combine_rows", cudrv.Dim3{X: (N*H + 7) / 8, Y: 1, Z: 1}, cudrv.Dim3{X: 256, Y: 1, Z: 1}, 0); err != nil {
					return err
				}
				want, got = from16(download(t, q, oa, 2*N*H*D)), from16(download(t, q, ob, 2*N*H*D))
				return nil
			})
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("D %d, %d splits: row %d head %d column %d: %#04x, attn_combine %#04x", D, splits, i/(H*D), i/D%H, i%D, got[i], want[i])
				}
			}
		}
	}
}

// int32sAsFloat reinterprets v's bits as float32 (for bytesOf32).
func int32sAsFloat(v []int32) []float32 {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = math.Float32frombits(uint32(x))
	}
	return f
}
