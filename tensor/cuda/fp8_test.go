//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/kevgo/kev/internal/fp8"
	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/tensor"
)

// fp8Shapes are weight shapes (N × K) of Kev-0.8B (gate|up, down, attention output) and Kev-4B (gemmShapes).
var fp8Shapes = append([][2]int{{7168, 1024}, {1024, 3584}, {1024, 2048}}, gemmShapes...)

// fp8M are the token counts the FP8 tests run: one row, question rows, a long question pass, a prefill.
var fp8M = []int{1, 40, 240, 2392}

// needFP8 skips the test where the device has no FP8 kernels, after checking that the backend refuses FP8 weights
// there with a *tensor.DTypeError.
func needFP8(t *testing.T, b *Backend) {
	t.Helper()
	if ok, _ := dev.FP8Supported(); ok {
		return
	}
	_, err := b.FromFloat32FP8([]int{8, 16}, make([]float32, 128))
	var de *tensor.DTypeError
	if !errors.As(err, &de) {
		t.Fatalf("FromFloat32FP8 on a GPU without FP8 kernels: error %v, want a *tensor.DTypeError", err)
	}
	t.Skipf("no FP8 here: %v", err)
}

// fp8Rows returns m × k bf16 values whose rows have magnitudes from 2^−6 to 2^6 (row i: 2^(i mod 13 − 6)), none
// zero, and their float32 values.
func fp8Rows(r *rand.Rand, m, k int) ([]uint16, []float32) {
	bits := make([]uint16, m*k)
	vals := make([]float32, m*k)
	for i := 0; i < m; i++ {
		scale := math.Ldexp(1, i%13-6)
		copy(bits[i*k:], randBF16(r, k, scale))
	}
	for i, b := range bits {
		vals[i] = half.BF16ToF32(b)
	}
	return bits, vals
}

// fp8Weights returns n × k float32 weights, rows of magnitudes 2^−8 … 2^0 (row j: 2^(−(j mod 9))), none zero.
func fp8Weights(r *rand.Rand, n, k int) []float32 {
	w := make([]float32, n*k)
	for j := 0; j < n; j++ {
		scale := math.Ldexp(1, -(j % 9))
		for c := 0; c < k; c++ {
			for w[j*k+c] == 0 {
				w[j*k+c] = float32((2*r.Float64() - 1) * scale)
			}
		}
	}
	return w
}

// fp8Check compares rows of y (m × n, as float32) with the reference for x's rows rows: internal/fp8.MatMulFP8 of
// the activations quantized by internal/fp8 and the weights (wq, ws), plus the residual res (m × n) unless it is
// nil. An element may differ from it by the output's rounding (2^−8 of its magnitude for bf16, 2^−20 for fp32) plus
// fp8Allowance of the sum of its products' magnitudes (the order of the sums, and the tensor cores' FP8 adds within
// each promotion interval).
func fp8Check(t *testing.T, what string, y []float32, n int, x []float32, k int, rows []int, wq []uint8, ws []float32, res []float32, bf16 bool) {
	t.Helper()
	fp8CheckSums(t, what, y, n, x, k, rows, wq, ws, res, bf16, fp8Allowance(0))
}

// fp8Allowance is fp8Check's allowance for the sums at promotion interval p (0: the device's default): 2^−12 of the
// sum of the products' magnitudes for each k tile whose products the tensor cores sum before an fp32 add, at most
// 2^−10 (all of K: measured at most 3.3·10^−4 for K = 9,216 on the H100, TestGEMMFP8Promote's log).
func fp8Allowance(p int) float64 {
	if p == 0 {
		p = dev.fp8Promo
	}
	return min(0x1p-12*float64(p), 0x1p-10)
}

