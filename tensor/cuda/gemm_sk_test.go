//go:build cuda

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/kevgo/kev/internal/half"
)

// skLayout is one GEMM call's memory layout for the stream-K tests.
type skLayout struct {
	ldx, ldy       int
	f32, res, self bool // fp32 output, residual, residual is Y itself
}

// runGEMMBytes runs g (its M, N, K and kernel fields set) on x, w and the residual bytes res in layout l and returns
// Y's bytes (row stride l.ldy, bf16 or fp32), with 64 bytes past the end that must stay 0xff.
func runGEMMBytes(t *testing.T, x, w []uint16, res []byte, l skLayout, g GEMM) []byte {
	t.Helper()
	ysz := 2
	if l.f32 {
		ysz = 4
	}
	ny := ((g.M-1)*l.ldy + g.N) * ysz
	var out []byte
	do(t, func(q *Queue) error {
		X := upload(t, q, bytesOf16(x), 0)
		W := upload(t, q, bytesOf16(w), 0)
		var Y, R Buffer
		if l.res {
			R = upload(t, q, res[:ny], 64)
		}
		if l.self {
			Y = R
		} else {
			Y = poisoned(t, q, ny+64)
		}
		defer func() {
			q.Free(X)
			q.Free(W)
			q.Free(Y)
			if l.res && !l.self {
				q.Free(R)
			}
		}()
		g.Y, g.X, g.W, g.R, g.LdX, g.LdY, g.F32Out = Y, X, W, R, l.ldx, l.ldy, l.f32
		if err := q.GEMM(g); err != nil {
			return err
		}
		out = download(t, q, Y, ny+64)
		return nil
	})
	return out
}

// skReference is Y = X·Wᵀ (+ R) in float64 for layout l, indexed [m·N + n].
func skReference(x, w []uint16, res []byte, l skLayout, M, N, K int) []float64 {
	xf, wf := widen(x), widen(w)
	ref := make([]float64, M*N)
	for m := range M {
		for n := range N {
			s := 0.0
			xr, wr := xf[m*l.ldx:m*l.ldx+K], wf[n*K:(n+1)*K]
			for k, v := range xr {
				s += v * wr[k]
			}
			if l.res {
				i := m*l.ldy + n
				if l.f32 {
					s += float64(math.Float32frombits(binary.LittleEndian.Uint32(res[4*i:])))
				} else {
					s += float64(half.BF16ToF32(binary.LittleEndian.Uint16(res[2*i:])))
				}
			}
			ref[m*N+n] = s
		}
	}
	return ref
}

// checkAgainst compares got (Y's bytes in layout l) with the float64 reference within the GEMM tests' tolerance
// (1e-2 of the larger of |want| and the reference's RMS) and checks that nothing past Y's end was written.
func checkAgainst(t *testing.T, got []byte, ref []float64, l skLayout, M, N int) {
	t.Helper()
	floor := rms(ref)
	ysz := 2
	if l.f32 {
		ysz = 4
	}
	bad := 0
	for m := range M {
		for n := range N {
			i := m*l.ldy + n
			var g float64
			if l.f32 {
				g = float64(math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])))
			} else {
				g = float64(half.BF16ToF32(binary.LittleEndian.Uint16(got[2*i:])))
			}
			if want := ref[m*N+n]; !closeTo(g, want, 1e-2, floor) {
				if bad++; bad <= 5 {
					t.Errorf("Y[%d][%d] = %g, want %g", m, n, g, want)
				}
			}
		}
	}
	end := ((M-1)*l.ldy + N) * ysz
	for i := end; i < len(got); i++ {
		if got[i] != 0xff {
			t.Errorf("byte %d past Y's end was written", i-end)
			break
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d outputs wrong", bad, M*N)
	}
}

