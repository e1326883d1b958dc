//go:build cuda

package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kevgo/kev/internal/cudrv"
	"github.com/kevgo/kev/internal/half"
)

var dev *Device

// TestMain opens GPU 0 once for all tests and benchmarks and prints what it is.
func TestMain(m *testing.M) {
	d, err := Open(0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuda: opening device 0:", err)
		os.Exit(1)
	}
	in := d.Info()
	fmt.Printf("device: %s, compute capability %d.%d, %d SMs, %.1f GiB, L2 %d MiB, shared memory %d KiB/SM (%d KiB per block opt-in), driver CUDA %d.%d\n",
		in.Name, in.Major, in.Minor, in.SMs, float64(in.Memory)/(1<<30), in.L2Bytes>>20, in.SharedPerSM>>10,
		in.SharedOptin>>10, in.DriverVersion/1000, in.DriverVersion%1000/10)
	dev = d
	code := m.Run()
	if err := d.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "cuda: closing device:", err)
		code = 1
	}
	os.Exit(code)
}

// newRand returns a generator seeded from the clock, or from KEV_SEED (to reproduce a run: the seed is logged).
func newRand(t testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KEV_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("KEV_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// randBF16 returns n bf16 values uniform in [-scale, scale), none of them zero.
func randBF16(r *rand.Rand, n int, scale float64) []uint16 {
	v := make([]uint16, n)
	for i := range v {
		for v[i] == 0 || v[i] == 0x8000 {
			v[i] = half.BF16FromF32(float32((2*r.Float64() - 1) * scale))
		}
	}
	return v
}

func bytesOf16(v []uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

func from16(b []byte) []uint16 {
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v
}

func bytesOf32(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func from32(b []byte) []float32 {
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

// The helpers below run inside Device.Do, on the goroutine that owns the context, where t.Fatal must not be
// called (it would end that goroutine): they panic instead, and Do returns the panic as an error.

// upload allocates a buffer holding b (plus pad bytes of 0xff).
func upload(t testing.TB, q *Queue, b []byte, pad int) Buffer {
	t.Helper()
	buf, err := q.Alloc(int64(len(b) + pad))
	if err != nil {
		panic(err)
	}
	if pad > 0 {
		if err := q.Memset16(buf, 0xffff, int64(len(b)+pad)/2); err != nil {
			panic(err)
		}
	}
	if err := q.Upload(buf, b); err != nil {
		panic(err)
	}
	return buf
}

func download(t testing.TB, q *Queue, b Buffer, n int) []byte {
	t.Helper()
	out := make([]byte, n)
	if err := q.Download(out, b); err != nil {
		panic(err)
	}
	return out
}

// poisoned allocates n bytes filled with 0xff (a bf16 and fp32 NaN).
func poisoned(t testing.TB, q *Queue, n int) Buffer {
	t.Helper()
	b, err := q.Alloc(int64(n))
	if err != nil {
		panic(err)
	}
	if err := q.Memset16(b, 0xffff, int64(n)/2); err != nil {
		panic(err)
	}
	return b
}

func do(t testing.TB, f func(q *Queue) error) {
	t.Helper()
	if err := dev.Do(f); err != nil {
		t.Fatal(err)
	}
}

// closeTo reports whether got is within tol·max(|want|, floor) of want (floor: the reference's RMS, so that
// values near zero after cancellation are judged on the scale of the row).
func closeTo(got, want, tol, floor float64) bool {
	return !math.IsNaN(got) && math.Abs(got-want) <= tol*math.Max(math.Abs(want), floor)
}

func widen(v []uint16) []float64 {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = float64(half.BF16ToF32(x))
	}
	return f
}

func rms(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x * x
	}
	return math.Sqrt(s / float64(len(v)))
}

func TestGEMM(t *testing.T) {
	cases := []struct {
		M, N, K        int
		tile, splits   int
		kern           gemmKernel
		f32, res, self bool // fp32 output, residual, residual is Y itself
		ldx, ldy       int
	}{
		{M: 1, N: 256, K: 512},
		{M: 5, N: 136, K: 264, tile: 64, splits: 3},
		{M: 16, N: 2568, K: 2560, res: true},
		{M: 64, N: 520, K: 2560, tile: 64, res: true, self: true},
		{M: 64, N: 200, K: 1024, tile: 64, splits: 1, f32: true},
		{M: 130, N: 264, K: 392, tile: 128, splits: 1, f32: true, res: true},
		{M: 257, N: 1032, K: 1000, tile: 128, splits: 2, ldx: 1008, ldy: 1040, res: true},
		{M: 300, N: 384, K: 2560},
		{M: 1024, N: 1024, K: 256, tile: 128},
		{M: 77, N: 64, K: 8, tile: 128, splits: 1},
		{M: 1, N: 2568, K: 2560, kern: gemmWG256, res: true},
		{M: 24, N: 392, K: 1000, kern: gemmWG128, splits: 3, ldx: 1016, f32: true},
		{M: 64, N: 1032, K: 4096, ldy: 1040, res: true, self: true},
		{M: 65, N: 264, K: 520, kern: gemmWG256, splits: 2, res: true},
		{M: 257, N: 1032, K: 1000, kern: gemmWG256, splits: 1, ldx: 1008, ldy: 1040, res: true},
		{M: 130, N: 264, K: 392, kern: gemmWG256, splits: 1, f32: true, res: true},
		{M: 300, N: 520, K: 2560, kern: gemmWG256, splits: 3},
		{M: 2048, N: 520, K: 136, kern: gemmWG256},
		{M: 100, N: 2568, K: 2504, kern: gemmWG128, splits: 5, res: true},
		{M: 513, N: 392, K: 1000, kern: gemmWG128, splits: 1, ldx: 1016, f32: true},
		{M: 256, N: 520, K: 9216},
		{M: 1, N: 264, K: 392, kern: gemmStream},
		{M: 2, N: 8, K: 128, kern: gemmStream},
		{M: 3, N: 128, K: 256, kern: gemmStream, splits: 7},
		{M: 5, N: 1032, K: 1000, kern: gemmStream, splits: 3, ldx: 1016, res: true},
		{M: 16, N: 2568, K: 2560, kern: gemmStream, res: true, self: true},
		{M: 17, N: 520, K: 2504, kern: gemmStream, splits: 4, ldy: 528, f32: true},
		{M: 33, N: 136, K: 8, kern: gemmStream},
		{M: 63, N: 1024, K: 1024, kern: gemmStream, splits: 8, ldy: 1032, res: true, self: true},
		{M: 64, N: 1032, K: 9216, kern: gemmStream},
		{M: 100, N: 392, K: 1000, kern: gemmStream, splits: 2, f32: true, res: true},
		{M: 128, N: 264, K: 4096, kern: gemmStream, splits: 5, ldx: 4104},
	}
	r := newRand(t)
	for _, c := range cases {
		name := fmt.Sprintf("M=%d/N=%d/K=%d/tile=%d/kern=%v/splits=%d/f32=%v/res=%v/self=%v", c.M, c.N, c.K, c.tile, c.kern, c.splits, c.f32, c.res, c.self)
		t.Run(name, func(t *testing.T) {
			if (c.kern == gemmWG128 || c.kern == gemmWG256) && !dev.hopper() {
				t.Skipf("%v needs compute capability 9.0", c.kern)
			}
			ldx, ldy := max(c.ldx, c.K), max(c.ldy, c.N)
			x := randBF16(r, (c.M-1)*ldx+c.K, 1)
			w := randBF16(r, c.N*c.K, 1/math.Sqrt(float64(c.K)))
			ysz := 2
			if c.f32 {
				ysz = 4
			}
			ny := (c.M-1)*ldy + c.N
			var res []float64
			var resBytes []byte
			if c.res {
				res = make([]float64, ny)
				if c.f32 {
					v := make([]float32, ny)
					for i := range v {
						v[i] = float32(2*r.Float64() - 1)
						res[i] = float64(v[i])
					}
					resBytes = bytesOf32(v)
				} else {
					v := randBF16(r, ny, 1)
					for i := range v {
						res[i] = float64(half.BF16ToF32(v[i]))
					}
					resBytes = bytesOf16(v)
				}
			}
			var out []byte
			do(t, func(q *Queue) error {
				X := upload(t, q, bytesOf16(x), 0)
				W := upload(t, q, bytesOf16(w), 0)
				var Y, R Buffer
				if c.res {
					R = upload(t, q, resBytes, 64)
				}
				if c.self {
					Y = R
				} else {
					Y = poisoned(t, q, ny*ysz+64)
				}
				defer func() {
					q.Free(X)
					q.Free(W)
					q.Free(Y)
					if !c.self {
						q.Free(R)
					}
				}()
				if err := q.GEMM(GEMM{Y: Y, X: X, W: W, R: R, M: c.M, N: c.N, K: c.K, LdX: ldx, LdY: ldy, F32Out: c.f32, tile: c.tile, splits: c.splits, kern: c.kern}); err != nil {
					return err
				}
				out = download(t, q, Y, ny*ysz+64)
				return nil
			})
			p := dev.plan(&GEMM{M: c.M, N: c.N, K: c.K, tile: c.tile, splits: c.splits, kern: c.kern})
			t.Logf("kernel %v %dx%d, splits %d", p.kern, p.bm, p.bn, p.splits)
			var got []float64
			if c.f32 {
				for _, v := range from32(out) {
					got = append(got, float64(v))
				}
			} else {
				for _, v := range from16(out) {
					got = append(got, float64(half.BF16ToF32(v)))
				}
			}
			xf, wf := widen(x), widen(w)
			ref := make([]float64, 0, c.M*c.N)
			for m := 0; m < c.M; m++ {
				for n := 0; n < c.N; n++ {
					s := 0.0
					xr, wr := xf[m*ldx:m*ldx+c.K], wf[n*c.K:(n+1)*c.K]
					for k, v := range xr {
						s += v * wr[k]
					}
					if c.res {
						s += res[m*ldy+n]
					}
					ref = append(ref, s)
				}
			}
			floor := rms(ref)
			bad := 0
			for m := 0; m < c.M; m++ {
				for n := 0; n < ldy && m*ldy+n < ny; n++ {
					g := got[m*ldy+n]
					if n >= c.N { // padding columns between rows: untouched
						want := math.NaN()
						if c.res && c.self {
							want = res[m*ldy+n]
						}
						if !(math.IsNaN(want) && math.IsNaN(g)) && g != want {
							if bad++; bad <= 5 {
								t.Errorf("Y[%d][%d] (padding column) = %g, was %g", m, n, g, want)
							}
						}
						continue
					}
					if want := ref[m*c.N+n]; !closeTo(g, want, 1e-2, floor) {
						if bad++; bad <= 5 {
							t.Errorf("Y[%d][%d] = %g, want %g", m, n, g, want)
						}
					}
				}
			}
			for i := ny; i < len(got); i++ { // past the end: untouched
				if !math.IsNaN(got[i]) {
					t.Errorf("Y[%d] past the end was written: %g", i, got[i])
					break
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d outputs wrong", bad, c.M*c.N)
			}
		})
	}
}

func TestGEMMArgErrors(t *testing.T) {
	do(t, func(q *Queue) error {
		b, err := q.Alloc(1 << 16)
		if err != nil {
			return err
		}
		defer q.Free(b)
		for _, g := range []GEMM{
			{Y: b, X: b, W: b, M: 4, N: 8, K: 7},
			{Y: b, X: b, W: b, M: 4, N: 12, K: 8},
			{Y: b, X: b, W: b, M: 0, N: 8, K: 8},
			{Y: b, X: b, W: Buffer{b.Ptr, 10}, M: 4, N: 8, K: 8},
			{Y: b, X: Buffer{b.Ptr + 2, b.Bytes - 2}, W: b, M: 4, N: 8, K: 8},
			{Y: b, X: b, W: b, M: 4, N: 8, K: 8, LdX: 4},
		} {
			var ae *ArgError
			if err := q.GEMM(g); !errors.As(err, &ae) {
				t.Errorf("GEMM(M=%d N=%d K=%d LdX=%d) error = %v, want *ArgError", g.M, g.N, g.K, g.LdX, err)
			} else {
				t.Logf("%v", err)
			}
		}
		return nil
	})
}

func TestRMSNorm(t *testing.T) {
	r := newRand(t)
	for _, c := range []struct {
		M, n          int
		res, plusOne  bool
		inPlace       bool // sum written over res, y over x
		gainMagnitude float64
	}{
		{M: 37, n: 2560, res: true, plusOne: true, gainMagnitude: 0.3},
		{M: 64, n: 256, plusOne: true, gainMagnitude: 0.5},
		{M: 9, n: 128, gainMagnitude: 2},
		{M: 130, n: 2560, res: true, plusOne: true, inPlace: true, gainMagnitude: 0.3},
		{M: 5, n: 5120, res: true, plusOne: true, gainMagnitude: 0.3}, // wider than the rows kept in registers
		{M: 3, n: 4096, res: true, gainMagnitude: 0.5},
		{M: 4, n: 1032, plusOne: true, gainMagnitude: 0.5},
	} {
		t.Run(fmt.Sprintf("M=%d/n=%d/res=%v/plusOne=%v/inPlace=%v", c.M, c.n, c.res, c.plusOne, c.inPlace), func(t *testing.T) {
			x := randBF16(r, c.M*c.n, 3)
			var res []uint16
			if c.res {
				res = randBF16(r, c.M*c.n, 3)
			}
			gain := make([]float32, c.n)
			for i := range gain {
				gain[i] = float32((2*r.Float64() - 1) * c.gainMagnitude)
			}
			const eps = 1e-6
			var yb, sb []byte
			do(t, func(q *Queue) error {
				X := upload(t, q, bytesOf16(x), 0)
				G := upload(t, q, bytesOf32(gain), 0)
				var R, S Buffer
				Y := X
				if c.res {
					R = upload(t, q, bytesOf16(res), 0)
					if !c.inPlace {
						S = poisoned(t, q, 2*c.M*c.n)
					} else {
						S = R
					}
				}
				if !c.inPlace {
					Y = poisoned(t, q, 2*c.M*c.n)
				}
				defer func() {
					q.Free(X)
					q.Free(G)
					q.Free(R)
					if !c.inPlace {
						q.Free(S)
						q.Free(Y)
					}
				}()
				if err := q.RMSNorm(Y, S, X, R, G, c.M, c.n, eps, c.plusOne); err != nil {
					return err
				}
				yb = download(t, q, Y, 2*c.M*c.n)
				if c.res {
					sb = download(t, q, S, 2*c.M*c.n)
				}
				return nil
			})
			y, sum := from16(yb), from16(sb) // decoded once: per element it made the check quadratic
			bad := 0
			for m := 0; m < c.M; m++ {
				s := make([]float64, c.n)
				for i := range s {
					v := half.BF16ToF32(x[m*c.n+i])
					if c.res {
						rounded := half.BF16FromF32(v + half.BF16ToF32(res[m*c.n+i]))
						if got := sum[m*c.n+i]; got != rounded {
							if bad++; bad <= 5 {
								t.Errorf("sum[%d][%d] = %#04x, want %#04x", m, i, got, rounded)
							}
						}
						v = half.BF16ToF32(rounded)
					}
					s[i] = float64(v)
				}
				rstd := 1 / math.Sqrt(rms(s)*rms(s)+eps)
				ref := make([]float64, c.n)
				for i := range ref {
					g := float64(gain[i])
					if c.plusOne {
						g += 1
					}
					ref[i] = s[i] * rstd * g
				}
				floor := rms(ref)
				for i := range ref {
					if got := float64(half.BF16ToF32(y[m*c.n+i])); !closeTo(got, ref[i], 1e-2, 0.01*floor) {
						if bad++; bad <= 5 {
							t.Errorf("y[%d][%d] = %g, want %g", m, i, got, ref[i])
						}
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d wrong values", bad)
			}
		})
	}
}

func TestEmbedding(t *testing.T) {
	r := newRand(t)
	const V, d, T = 1000, 2560, 33
	table := randBF16(r, V*d, 1)
	ids := make([]int32, T)
	for i := range ids {
		ids[i] = int32(r.IntN(V))
	}
	ids[5], ids[17] = -1, V // out of range: zero rows
	idb := make([]byte, 4*T)
	for i, v := range ids {
		binary.LittleEndian.PutUint32(idb[4*i:], uint32(v))
	}
	var out []uint16
	do(t, func(q *Queue) error {
		tb := upload(t, q, bytesOf16(table), 0)
		ib := upload(t, q, idb, 0)
		y := poisoned(t, q, 2*T*d)
		defer q.Free(tb)
		defer q.Free(ib)
		defer q.Free(y)
		if err := q.Embedding(y, tb, ib, T, V, d); err != nil {
			return err
		}
		out = from16(download(t, q, y, 2*T*d))
		return nil
	})
	for i, id := range ids {
		for j := 0; j < d; j++ {
			want := uint16(0)
			if id >= 0 && id < V {
				want = table[int(id)*d+j]
			}
			if got := out[i*d+j]; got != want {
				t.Fatalf("y[%d][%d] = %#04x, want %#04x (id %d)", i, j, got, want, id)
			}
		}
	}
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func TestSwiGLU(t *testing.T) {
	r := newRand(t)
	const M, F = 17, 1032
	x := randBF16(r, M*2*F, 6)
	var out []uint16
	do(t, func(q *Queue) error {
		xb := upload(t, q, bytesOf16(x), 0)
		y := poisoned(t, q, 2*M*F)
		defer q.Free(xb)
		defer q.Free(y)
		if err := q.SwiGLU(y, xb, M, F); err != nil {
			return err
		}
		out = from16(download(t, q, y, 2*M*F))
		return nil
	})
	for m := 0; m < M; m++ {
		for f := 0; f < F; f++ {
			g := float64(half.BF16ToF32(x[m*2*F+f]))
			u := float64(half.BF16ToF32(x[m*2*F+F+f]))
			want := g * sigmoid(g) * u
			if got := float64(half.BF16ToF32(out[m*F+f])); !closeTo(got, want, 1e-2, 1e-6) {
				t.Fatalf("y[%d][%d] = %g, want %g (g %g, u %g)", m, f, got, want, g, u)
			}
		}
	}
}

func TestSigmoidGate(t *testing.T) {
	r := newRand(t)
	const n = 4096 * 7
	x := randBF16(r, n, 4)
	gate := randBF16(r, n, 8)
	var out []uint16
	do(t, func(q *Queue) error {
		xb := upload(t, q, bytesOf16(x), 0)
		gb := upload(t, q, bytesOf16(gate), 0)
		defer q.Free(xb)
		defer q.Free(gb)
		if err := q.SigmoidGate(xb, xb, gb, n); err != nil { // in place
			return err
		}
		out = from16(download(t, q, xb, 2*n))
		return nil
	})
	for i := range out {
		a, b := float64(half.BF16ToF32(x[i])), float64(half.BF16ToF32(gate[i]))
		if got, want := float64(half.BF16ToF32(out[i])), a*sigmoid(b); !closeTo(got, want, 1e-2, 1e-6) {
			t.Fatalf("y[%d] = %g, want %g", i, got, want)
		}
	}
}

func TestFillUniform(t *testing.T) {
	const n = 1 << 20
	var a, b []uint16
	do(t, func(q *Queue) error {
		buf := poisoned(t, q, 2*n)
		defer q.Free(buf)
		if err := q.FillUniform(buf, n, 7, 0.5); err != nil {
			return err
		}
		a = from16(download(t, q, buf, 2*n))
		if err := q.FillUniform(buf, n, 8, 0.5); err != nil {
			return err
		}
		b = from16(download(t, q, buf, 2*n))
		return nil
	})
	same, sum, sq := 0, 0.0, 0.0
	for i := range a {
		v := float64(half.BF16ToF32(a[i]))
		if math.IsNaN(v) || math.Abs(v) > 0.5 {
			t.Fatalf("value %d = %g outside [-0.5, 0.5]", i, v)
		}
		sum += v
		sq += v * v
		if a[i] == b[i] {
			same++
		}
	}
	mean, variance := sum/n, sq/n-(sum/n)*(sum/n)
	if math.Abs(mean) > 0.005 || math.Abs(variance-0.25/3) > 0.005 || same > n/50 {
		t.Fatalf("mean %g, variance %g (want 0, %g), %d equal values across seeds", mean, variance, 0.25/3, same)
	}
}

// TestGraph captures a split-K GEMM and a SwiGLU into a CUDA graph, replays it, and expects the eager result
// bit for bit.
func TestGraph(t *testing.T) {
	const M, F, K = 16, 1024, 2560
	var eager, replay []byte
	do(t, func(q *Queue) error {
		x := poisoned(t, q, 2*M*K)
		w := poisoned(t, q, 2*2*F*K)
		h := poisoned(t, q, 2*M*2*F)
		y := poisoned(t, q, 2*M*F)
		defer func() {
			for _, b := range []Buffer{x, w, h, y} {
				q.Free(b)
			}
		}()
		if err := q.FillUniform(x, M*K, 1, 1); err != nil {
			return err
		}
		if err := q.FillUniform(w, 2*F*K, 2, 0.02); err != nil {
			return err
		}
		g := GEMM{Y: h, X: x, W: w, M: M, N: 2 * F, K: K, tile: 64, splits: 4}
		if err := q.ReserveWorkspace(4 * 4 * M * 2 * F); err != nil {
			return err
		}
		run := func() error {
			if err := q.GEMM(g); err != nil {
				return err
			}
			return q.SwiGLU(y, h, M, F)
		}
		if err := run(); err != nil {
			return err
		}
		eager = download(t, q, y, 2*M*F)
		if err := q.Memset16(y, 0xffff, M*F); err != nil {
			return err
		}
		if err := cudrv.BeginCapture(q.Stream(), cudrv.CaptureThreadLocal); err != nil {
			return err
		}
		runErr := run()
		graph, err := cudrv.EndCapture(q.Stream())
		if runErr != nil {
			return runErr
		}
		if err != nil {
			return err
		}
		exec, err := graph.Instantiate()
		if err != nil {
			return err
		}
		defer exec.Destroy()
		if err := graph.Destroy(); err != nil {
			return err
		}
		for i := 0; i < 2; i++ {
			if err := exec.Launch(q.Stream()); err != nil {
				return err
			}
		}
		replay = download(t, q, y, 2*M*F)
		return nil
	})
	if string(eager) != string(replay) {
		t.Fatal("graph replay differs from the eager run")
	}
	if v := half.BF16ToF32(from16(eager)[3]); v == 0 || math.IsNaN(float64(v)) {
		t.Fatalf("eager output %g: inputs were not filled", v)
	}
}

func TestPinned(t *testing.T) {
	const n = 3 << 20
	do(t, func(q *Queue) error {
		h, err := cudrv.HostAlloc(n)
		if err != nil {
			return err
		}
		defer cudrv.HostFree(h)
		for i := range h {
			h[i] = byte(i*7 + i>>8)
		}
		b, err := q.Alloc(n)
		if err != nil {
			return err
		}
		defer q.Free(b)
		if err := q.Upload(b, h); err != nil {
			return err
		}
		back := make([]byte, n)
		if err := q.Download(back, b); err != nil {
			return err
		}
		for i := range back {
			if back[i] != byte(i*7+i>>8) {
				return fmt.Errorf("byte %d = %d after a round trip through pinned memory", i, back[i])
			}
		}
		return nil
	})
}