// fp8CheckSums is fp8Check with the sums' allowance sums (fp8Check's 2^−12) of the sum of an element's products'
// magnitudes. It returns the largest difference from the reference, less the output's rounding, as a share of that
// sum.
func fp8CheckSums(t *testing.T, what string, y []float32, n int, x []float32, k int, rows []int, wq []uint8, ws []float32, res []float32, bf16 bool, sums float64) float64 {
	t.Helper()
	xr := make([]float32, 0, len(rows)*k)
	for _, i := range rows {
		xr = append(xr, x[i*k:i*k+k]...)
	}
	xq, xs, err := fp8.QuantizeActivations(xr, len(rows), k)
	if err != nil {
		t.Fatal(err)
	}
	ref := fp8.MatMulFP8(xq, xs, wq, ws, len(rows), n, k)
	rel := 0x1p-20
	if bf16 {
		rel = 0x1p-8
	}
	bad, worst := 0, 0.0
	for ri, i := range rows {
		for j := 0; j < n; j++ {
			var abs float64
			for c := 0; c < k; c++ {
				abs += math.Abs(float64(fp8.ToFloat32(xq[ri*k+c])) * float64(fp8.ToFloat32(wq[j*k+c])))
			}
			abs *= float64(xs[ri]) * float64(ws[j])
			got, want := float64(y[i*n+j]), float64(ref[ri*n+j])
			if res != nil {
				want += float64(res[i*n+j])
			}
			d := math.Abs(got - want)
			if abs > 0 {
				worst = max(worst, (d-rel*math.Abs(want))/abs)
			}
			if !(d <= rel*math.Abs(want)+sums*abs+1e-30) {
				if bad++; bad <= 5 {
					t.Errorf("%s: y[%d, %d] = %g, reference %g (sum of |products| %g)", what, i, j, got, want, abs)
				}
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d elements out of tolerance", what, bad)
	}
	return worst
}

// sampleRows returns up to 12 rows of m spread over it, the first and last included.
func sampleRows(m int) []int {
	if m <= 12 {
		rows := make([]int, m)
		for i := range rows {
			rows[i] = i
		}
		return rows
	}
	rows := make([]int, 12)
	for i := range rows {
		rows[i] = i * (m - 1) / 11
	}
	return rows
}

// TestQuantRowsE4M3 checks the device's activation quantizer against internal/fp8.QuantizeActivations bit for bit:
// codes and scales, for bf16 and fp32 rows of varied magnitude, a zero row, a row too small for its scale
// (scale 1), and a row stride wider than K.
func TestQuantRowsE4M3(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	r := newRand(t)
	for _, c := range []struct {
		m, k, ldx int
		f32       bool
	}{{40, 2560, 2560, false}, {3, 16, 24, false}, {130, 9216, 9216, false}, {17, 1040, 1048, true}} {
		t.Run(fmt.Sprintf("M=%d/K=%d/ldx=%d/f32=%v", c.m, c.k, c.ldx, c.f32), func(t *testing.T) {
			bits, vals := fp8Rows(r, c.m, c.ldx)
			// row 1: zeros; row 2 (when there is one): subnormal, for fp32 rows below 448·2^−150 (scale 1), for
			// bf16 rows the smallest bf16 subnormals (a subnormal scale: the divisions must not flush them)
			for j := 0; j < c.ldx; j++ {
				bits[c.ldx+j], vals[c.ldx+j] = 0, 0
				if c.m <= 2 {
					continue
				}
				if c.f32 {
					vals[2*c.ldx+j] = float32(j%3-1) * 1e-44
				} else {
					bits[2*c.ldx+j] = uint16(j%4) | uint16(j&4)<<13
					vals[2*c.ldx+j] = half.BF16ToF32(bits[2*c.ldx+j])
				}
			}
			x := make([]float32, 0, c.m*c.k) // the rows without their padding
			for i := 0; i < c.m; i++ {
				x = append(x, vals[i*c.ldx:i*c.ldx+c.k]...)
			}
			wantQ, wantS, err := fp8.QuantizeActivations(x, c.m, c.k)
			if err != nil {
				t.Fatal(err)
			}
			var q []byte
			var s []float32
			do(t, func(qu *Queue) error {
				var xb Buffer
				dt := tensor.BF16
				if c.f32 {
					xb, dt = upload(t, qu, bytesOf32(vals), 0), tensor.F32
				} else {
					xb = upload(t, qu, bytesOf16(bits), 0)
				}
				qb := poisoned(t, qu, (c.m*c.k+15)&^15)
				sb := poisoned(t, qu, 4*c.m)
				if err := qu.QuantRowsE4M3(qb, sb, Operand{xb, dt}, c.m, c.k, c.ldx); err != nil {
					return err
				}
				q = download(t, qu, qb, c.m*c.k)
				s = from32(download(t, qu, sb, 4*c.m))
				for _, buf := range []Buffer{xb, qb, sb} {
					qu.Free(buf)
				}
				return nil
			})
			for i := range wantS {
				if math.Float32bits(s[i]) != math.Float32bits(wantS[i]) {
					t.Errorf("scale[%d] = %g, want %g", i, s[i], wantS[i])
				}
			}
			bad := 0
			for i := range wantQ {
				if q[i] != wantQ[i] {
					if bad++; bad <= 5 {
						t.Errorf("code [%d, %d] = %#02x, want %#02x (x = %g, scale %g)", i/c.k, i%c.k, q[i], wantQ[i], x[i], wantS[i/c.k])
					}
				}
			}
			if bad > 5 {
				t.Errorf("%d codes differ", bad)
			}
		})
	}
}

// TestMatMulFP8 checks MatMul with FP8 weights against internal/fp8's reference at the Kev-0.8B and Kev-4B weight
// shapes and 1, 40, 240 and 2,392 rows of bf16 activations (sampled rows of the longer ones: the reference runs on
// the host), and the weights' ToHost against their dequantized values.
func TestMatMulFP8(t *testing.T) {
	b := NewOn(dev)
	defer b.Trim()
	needFP8(t, b)
	r := newRand(t)
	for _, s := range fp8Shapes {
		n, k := s[0], s[1]
		w := fp8Weights(r, n, k)
		wq, ws, err := fp8.QuantizeRows(w, n, k)
		if err != nil {
			t.Fatal(err)
		}
		wt, err := b.FromFloat32FP8([]int{n, k}, w)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1024 && k == 3584 { // one shape's weights back, whole
			back, err := b.ToHost(wt)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := fp8.Dequantize(wq, ws, n, k)
			for i := range want {
				if back[i] != want[i] {
					t.Fatalf("ToHost: element %d = %g, want %g", i, back[i], want[i])
				}
			}
		}
		for _, m := range fp8M {
			bits, x := fp8Rows(r, m, k)
			xt, err := b.FromBits(tensor.BF16, []int{m, k}, bits)
			if err != nil {
				t.Fatal(err)
			}
			yt, err := b.MatMul(xt, wt)
			if err != nil {
				t.Fatalf("N=%d K=%d M=%d: %v", n, k, m, err)
			}
			if yt.DType() != tensor.BF16 {
				t.Fatalf("y is %v, want BF16", yt.DType())
			}
			y, err := b.ToHost(yt)
			if err != nil {
				t.Fatal(err)
			}
			fp8Check(t, fmt.Sprintf("N=%d K=%d M=%d", n, k, m), y, n, x, k, sampleRows(m), wq, ws, nil, true)
			b.Free(xt, yt)
		}
		b.Free(wt)
	}
}

// TestGEMMFP8Tiles runs the FP8 GEMM at every tile width, with and without a residual and fp32 output, on shapes
// whose M, N and K end inside a tile (K = 400: a partial last k tile), against the reference, and checks that all
// widths give the same bits: the plan picks the width by M (fp8Plan), so a row's bits would otherwise depend on the
// rows it is stacked with.
func TestGEMMFP8Tiles(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	r := newRand(t)
	const m, n, k = 130, 264, 400
	bits, x := fp8Rows(r, m, k)
	w := fp8Weights(r, n, k)
	wq, ws, err := fp8.QuantizeRows(w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	res := randBF16(r, m*n, 2)
	all := make([]int, m)
	for i := range all {
		all[i] = i
	}
	type run struct {
		f32 bool
		bn  int
	}
	bitsOf := map[run][]byte{}
	for _, w := range fp8Widths {
		bn := w.bn
		for _, f32 := range []bool{false, true} {
			for _, withR := range []bool{false, true} {
				name := fmt.Sprintf("bn=%d/f32=%v/res=%v", bn, f32, withR)
				var rb []byte // the residual in Y's type
				switch {
				case withR && f32:
					rf := make([]float32, len(res))
					for i, v := range res {
						rf[i] = half.BF16ToF32(v)
					}
					rb = bytesOf32(rf)
				case withR:
					rb = bytesOf16(res)
				}
				out := runGEMMFP8(t, bits, wq, ws, rb, GEMMFP8{M: m, N: n, K: k, F32Out: f32, bn: bn})
				var y []float32
				if f32 {
					y = from32(out)
				} else {
					y = make([]float32, m*n)
					for i, v := range from16(out) {
						y[i] = half.BF16ToF32(v)
					}
				}
				var rv []float32
				if withR {
					rv = make([]float32, len(res))
					for i, v := range res {
						rv[i] = half.BF16ToF32(v)
					}
				}
				fp8Check(t, name, y, n, x, k, all, wq, ws, rv, !f32)
				if !withR {
					bitsOf[run{f32, bn}] = out
				}
			}
		}
	}
	for _, f32 := range []bool{false, true} {
		ref := bitsOf[run{f32, fp8Widths[0].bn}]
		for _, w := range fp8Widths[1:] {
			out := bitsOf[run{f32, w.bn}]
			for i := range ref {
				if out[i] != ref[i] {
					t.Errorf("f32=%v: tiles 128×%d and 128×%d differ at byte %d (element %d)", f32, fp8Widths[0].bn, w.bn, i, i/(len(ref)/(m*n)))
					break
				}
			}
		}
	}
}

// runGEMMFP8 quantizes the bf16 rows bits on the device and runs g (its M, N, K and options; the buffers are
// filled in) against the E4M3 weights wq with row scales ws and the residual r (Y's type; nil: none), and
// returns Y's bytes ([M, N], or [M, N/2] with SwiGLU).
func runGEMMFP8(t *testing.T, bits []uint16, wq []uint8, ws []float32, r []byte, g GEMMFP8) []byte {
	t.Helper()
	m, n, k := g.M, g.N, g.K
	ysz := 2
	if g.F32Out {
		ysz = 4
	}
	if g.SwiGLU {
		n /= 2
	}
	var out []byte
	do(t, func(q *Queue) error {
		xb := upload(t, q, bytesOf16(bits), 0)
		g.X, g.XS = poisoned(t, q, m*k), poisoned(t, q, 4*m)
		g.W, g.WS = upload(t, q, wq, 0), upload(t, q, bytesOf32(ws), 0)
		g.Y = poisoned(t, q, ysz*m*n)
		if r != nil {
			g.R = upload(t, q, r, 0)
		}
		if err := q.QuantRowsE4M3(g.X, g.XS, Operand{xb, tensor.BF16}, m, k, k); err != nil {
			return err
		}
		if err := q.GEMMFP8(g); err != nil {
			return err
		}
		out = download(t, q, g.Y, ysz*m*n)
		for _, buf := range []Buffer{xb, g.X, g.XS, g.W, g.WS, g.Y, g.R} {
			if buf.Ptr != 0 {
				q.Free(buf)
			}
		}
		return nil
	})
	return out
}

// TestGEMMFP8SwiGLU checks the SwiGLU-fused FP8 kernels at every width against SwiGLU applied to the plain FP8
// product on the device (swiglu_bf16), bit for bit, on a shape whose M, F and K end inside a tile, and
// Backend.MatMulSwiGLU with an F8E4M3 w against MatMul then SwiGLU at several row counts.
func TestGEMMFP8SwiGLU(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	r := newRand(t)
	const m, f, k = 130, 136, 400
	bits, _ := fp8Rows(r, m, k)
	w := fp8Weights(r, 2*f, k)
	wq, ws, err := fp8.QuantizeRows(w, 2*f, k)
	if err != nil {
		t.Fatal(err)
	}
	plain := runGEMMFP8(t, bits, wq, ws, nil, GEMMFP8{M: m, N: 2 * f, K: k, bn: 64})
	var want []byte
	do(t, func(q *Queue) error {
		gu := upload(t, q, plain, 0)
		y := poisoned(t, q, 2*m*f)
		if err := q.SwiGLU(y, gu, m, f); err != nil {
			return err
		}
		want = download(t, q, y, 2*m*f)
		q.Free(gu)
		q.Free(y)
		return nil
	})
	for _, bn := range fp8GatedWidths {
		got := runGEMMFP8(t, bits, wq, ws, nil, GEMMFP8{M: m, N: 2 * f, K: k, SwiGLU: true, bn: bn})
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("bn=%d: byte %d (row %d) = %#x, SwiGLU of the plain product %#x", bn, i, i/(2*f), got[i], want[i])
				break
			}
		}
	}
	if err := dev.Do(func(q *Queue) error { return q.GEMMFP8(GEMMFP8{M: 1, N: 24, K: 16, SwiGLU: true}) }); err == nil {
		t.Error("GEMMFP8 with SwiGLU and N = 24 (not a multiple of 16): no error")
	}

	// The backend: MatMulSwiGLU's fused path against its two operations.
	const n2, kb = 2 * 520, 512
	wt, err := b.FromFloat32FP8([]int{n2, kb}, fp8Weights(r, n2, kb))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(wt)
	for _, rows := range []int{1, 40, 257} {
		xbits, _ := fp8Rows(r, rows, kb)
		xt, err := b.FromBits(tensor.BF16, []int{rows, kb}, xbits)
		if err != nil {
			t.Fatal(err)
		}
		fused, err := b.MatMulSwiGLU(xt, wt)
		if err != nil {
			t.Fatal(err)
		}
		gu, err := b.MatMul(xt, wt)
		if err != nil {
			t.Fatal(err)
		}
		apart, err := b.SwiGLU(gu)
		if err != nil {
			t.Fatal(err)
		}
		fb, err := b.ToHost(fused)
		if err != nil {
			t.Fatal(err)
		}
		ab, err := b.ToHost(apart)
		if err != nil {
			t.Fatal(err)
		}
		if len(fb) != rows*n2/2 || len(ab) != len(fb) {
			t.Fatalf("M=%d: %d and %d outputs, want %d", rows, len(fb), len(ab), rows*n2/2)
		}
		if i := sameBits(fb, ab); i >= 0 { // bf16 values, exact in float32
			t.Errorf("M=%d: element %d = %g fused, %g apart", rows, i, fb[i], ab[i])
		}
		for _, x := range []tensor.Tensor{xt, fused, gu, apart} {
			b.Free(x)
		}
	}
}

// TestGEMMFP8Cluster checks the cluster kernels (two blocks sharing each W tile) bit for bit against the
// single-block kernels of the same width (sameKernelBits), at row counts of two, three (the cluster's second block
// past M) and four row tiles, on a shape whose N and K end inside a tile.
func TestGEMMFP8Cluster(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	r := newRand(t)
	const n, k = 272, 400
	wq, ws, err := fp8.QuantizeRows(fp8Weights(r, n, k), n, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []int{129, 240, 257, 390} {
		bits, _ := fp8Rows(r, m, k)
		for _, bn := range fp8GatedWidths { // the widths with cluster kernels
			g := GEMMFP8{M: m, N: n, K: k, bn: bn}
			sameKernelBits(t, fmt.Sprintf("M=%d bn=%d", m, bn), r, bits, wq, ws, g, func(g *GEMMFP8, on bool) {
				g.mc = form(on)
			})
		}
	}
}

// TestGEMMFP8XCluster checks the X-sharing cluster kernels (gemm_fp8_wgmma_x128xBN, xg128xBN: two blocks on column
// tiles 2q and 2q + 1 of the same rows, each copying half the X tile's rows into both) bit for bit against the
// single-block kernels of the same width (sameKernelBits: bf16 and fp32 Y, a residual, SwiGLU, W loaded before and
// after the kernel before), at every width with a gated kernel and, plain only, at the others; with an odd number
// of column tiles (the last cluster's second block past N), 1 and 40 rows (the second X half past M), 129 and 257
// rows (a last row tile of one row), K of four k tiles (the last cut short) and of one; at every k tile promoted
// and at all of K in the tensor cores, its k loop both ways. A form that has no such kernel is refused.
func TestGEMMFP8XCluster(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	r := newRand(t)
	for _, w := range fp8Widths {
		bn := w.bn
		n := 4*bn + 16 // five column tiles plain and gated, the last cut short
		if !slices.Contains(fp8GatedWidths, bn) {
			n = 4*bn + 8 // plain only
		}
		eachFP8Shape(t, r, n, []int{1, 40, 129, 257}, 129, func(m, k int, bits []uint16, wq []uint8, ws []float32) {
			for _, f := range []struct{ promo, pipe int }{{1, 0}, {fp8PromoMax, 1}, {fp8PromoMax, -1}} {
				label := fmt.Sprintf("xc bn=%d M=%d K=%d promo %d pipe %d", bn, m, k, f.promo, f.pipe)
				g := GEMMFP8{M: m, N: n, K: k, bn: bn, mc: -1, promo: f.promo, pipe: f.pipe}
				sameKernelBits(t, label, r, bits, wq, ws, g, func(g *GEMMFP8, on bool) { g.xc = form(on) })
			}
		})
	}
	do(t, func(q *Queue) error { // no X-sharing kernel with row clusters, persistent blocks, half tiles or FAST widths
		for _, c := range []GEMMFP8{
			{M: 257, N: 512, K: 128, bn: 64, xc: 1, mc: 1},
			{M: 257, N: 512, K: 128, bn: 64, xc: 1, persist: 1},
			{M: 40, N: 512, K: 128, bn: 64, xc: 1, half: 1},
			{M: 257, N: 512, K: 128, bn: 256, xc: 1, promo: fp8PromoMax},
		} {
			refusedFP8(t, q, c, "xc", fmt.Sprintf("X-sharing clusters with mc %d, persist %d, half %d, bn %d", c.mc, c.persist, c.half, c.bn))
		}
		return nil
	})
}

// TestGEMMFP8Persistent checks the persistent kernels (one block per multiprocessor, tile after tile) and the
// persistent cluster kernels (clusters of two taking pair after pair of row tiles) bit for bit against the one-tile
// kernels of the same width (sameKernelBits), on products of more tiles than multiprocessors (so blocks run several
// tiles, the ring running on across them), with K of one k tile and of several, and an even and an odd number of
// row tiles (a cluster's second block then has no rows in the last pairs).
func TestGEMMFP8Persistent(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	r := newRand(t)
	for _, k := range []int{16, 400} {
		for _, bn := range fp8PersistWidths {
			n := 2 * bn * (dev.sms()/4 + 3) // > sms tiles plain and gated (bn/2 output columns a tile)
			wq, ws, err := fp8.QuantizeRows(fp8Weights(r, n, k), n, k)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []int{390, 270} { // four row tiles, the last of 6 rows; three, the last of 14
				bits, _ := fp8Rows(r, m, k)
				g := GEMMFP8{M: m, N: n, K: k, bn: bn}
				for _, mc := range []bool{false, true} {
					sameKernelBits(t, fmt.Sprintf("K=%d bn=%d M=%d clusters %v", k, bn, m, mc), r, bits, wq, ws, g,
						func(g *GEMMFP8, on bool) {
							g.persist = form(on)
							g.mc = form(on && mc)
						})
				}
			}
		}
	}
}

// TestGEMMFP8Half checks the half-column kernels (gemm_fp8_wgmma_h128xBN, hg128xBN: each tile's columns split
// between the two consumers, for at most 64 rows) bit for bit against the whole tiles (sameKernelBits), alone and
// with every form of the flags on, at every width that has one (the SwiGLU cases where the gated kernel has one too),
// with 1, 40 and 64 rows, a last tile cut short, and K of four k tiles (the last cut short) and of one. A width or
// row count without a half kernel is refused when asked for.
func TestGEMMFP8Half(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	r := newRand(t)
	for _, bn := range fp8HalfWidths {
		gatedOK := slices.Contains(fp8HalfGatedWidths, bn)
		n := 2*bn*3 + 16 // three tiles plain, six half-width tiles gated, a last tile cut short
		eachFP8Shape(t, r, n, []int{1, 40, 64}, 40, func(m, k int, bits []uint16, wq []uint8, ws []float32) {
			g := GEMMFP8{M: m, N: n, K: k, bn: bn, mc: -1, persist: -1}
			for _, p := range []int{1, fp8PromoMax} {
				label := fmt.Sprintf("half bn=%d M=%d K=%d promo %d", bn, m, k, p)
				g.promo = p
				sameKernelBits(t, label, r, bits, wq, ws, g, func(g *GEMMFP8, on bool) {
					g.half = -1
					if on && (gatedOK || !g.SwiGLU) {
						g.half = 1
					}
				})
			}
		})
	}
	do(t, func(q *Queue) error { // buffers of the right sizes, so that only the kernel's form is refused
		for _, c := range []GEMMFP8{
			{M: 65, N: 64, K: 128, bn: 64, half: 1},
			{M: 40, N: 48, K: 128, bn: 24, half: 1},
			{M: 40, N: 96, K: 128, bn: 48, half: 1, SwiGLU: true},
		} {
			refusedFP8(t, q, c, "half", fmt.Sprintf("half kernel for M=%d bn=%d SwiGLU %v", c.M, c.bn, c.SwiGLU))
		}
		return nil
	})
}

// refusedFP8 runs c on buffers of the right sizes, so that only its kernel's form can be refused, and checks that
// GEMMFP8 refuses it with an *ArgError naming arg.
func refusedFP8(t *testing.T, q *Queue, c GEMMFP8, arg, what string) {
	t.Helper()
	c.X, c.XS = poisoned(t, q, c.M*c.K), poisoned(t, q, 4*c.M)
	c.W, c.WS = poisoned(t, q, c.N*c.K), poisoned(t, q, 4*c.N)
	c.Y = poisoned(t, q, 2*c.M*c.N)
	var ae *ArgError
	if err := q.GEMMFP8(c); !errors.As(err, &ae) || ae.Arg != arg {
		t.Errorf("%s: error %v, want an *ArgError for %s", what, err, arg)
	}
	for _, buf := range []Buffer{c.X, c.XS, c.W, c.WS, c.Y} {
		q.Free(buf)
	}
}

// TestGEMMFP8Promote checks promotion intervals longer than one k tile (GEMMFP8.promo, KEV_CUDA_FP8_PROMOTE): the
// products of P k tiles summed in the tensor cores before each fp32 add. At each P every kernel gives the same bits
// (one tile a block, persistent blocks, clusters and the half-column kernels, against each other with sameKernelBits;
// at P = all also the wide FAST kernels, one tile a block and persistent), so a row's
// bits still do not depend on the rows it is stacked with; a FAST width at another interval is refused; and the products
// stay within the reference's allowance for P k tiles' sums in the tensor cores (fp8Allowance: 2^−12·P of the sum of
// the products' magnitudes, 2^−12 being one k tile's, at most 2^−10), on the Kev shapes' K (2,560 to 9,216: 20 to
// 72 k tiles). It logs the largest difference at each P, as a share of that sum, beside one k tile's.
func TestGEMMFP8Promote(t *testing.T) {
	b := NewOn(dev)
	defer b.Trim()
	needFP8(t, b)
	r := newRand(t)
	for _, p := range []int{3, 4, fp8PromoMax} { // K = 400 is four k tiles: groups of 3 and 1, one of 4, one of all
		for _, bn := range fp8PersistWidths {
			n := 2*bn*(dev.sms()/4+3) + 16 // more tiles than multiprocessors, a last tile cut short
			eachFP8Shape(t, r, n, []int{40, 390}, 40, func(m, k int, bits []uint16, wq []uint8, ws []float32) {
				g := GEMMFP8{M: m, N: n, K: k, bn: bn, promo: p}
				label := fmt.Sprintf("promo %d bn=%d M=%d K=%d", p, bn, m, k)
				sameKernelBits(t, label+" persistent", r, bits, wq, ws, g, func(g *GEMMFP8, on bool) {
					g.persist, g.mc = form(on), -1
				})
				sameKernelBits(t, label+" clusters", r, bits, wq, ws, g, func(g *GEMMFP8, on bool) {
					g.persist, g.mc = -1, form(on)
				})
				if p == fp8PromoMax { // the k loop that keeps products in flight: the same bits
					for _, persist := range []bool{false, true} {
						sameKernelBits(t, fmt.Sprintf("%s pipe persistent %v", label, persist), r, bits, wq, ws, g,
							func(g *GEMMFP8, on bool) {
								g.persist, g.mc, g.pipe = form(persist), -1, form(on)
							})
					}
				}
				if p == fp8PromoMax && bn == 128 { // the FAST kernels: the bits of every kernel at this interval
					for _, w := range fp8FastWidths {
						for _, persist := range []bool{false, true} {
							for _, pipe := range []int{-1, 1} {
								sameKernelBits(t, fmt.Sprintf("%s fast %d persistent %v pipe %d", label, w.bn, persist, pipe), r, bits, wq, ws, g,
									func(g *GEMMFP8, on bool) {
										g.persist, g.mc = form(persist), -1
										if on {
											g.bn, g.pipe = w.bn, pipe
										}
									})
							}
						}
					}
				}
				if fp8Half(m, bn, false) {
					sameKernelBits(t, label+" half", r, bits, wq, ws, g, func(g *GEMMFP8, on bool) {
						g.persist, g.mc, g.half = -1, -1, form(on)
						if on && g.SwiGLU && !slices.Contains(fp8HalfGatedWidths, bn) {
							g.half = -1
						}
					})
				}
			})
		}
	}
	do(t, func(q *Queue) error { // a FAST width below the interval all: refused
		refusedFP8(t, q, GEMMFP8{M: 40, N: 512, K: 256, bn: 256, promo: 4}, "bn", "a 256-column FP8 kernel at promotion interval 4")
		return nil
	})
	for _, s := range [][2]int{{2560, 9216}, {18432, 2560}} {
		n, k := s[0], s[1]
		w := fp8Weights(r, n, k)
		wq, ws, err := fp8.QuantizeRows(w, n, k)
		if err != nil {
			t.Fatal(err)
		}
		const m = 40
		bits, x := fp8Rows(r, m, k)
		rows := sampleRows(m)
		var line string
		for _, p := range []int{1, 2, 4, 8, fp8PromoMax} {
			y := runGEMMFP8(t, bits, wq, ws, nil, GEMMFP8{M: m, N: n, K: k, promo: p, F32Out: true})
			yf := make([]float32, m*n)
			for i := range yf {
				yf[i] = math.Float32frombits(uint32(y[4*i]) | uint32(y[4*i+1])<<8 | uint32(y[4*i+2])<<16 | uint32(y[4*i+3])<<24)
			}
			worst := fp8CheckSums(t, fmt.Sprintf("promo %d N=%d K=%d", p, n, k), yf, n, x, k, rows, wq, ws, nil, false, fp8Allowance(p))
			line += fmt.Sprintf("  P=%d %.3g", p, worst)
		}
		t.Logf("N=%d K=%d, largest |y − reference| / Σ|products| by promotion interval:%s", n, k, line)
	}
}

// eachFP8Shape calls fn with n × k weights quantized per row and m × k bf16 rows, for K of four k tiles, the last cut
// short (400), with each m of ms, and for K of one k tile cut short (112) with m = one.
func eachFP8Shape(t *testing.T, r *rand.Rand, n int, ms []int, one int, fn func(m, k int, bits []uint16, wq []uint8, ws []float32)) {
	t.Helper()
	for _, k := range []int{400, 112} {
		wq, ws, err := fp8.QuantizeRows(fp8Weights(r, n, k), n, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if k == 112 && m != one {
				continue
			}
			bits, _ := fp8Rows(r, m, k)
			fn(m, k, bits, wq, ws)
		}
	}
}

// form is GEMMFP8's setting of a kernel form: 1 on, -1 off.
func form(on bool) int {
	if on {
		return 1
	}
	return -1
}

// sameKernelBits runs g (its M, N, K and width) with a kernel form off and on (set) and checks the outputs bit for
// bit, for each of: bf16 Y, bf16 Y with a residual, fp32 Y, SwiGLU (unless g's width has no SwiGLU kernel); with W
// loaded before the kernel before it and after.
func sameKernelBits(t *testing.T, label string, r *rand.Rand, bits []uint16, wq []uint8, ws []float32, g GEMMFP8, set func(*GEMMFP8, bool)) {
	t.Helper()
	res := bytesOf16(randBF16(r, g.M*g.N, 2))
	gated := g.bn == 0 || slices.Contains(fp8GatedWidths, g.bn) || fp8FastStages(g.bn) > 0
	for _, c := range []struct {
		name      string
		f32, glu  bool
		res       []byte
		preloaded bool
	}{
		{"bf16", false, false, nil, false},
		{"bf16+residual", false, false, res, true},
		{"f32", true, false, nil, true},
		{"swiglu", false, true, nil, false},
		{"swiglu-preloaded", false, true, nil, true},
	} {
		if c.glu && !gated {
			continue
		}
		off, on := g, g
		off.F32Out, off.SwiGLU, off.WLoaded = c.f32, c.glu, c.preloaded
		on.F32Out, on.SwiGLU, on.WLoaded = c.f32, c.glu, c.preloaded
		set(&off, false)
		set(&on, true)
		want := runGEMMFP8(t, bits, wq, ws, c.res, off)
		got := runGEMMFP8(t, bits, wq, ws, c.res, on)
		if len(got) != len(want) {
			t.Fatalf("%s %s: %d bytes, want %d", label, c.name, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s %s: byte %d = %#x, %#x with the kernel form off", label, c.name, i, got[i], want[i])
				break
			}
		}
	}
}

// TestMatMulFP8BatchInvariant checks that a row's output bits do not depend on the rows it is multiplied with: the
// rows of M = 1, 40 and 240 (the first rows of a 2,392-row batch, and 240 rows from its middle) against the same
// rows of the whole batch, at a Kev-0.8B and a Kev-4B shape.
func TestMatMulFP8BatchInvariant(t *testing.T) {
	b := NewOn(dev)
	defer b.Trim()
	needFP8(t, b)
	r := newRand(t)
	const M = 2392
	for _, s := range [][2]int{{1024, 3584}, {18432, 2560}} {
		n, k := s[0], s[1]
		wt, err := b.FromFloat32FP8([]int{n, k}, fp8Weights(r, n, k))
		if err != nil {
			t.Fatal(err)
		}
		bits, _ := fp8Rows(r, M, k)
		run := func(lo, hi int) []float32 {
			xt, err := b.FromBits(tensor.BF16, []int{hi - lo, k}, bits[lo*k:hi*k])
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(xt)
			yt, err := b.MatMul(xt, wt)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(yt)
			y, err := b.ToHost(yt)
			if err != nil {
				t.Fatal(err)
			}
			return y
		}
		whole := run(0, M)
		for _, part := range [][2]int{{0, 1}, {0, 40}, {0, 240}, {1000, 1240}, {M - 1, M}} {
			y := run(part[0], part[1])
			for i := range y {
				row, col := part[0]+i/n, i%n
				if math.Float32bits(y[i]) != math.Float32bits(whole[row*n+col]) {
					t.Fatalf("N=%d K=%d: row %d column %d of rows [%d, %d) is %g, %g in the whole batch",
						n, k, row, col, part[0], part[1], y[i], whole[row*n+col])
				}
			}
		}
		b.Free(wt)
	}
}

// TestFP8Errors checks that FP8 weights are refused where they cannot work, with typed errors: shapes the kernels do
// not take, non-finite weights, an F8E4M3 x, FromBits.
func TestFP8Errors(t *testing.T) {
	b := NewOn(dev)
	needFP8(t, b)
	var se *tensor.ShapeError
	if _, err := b.FromFloat32FP8([]int{8, 24}, make([]float32, 8*24)); !errors.As(err, &se) {
		t.Errorf("K = 24: error %v, want a *tensor.ShapeError", err)
	}
	if _, err := b.FromFloat32FP8([]int{12, 16}, make([]float32, 12*16)); !errors.As(err, &se) {
		t.Errorf("N = 12: error %v, want a *tensor.ShapeError", err)
	}
	if _, err := b.FromFloat32FP8([]int{8, 16, 1}, make([]float32, 8*16)); !errors.As(err, &se) {
		t.Errorf("rank 3: error %v, want a *tensor.ShapeError", err)
	}
	w := make([]float32, 8*16)
	w[5*16+3] = float32(math.Inf(-1))
	var nf *fp8.NonFiniteError
	if _, err := b.FromFloat32FP8([]int{8, 16}, w); !errors.As(err, &nf) || nf.Row != 5 || nf.Col != 3 {
		t.Errorf("an infinite weight: error %v, want an *fp8.NonFiniteError at [5, 3]", err)
	}
	wt, err := b.FromFloat32FP8([]int{8, 16}, make([]float32, 8*16))
	if err != nil {
		t.Fatal(err)
	}
	var de *tensor.DTypeError
	if _, err := b.MatMul(wt, wt); !errors.As(err, &de) {
		t.Errorf("MatMul with an F8E4M3 x: error %v, want a *tensor.DTypeError", err)
	}
	if _, err := b.FromBits(tensor.F8E4M3, []int{8, 16}, make([]uint16, 128)); !errors.As(err, &de) {
		t.Errorf("FromBits(F8E4M3): error %v, want a *tensor.DTypeError", err)
	}
	if _, err := b.RMSNorm(wt, wt, 1e-6, true); err == nil {
		t.Error("RMSNorm of an F8E4M3 tensor: no error")
	}
	b.Free(wt)
}

// BenchmarkGEMMFP8 times the FP8 product beside the bf16 one at the Kev-4B GEMM shapes (gemmShapes) and the token
// counts of a question-row pass (40, 240), a new ticket's (257), a 2,200-token state (2,392) and a batch of long requests (16,384), over
// rotating inputs larger than L2: "bf16" is the default bf16 plan (timeGEMM), "fp8" the FP8 GEMM alone on codes
// quantized beforehand with the planned tile width (bn=), "fp8+quant" the quantization of x then the GEMM, as
// MatMul runs them, "fp8-bn128" the GEMM with 128-column tiles whatever the shape; at the planned width, where the
// kernel form exists, "fp8-1blk" one tile a block, "fp8-mc" clusters of two, "fp8-persist" persistent blocks and
// "fp8-pmc" persistent clusters of two; the planned kernel with the products of 1, 2, 4, 8 and all k tiles summed in
// the tensor cores before each fp32 add ("fp8-promo1" … "fp8-promoall") and, summing all of K so, 192 and 256 columns
// wide ("fp8-fast192", "fp8-fast256"), and all of K with and without the k loop that keeps products in flight
// ("fp8-pipe", "fp8-nopipe", "fp8-fast256-pipe"); for the narrow products (N ≤ 4,096) up to 384 rows, that loop on
// 40, 64 and 128 columns on single blocks ("fp8-pipe-bnNN"), in clusters of two sharing W ("fp8-pipe-mcNN") and in
// clusters of two sharing X ("fp8-pipe-xcNN"); at most 64 rows, every width with a half-column kernel whole ("fp8-wholeNN")
// and halved ("fp8-halfNN"). With KEV_FP8_WIDTHS=all it also times every tile width ("fp8-bnNN", and in
// clusters "fp8-mcNN"), the measurements fp8Plan's model is fitted to. Each prints a line "KEVBENCH gemm-fp8 M= N= K= path= us= TFLOP/s= GB/s=" (GB/s: the operands' bytes,
// x in the type the path reads).
func BenchmarkGEMMFP8(b *testing.B) {
	if ok, why := dev.FP8Supported(); !ok {
		b.Skip(why)
	}
	sweep := os.Getenv("KEV_FP8_WIDTHS") == "all"
	for _, M := range []int{40, 240, 257, 2392, 16384} {
		for _, s := range gemmShapes {
			N, K := s[0], s[1]
			b.Run(fmt.Sprintf("M=%d/N=%d/K=%d", M, N, K), func(b *testing.B) {
				t16, _ := timeGEMM(b, GEMM{M: M, N: N, K: K})
				t8, t8q := timeGEMMFP8(b, M, N, K)
				t8w, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: 128, persist: -1})
				flop := 2 * float64(M) * float64(N) * float64(K)
				b8 := int64(M*K + N*K + 2*M*N)
				type row struct {
					path  string
					bn    int // FP8 tile width, 0 for bf16
					t     float64
					bytes int64
				}
				plan := fp8Plan(M, N, K, dev.sms(), false)
				rows := []row{
					{"bf16", 0, t16, int64(2*M*K + 2*N*K + 2*M*N)},
					{"fp8", plan, t8, b8},
					{"fp8+quant", plan, t8q, int64(2*M*K + M*K + N*K + 2*M*N)},
					{"fp8-bn128", 128, t8w, b8},
				}
				if fp8Cluster(M, plan) { // the planned width on single blocks and in clusters of two
					t1, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: plan, mc: -1, persist: -1})
					t2, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: plan, mc: 1})
					rows = append(rows, row{"fp8-1blk", plan, t1, b8}, row{"fp8-mc", plan, t2, b8})
				}
				if tiles := ((M + 127) / 128) * ((N + plan - 1) / plan); fp8Persistent(tiles, dev.sms(), plan) {
					tp, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: plan, mc: -1, persist: 1})
					rows = append(rows, row{"fp8-persist", plan, tp, b8})
					if fp8Cluster(M, plan) {
						tpm, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: plan, mc: 1, persist: 1})
						rows = append(rows, row{"fp8-pmc", plan, tpm, b8})
					}
				}
				for _, f := range []struct { // the planned kernel at each promotion interval, and the FAST widths
					path string
					form GEMMFP8
				}{
					{"fp8-promo1", GEMMFP8{promo: 1}},
					{"fp8-promo2", GEMMFP8{promo: 2}},
					{"fp8-promo4", GEMMFP8{promo: 4}},
					{"fp8-promo8", GEMMFP8{promo: 8}},
					{"fp8-promoall", GEMMFP8{promo: fp8PromoMax}},
					{"fp8-fast192", GEMMFP8{promo: fp8PromoMax, bn: 192}},
					{"fp8-fast256", GEMMFP8{promo: fp8PromoMax, bn: 256}},
					{"fp8-pipe", GEMMFP8{promo: fp8PromoMax, pipe: 1}},
					{"fp8-nopipe", GEMMFP8{promo: fp8PromoMax, pipe: -1}},
					{"fp8-fast256-pipe", GEMMFP8{promo: fp8PromoMax, bn: 256, pipe: 1}},
				} {
					tf, _ := timeGEMMFP8With(b, M, N, K, f.form)
					bn := plan
					if f.form.bn > 0 {
						bn = f.form.bn
					}
					rows = append(rows, row{f.path, bn, tf, b8})
				}
				if N <= 4096 && M <= 384 { // the narrow products of question passes: which bound holds with the loop that keeps products in flight
					for _, w := range []int{40, 64, 128} {
						one := GEMMFP8{bn: w, mc: -1, xc: -1, persist: -1, promo: fp8PromoMax, pipe: 1}
						tw, _ := timeGEMMFP8With(b, M, N, K, one)
						rows = append(rows, row{fmt.Sprintf("fp8-pipe-bn%d", w), w, tw, b8})
						if fp8Cluster(M, w) {
							mc := one
							mc.mc = 1
							tm, _ := timeGEMMFP8With(b, M, N, K, mc)
							rows = append(rows, row{fmt.Sprintf("fp8-pipe-mc%d", w), w, tm, b8})
						}
						if fp8XCluster((M+127)/128, (N+w-1)/w, dev.sms()) {
							xc := one
							xc.xc = 1
							tx, _ := timeGEMMFP8With(b, M, N, K, xc)
							rows = append(rows, row{fmt.Sprintf("fp8-pipe-xc%d", w), w, tx, b8})
						}
					}
				}
				for _, w := range fp8HalfWidths { // the half-column kernels, every width (M ≤ 64)
					if !fp8Half(M, w, false) {
						continue
					}
					th, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: w, mc: -1, persist: -1, half: 1})
					tw, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: w, mc: -1, persist: -1, half: -1})
					rows = append(rows, row{fmt.Sprintf("fp8-whole%d", w), w, tw, b8}, row{fmt.Sprintf("fp8-half%d", w), w, th, b8})
				}
				if sweep {
					for _, w := range fp8Widths {
						tw, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: w.bn, mc: -1, persist: -1})
						rows = append(rows, row{fmt.Sprintf("fp8-bn%d", w.bn), w.bn, tw, b8})
						if fp8Cluster(M, w.bn) {
							tw, _ := timeGEMMFP8With(b, M, N, K, GEMMFP8{bn: w.bn, mc: 1})
							rows = append(rows, row{fmt.Sprintf("fp8-mc%d", w.bn), w.bn, tw, b8})
						}
					}
				}
				for _, r := range rows {
					model := "-"
					if r.bn > 0 {
						model = fmt.Sprintf("%.1f", fp8Cost(M, N, K, dev.sms(), r.bn))
					}
					fmt.Printf("KEVBENCH gemm-fp8 M=%d N=%d K=%d path=%s bn=%d us=%.2f TFLOP/s=%.1f GB/s=%.0f model_us=%s\n", M, N, K,
						r.path, r.bn, r.t*1e6, flop/r.t/1e12, float64(r.bytes)/r.t/1e9, model)
				}
				b.ReportMetric(t16/t8q, "bf16/fp8")
			})
		}
	}
}