// firstDiff returns the index of the first differing byte of a and b, or -1.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestGEMMStreamKBits checks the persistent stream-K kernel bit for bit against split-K with one split per chunk
// (kernel wg128, tps = chunk, in-kernel in-order finish), and both against a float64 reference, over shapes whose
// K is not a multiple of 64·chunk and whose N is not a multiple of the tile (chunk sizes split-K can express:
// ⌈k tiles / chunks⌉), M from 1 to 300, with the chunks dealt
// out in many ways: the planned stream-K tile count, none (whole tiles only), every tile, and grids of 1, 3, 7,
// the multiprocessor count and more blocks than units. The chunked tile kernels (wcTiles) run the same chunks
// whole, with one block per multiprocessor, three blocks and the tiles m-fastest: the same bits.
func TestGEMMStreamKBits(t *testing.T) {
	if !dev.hopper() {
		t.Skip("the stream-K kernel needs compute capability 9.0")
	}
	r := newRand(t)
	cases := []struct{ N, K, chunk int }{
		{2560, 4096, 0}, // Kev-4B out_proj, the planned chunk
		{264, 1000, 6},  // 16 k tiles (the last one 40 deep): chunks of 6, 6, 4; N = 2 tiles + 8 columns
		{136, 520, 5},   // 9 k tiles: 5, 4
		{1032, 2504, 7}, // 40 k tiles (the last 8 deep): 6 chunks, the last of 5 tiles
		{8, 128, 1},     // one 8-column tile, two chunks of one tile
		{392, 1000, 16}, // one chunk: unchunked through the stream-K kernel
	}
	Ms := []int{1, 7, 64, 65, 129, 300}
	for _, c := range cases {
		N, K := c.N, c.K
		kTiles := (K + 63) / 64
		chunk := c.chunk
		if chunk == 0 {
			chunk = fixedChunk(N, K, dev.sms())
		}
		nch := (kTiles + chunk - 1) / chunk
		t.Run(fmt.Sprintf("N=%d/K=%d/chunk=%d", N, K, chunk), func(t *testing.T) {
			maxM := Ms[len(Ms)-1]
			x := randBF16(r, maxM*K, 1)
			w := randBF16(r, N*K, 1/math.Sqrt(float64(K)))
			res := bytesOf16(randBF16(r, maxM*N, 1))
			for _, M := range Ms {
				l := skLayout{ldx: K, ldy: N, res: true}
				xs := x[:M*K]
				var want []byte
				if nch > 1 {
					split := GEMM{M: M, N: N, K: K, kern: gemmWG128, splits: nch}
					if p := dev.plan(&split); p.tps != chunk || p.splits != nch {
						t.Fatalf("split-K plan for %d splits has %d splits of %d tiles, want chunks of %d", nch, p.splits, p.tps, chunk)
					}
					want = runGEMMBytes(t, xs, w, res, l, split)
				} else {
					want = runGEMMBytes(t, xs, w, res, l, GEMM{M: M, N: N, K: K, kern: gemmWG128, splits: 1})
				}
				checkAgainst(t, want, skReference(xs, w, res, l, M, N, K), l, M, N)
				T := ((M + 127) / 128) * ((N + 127) / 128)
				for _, g := range []GEMM{
					{},                  // planned stream-K tiles, one block per multiprocessor
					{sk: -1},            // whole tiles only
					{sk: T},             // every tile by chunks
					{sk: T, grid: 1},    // one block does everything
					{sk: T, grid: 3},    // few blocks: long ranges across tile boundaries
					{sk: T, grid: 7},    //
					{sk: T, grid: 1000}, // more blocks than units: empty ranges
					{sk: 1, grid: 5},    // one stream-K tile, the others whole
					{sk: T, gn: 1},      // tiles m-fastest
					{sk: 1, gn: 2},      // groups of two n-tiles
				} {
					g.M, g.N, g.K, g.kern, g.chunk = M, N, K, gemmSK, chunk
					p := dev.plan(&g)
					got := runGEMMBytes(t, xs, w, res, l, g)
					if i := firstDiff(got, want); i >= 0 {
						e := i / 2
						t.Errorf("M=%d stream-K (%d of %d tiles, grid %d): output %d (row %d column %d) differs from split-K per chunk",
							M, p.skTiles, T, p.grid, e, e/N, e%N)
					}
				}
				// the chunked tile kernels: one block per multiprocessor, few blocks (several tiles each), m-fastest
				for _, xc := range wcTiles {
					for _, g := range []GEMM{{}, {grid: 3}, {gn: 1}} {
						g.M, g.N, g.K, g.xc, g.chunk = M, N, K, xc, chunk
						got := runGEMMBytes(t, xs, w, res, l, g)
						if i := firstDiff(got, want); i >= 0 {
							e := i / 2
							t.Errorf("M=%d chunked %dx%d tiles (grid %d, gn %d): output %d (row %d column %d) differs from split-K per chunk",
								M, xc.bm, xc.bn, g.grid, g.gn, e, e/N, e%N)
						}
					}
				}
			}
		})
	}
	checkCountersZero(t)
}

// TestGEMMStreamKLayouts checks the stream-K kernel and chunked tile kernels with strided X and Y, fp32 output and
// an in-place residual, bit for bit against split-K per chunk in the same layout and against the float64 reference.
func TestGEMMStreamKLayouts(t *testing.T) {
	if !dev.hopper() {
		t.Skip("the stream-K kernel needs compute capability 9.0")
	}
	r := newRand(t)
	const M, N, K, chunk = 100, 264, 1000, 4 // 16 k tiles: 4 chunks, as split-K with 4 splits
	for _, l := range []skLayout{
		{ldx: 1016, ldy: 272, f32: true, res: true},
		{ldx: 1000, ldy: 264, res: true, self: true},
		{ldx: 1008, ldy: 264},
		{ldx: 1000, ldy: 280, res: true}, // 16-byte stores of whole column groups with the residual
		{ldx: 1000, ldy: 266, res: true}, // a row stride off 16 bytes: stores of pairs
	} {
		t.Run(fmt.Sprintf("ldx=%d/ldy=%d/f32=%v/res=%v/self=%v", l.ldx, l.ldy, l.f32, l.res, l.self), func(t *testing.T) {
			x := randBF16(r, (M-1)*l.ldx+K, 1)
			w := randBF16(r, N*K, 1/math.Sqrt(float64(K)))
			var res []byte
			n := (M-1)*l.ldy + N
			if l.f32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(2*r.Float64() - 1)
				}
				res = bytesOf32(v)
			} else {
				res = bytesOf16(randBF16(r, n, 1))
			}
			split := runGEMMBytes(t, x, w, res, l, GEMM{M: M, N: N, K: K, kern: gemmWG128, splits: 4})
			checkAgainst(t, split, skReference(x, w, res, l, M, N, K), l, M, N)
			for _, g := range []GEMM{{sk: 2, grid: 9}, {sk: -1}, {}, {xc: wcTiles[0]}, {xc: wcTiles[0], grid: 2}} {
				g.M, g.N, g.K, g.chunk = M, N, K, chunk
				if g.xc.bm == 0 {
					g.kern = gemmSK
				}
				got := runGEMMBytes(t, x, w, res, l, g)
				if i := firstDiff(got, split); i >= 0 {
					t.Errorf("stream-K %+v: byte %d differs from split-K per chunk", g, i)
				}
			}
		})
	}
	checkCountersZero(t)
}

// checkCountersZero requires every split-K / stream-K tile counter to be back at zero.
func checkCountersZero(t *testing.T) {
	t.Helper()
	var cnt []byte
	do(t, func(q *Queue) error {
		if q.d.cnt.Ptr == 0 {
			return nil
		}
		cnt = download(t, q, q.d.cnt, 4*maxGEMMTiles)
		return nil
	})
	for i := 0; i+4 <= len(cnt); i += 4 {
		if v := binary.LittleEndian.Uint32(cnt[i:]); v != 0 {
			t.Fatalf("tile counter %d is %d after the launches, want 0", i/4, v)
		}
	}
}

// TestGEMMSchedulePlans checks the batch-invariant plans on a Hopper-like device (no GPU work): the Kev-4B shapes'
// chunk sizes, the schedules chosen per M, and that every stream-K plan's workspace stays within schedWSMax.
func TestGEMMSchedulePlans(t *testing.T) {
	d := &Device{}
	d.info.Major, d.info.SMs = 9, 132
	for _, s := range append([][2]int{{264, 1000}, {8, 8}, {1024, 512}}, gemmShapes...) {
		N, K := s[0], s[1]
		c := fixedChunk(N, K, 132)
		kTiles := (K + 63) / 64
		if c < 1 || c > kTiles {
			t.Fatalf("N=%d K=%d: chunk %d of %d k tiles", N, K, c, kTiles)
		}
		line := fmt.Sprintf("N=%d K=%d chunk %d/%d:", N, K, c, kTiles)
		for _, M := range []int{1, 64, 240, 567, 2392, 20000} {
			p := d.plan(&GEMM{M: M, N: N, K: K})
			if c < kTiles && p.kern == gemmWGC && (p.splits != 1 || p.chunk != c) {
				t.Errorf("N=%d K=%d M=%d: chunked (N, K) planned on %v with %d splits, chunks of %d tiles", N, K, M, p.kern, p.splits, p.chunk)
			}
			if c < kTiles && p.kern != gemmSK && p.kern != gemmWGC && (p.splits != (kTiles+c-1)/c || p.tps != c) {
				t.Errorf("N=%d K=%d M=%d: chunked (N, K) planned on %v with %d splits of %d tiles", N, K, M, p.kern, p.splits, p.tps)
			}
			if c == kTiles && p.kern != gemmSK && p.splits != 1 {
				t.Errorf("N=%d K=%d M=%d: unchunked (N, K) planned with %d splits", N, K, M, p.splits)
			}
			if p.kern == gemmSK {
				if p.tps != c || p.grid != 132 || p.skTiles < 0 || p.skTiles > p.blocksM*p.blkN {
					t.Errorf("N=%d K=%d M=%d: stream-K plan %+v", N, K, M, p)
				}
				if ws := skWorkspace(p, M, K); ws > schedWSMax {
					t.Errorf("N=%d K=%d M=%d: workspace %d bytes", N, K, M, ws)
				}
			}
			line += fmt.Sprintf(" M=%d %s/%d/%d %.1fµs", M, p.fn[len("gemm_wgmma_"):], p.splits, p.skTiles, schedAt(M, N, K, 132, c).us)
		}
		t.Log(line)
	}
}