// timeGEMMFP8 returns the median device times in seconds of the FP8 GEMM [M, K] × [N, K]ᵀ alone and of the
// quantization of a bf16 x followed by the GEMM, over rotating sets of inputs: weights quantized on the device from
// random bf16 values (valid E4M3 codes, none NaN), x random bf16. The kernel is the planned one: width, and
// persistent blocks or not, as a product of the model runs it.
func timeGEMMFP8(b *testing.B, M, N, K int) (gemm, withQuant float64) {
	return timeGEMMFP8With(b, M, N, K, GEMMFP8{})
}

// timeGEMMFP8With is timeGEMMFP8 with the kernel form of form: its bn, mc, persist, half, promo and pipe (0: planned, or
// as the device says).
func timeGEMMFP8With(b *testing.B, M, N, K int, form GEMMFP8) (gemm, withQuant float64) {
	xb, wb := int64(2*M*K), int64(N*K)
	sets := int(max(2, min(16, (rotateBytes+xb+wb-1)/(xb+wb))))
	err := dev.Do(func(q *Queue) error {
		var bufs []Buffer
		defer func() {
			for _, x := range bufs {
				q.Free(x)
			}
		}()
		alloc := func(n int64) (Buffer, error) {
			x, err := q.Alloc((n + 15) &^ 15)
			if err == nil {
				bufs = append(bufs, x)
			}
			return x, err
		}
		type set struct{ x, xq, xs, w, ws Buffer }
		ss := make([]set, sets)
		for i := range ss {
			s := &ss[i]
			var err error
			for _, a := range []struct {
				p *Buffer
				n int64
			}{{&s.x, xb}, {&s.xq, int64(M * K)}, {&s.xs, 4 * int64(M)}, {&s.w, wb}, {&s.ws, 4 * int64(N)}} {
				if *a.p, err = alloc(a.n); err != nil {
					return err
				}
			}
			if err := q.FillUniform(s.x, int64(M*K), uint32(2*i+1), 1); err != nil {
				return err
			}
			w16, err := alloc(2 * wb)
			if err != nil {
				return err
			}
			if err := q.FillUniform(w16, int64(N*K), uint32(2*i+2), 0.02); err != nil {
				return err
			}
			if err := q.QuantRowsE4M3(s.w, s.ws, Operand{w16, tensor.BF16}, N, K, K); err != nil {
				return err
			}
			if err := q.QuantRowsE4M3(s.xq, s.xs, Operand{s.x, tensor.BF16}, M, K, K); err != nil {
				return err
			}
		}
		y, err := alloc(2 * int64(M) * int64(N))
		if err != nil {
			return err
		}
		gemmOf := func(s set) GEMMFP8 {
			return GEMMFP8{Y: y, X: s.xq, XS: s.xs, W: s.w, WS: s.ws, M: M, N: N, K: K, WLoaded: true, bn: form.bn, mc: form.mc, persist: form.persist,
				half: form.half, promo: form.promo, pipe: form.pipe, xc: form.xc}
		}
		iters := max(b.N, 25)
		if gemm, err = medianTime(q, iters, func(i int) error { return q.GEMMFP8(gemmOf(ss[i%sets])) }); err != nil {
			return err
		}
		withQuant, err = medianTime(q, iters, func(i int) error {
			s := ss[i%sets]
			if err := q.QuantRowsE4M3(s.xq, s.xs, Operand{s.x, tensor.BF16}, M, K, K); err != nil {
				return err
			}
			return q.GEMMFP8(gemmOf(s))
		})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return gemm, withQuant
}
