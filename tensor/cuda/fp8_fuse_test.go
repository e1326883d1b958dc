//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/fp8"
	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/layers"
	"github.com/kevgo/kev/tensor"
)

// The activations' FP8 codes from their producers (fp8_fuse.go): each fused producer's attached codes against
// QuantRowsE4M3 of its output, byte for byte, and the products that read them against the products that quantize,
// bit for bit.

// fp8FuseRows and fp8FuseWidths are the shapes the producer tests run: one row, question rows, a partial last
// block of rows; Kev-4B's hidden size and DeltaNet value width, a small multiple of 16, and for RMSNorm a row
// wider than its in-register path (rmsnorm_wide).
var (
	fp8FuseRows   = []int{1, 40, 257}
	fp8FuseWidths = []int{2560, 4096, 48, 5120}
)

// setFP8Fuse sets the device's fusion switch (KEV_CUDA_FP8_FUSE) for the rest of the test.
func setFP8Fuse(t *testing.T, on bool) {
	t.Helper()
	var was bool
	do(t, func(q *Queue) error { was, q.d.fp8Fuse = q.d.fp8Fuse, on; return nil })
	t.Cleanup(func() { _ = dev.Do(func(q *Queue) error { q.d.fp8Fuse = was; return nil }) })
}

// fuseBackend returns a backend of the test device with FP8 weights (so that its producers attach codes) and
// fusion on, skipping the test where the device has no FP8 kernels.
func fuseBackend(t *testing.T) *Backend {
	t.Helper()
	b := NewOn(dev)
	needFP8(t, b)
	setFP8Fuse(t, true)
	w, err := b.FromFloat32FP8([]int{8, 16}, make([]float32, 8*16))
	if err != nil {
		t.Fatal(err)
	}
	b.Free(w)
	t.Cleanup(func() { b.Trim() })
	return b
}

// fuseWeight uploads an FP8 weight [n, k] of random values.
func fuseWeight(t *testing.T, b *Backend, r *rand.Rand, n, k int) tensor.Tensor {
	t.Helper()
	w, err := b.FromFloat32FP8([]int{n, k}, fp8Weights(r, n, k))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free(w) })
	return w
}

// bf16Tensor uploads m × k random non-zero bf16 values of magnitude up to scale.
func bf16Tensor(t *testing.T, b *Backend, r *rand.Rand, m, k int, scale float64) tensor.Tensor {
	t.Helper()
	x, err := b.FromBits(tensor.BF16, []int{m, k}, randBF16(r, m*k, scale))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// gainTensor uploads n random fp32 gains.
func gainTensor(t *testing.T, b *Backend, r *rand.Rand, n int) tensor.Tensor {
	t.Helper()
	g, err := b.FromFloat32([]int{n}, randVals(r, n, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// hostOf copies t back.
func hostOf(t *testing.T, b *Backend, x tensor.Tensor) []float32 {
	t.Helper()
	v, err := b.ToHost(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkCodes checks that y (a BF16 matrix [m, k]) has FP8 codes attached and that they are, byte for byte, what
// QuantRowsE4M3 makes from y on the device, and what internal/fp8.QuantizeActivations makes from y's values.
func checkCodes(t *testing.T, b *Backend, y tensor.Tensor) {
	t.Helper()
	yt := y.(*Tensor)
	m, k := yt.shape[0], yt.shape[1]
	if yt.q8.buf.Ptr == 0 || yt.q8.m != m || yt.q8.k != k {
		t.Fatalf("[%d, %d] output: codes %+v attached, want codes of its shape", m, k, yt.q8)
	}
	var gotQ, wantQ []byte
	var gotS, wantS []float32
	do(t, func(q *Queue) error {
		codes, scales := yt.q8.parts()
		gotQ, gotS = download(t, q, codes, m*k), from32(download(t, q, scales, 4*m))
		qb, sb := poisoned(t, q, (m*k+15)&^15), poisoned(t, q, 4*m)
		defer q.Free(qb)
		defer q.Free(sb)
		if err := q.QuantRowsE4M3(qb, sb, yt.Operand(), m, k, k); err != nil {
			return err
		}
		wantQ, wantS = download(t, q, qb, m*k), from32(download(t, q, sb, 4*m))
		return nil
	})
	hq, hs, err := fp8.QuantizeActivations(hostOf(t, b, y), m, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := range wantS {
		if math.Float32bits(gotS[i]) != math.Float32bits(wantS[i]) || math.Float32bits(hs[i]) != math.Float32bits(wantS[i]) {
			t.Fatalf("[%d, %d]: row %d's scale %g attached, %g from QuantRowsE4M3, %g on the host", m, k, i, gotS[i], wantS[i], hs[i])
		}
	}
	for i := range wantQ {
		if gotQ[i] != wantQ[i] || hq[i] != wantQ[i] {
			t.Fatalf("[%d, %d]: code [%d, %d] %#02x attached, %#02x from QuantRowsE4M3, %#02x on the host", m, k, i/k, i%k,
				gotQ[i], wantQ[i], hq[i])
		}
	}
}

// checkProduct checks that MatMul(y, w) reading y's attached codes has the bits of the same product with fusion
// off (y quantized by QuantRowsE4M3), and likewise MatMulSwiGLU(y, wg) when wg is not nil.
func checkProduct(t *testing.T, b *Backend, y, w, wg tensor.Tensor) {
	t.Helper()
	run := func(on bool) (p, g []float32) {
		setFP8Fuse(t, on)
		pt, err := b.MatMul(y, w)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(pt)
		p = hostOf(t, b, pt)
		if wg != nil {
			gt, err := b.MatMulSwiGLU(y, wg)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free(gt)
			g = hostOf(t, b, gt)
		}
		return p, g
	}
	off, offG := run(false)
	on, onG := run(true)
	if i := sameBits(on, off); i >= 0 {
		t.Fatalf("MatMul: element %d = %g from the attached codes, %g with x quantized", i, on[i], off[i])
	}
	if i := sameBits(onG, offG); i >= 0 {
		t.Fatalf("MatMulSwiGLU: element %d = %g from the attached codes, %g with x quantized", i, onG[i], offG[i])
	}
}

// sameOutput checks that a producer's output with fusion on has the bits of its output with fusion off, which has
// no codes attached.
func sameOutput(t *testing.T, what string, on, off tensor.Tensor, b *Backend) {
	t.Helper()
	if q := off.(*Tensor).q8; q.buf.Ptr != 0 {
		t.Fatalf("%s with fusion off: codes attached", what)
	}
	a, c := hostOf(t, b, on), hostOf(t, b, off)
	if i := sameBits(a, c); i >= 0 {
		t.Fatalf("%s: element %d = %g with fusion on, %g off", what, i, a[i], c[i])
	}
}

// checkFused runs a producer (produce(on): its output with fusion on or off, which the check frees) both ways and
// checks that the outputs have the same bits; then, when codes says the fused output should have them, its attached
// codes (checkCodes) and the products reading them (checkProduct with w and wg), and otherwise that it has none.
func checkFused(t *testing.T, b *Backend, what string, w, wg tensor.Tensor, codes bool, produce func(on bool) tensor.Tensor) {
	t.Helper()
	off := produce(false)
	y := produce(true)
	defer b.Free(y, off)
	sameOutput(t, what, y, off, b)
	if !codes {
		if q := y.(*Tensor).q8; q.buf.Ptr != 0 {
			t.Fatalf("%s: codes attached where the fused kernel does not take the shape", what)
		}
		return
	}
	checkCodes(t, b, y)
	checkProduct(t, b, y, w, wg)
}

// TestFP8FuseRMSNorm checks RMSNorm's and AddRMSNorm's attached codes (rmsnorm_bf16_e4m3) at every fp8FuseRows ×
// fp8FuseWidths shape, with gains w and 1 + w: the codes are QuantRowsE4M3's of the output, the output is the
// output with fusion off, and the products reading the codes (MatMul, MatMulSwiGLU) are those quantizing it.
func TestFP8FuseRMSNorm(t *testing.T) {
	b := fuseBackend(t)
	r := newRand(t)
	for _, k := range fp8FuseWidths {
		w := fuseWeight(t, b, r, 64, k)
		wg := fuseWeight(t, b, r, 2*64, k)
		gain := gainTensor(t, b, r, k)
		for _, m := range fp8FuseRows {
			for _, add := range []bool{false, true} {
				plusOne := m%2 == 1
				t.Run(fmt.Sprintf("M=%d/n=%d/add=%v", m, k, add), func(t *testing.T) {
					x := bf16Tensor(t, b, r, m, k, 4)
					res := bf16Tensor(t, b, r, m, k, 4)
					defer b.Free(x, res)
					norm := func(on bool) tensor.Tensor {
						setFP8Fuse(t, on)
						if !add {
							y, err := b.RMSNorm(x, gain, 1e-6, plusOne)
							if err != nil {
								t.Fatal(err)
							}
							return y
						}
						sum, y, err := b.AddRMSNorm(x, res, gain, 1e-6, plusOne)
						if err != nil {
							t.Fatal(err)
						}
						if sum.(*Tensor).q8.buf.Ptr != 0 {
							t.Fatal("AddRMSNorm's sum has codes attached")
						}
						b.Free(sum)
						return y
					}
					checkFused(t, b, "RMSNorm", w, wg, true, norm)
				})
			}
		}
		b.Free(gain)
	}
}

// TestFP8FuseMatMulAddRMSNorm checks MatMulAddRMSNorm with an FP8 w (MatMul, then AddRMSNorm): its normed output's
// attached codes and the product reading them, as TestFP8FuseRMSNorm, at Kev-4B's shapes (the attention and DeltaNet
// output projections into d = 2560, and the MLP's down projection from 9216) and a small one.
func TestFP8FuseMatMulAddRMSNorm(t *testing.T) {
	b := fuseBackend(t)
	r := newRand(t)
	for _, s := range [][2]int{{2560, 4096}, {2560, 9216}, {48, 32}} {
		n, k := s[0], s[1]
		wo := fuseWeight(t, b, r, n, k)
		w := fuseWeight(t, b, r, 64, n)
		wg := fuseWeight(t, b, r, 2*64, n)
		gain := gainTensor(t, b, r, n)
		for _, m := range fp8FuseRows {
			t.Run(fmt.Sprintf("M=%d/N=%d/K=%d", m, n, k), func(t *testing.T) {
				x := bf16Tensor(t, b, r, m, k, 1)
				res := bf16Tensor(t, b, r, m, n, 4)
				defer b.Free(x, res)
				norm := func(on bool) tensor.Tensor {
					setFP8Fuse(t, on)
					sum, y, err := b.MatMulAddRMSNorm(x, wo, res, gain, 1e-6, true)
					if err != nil {
						t.Fatal(err)
					}
					b.Free(sum)
					return y
				}
				checkFused(t, b, "MatMulAddRMSNorm", w, wg, true, norm)
			})
		}
		b.Free(gain)
	}
}

// TestFP8FuseGatedRMSNorm checks GatedRMSNorm's attached codes (gated_rmsnorm_bf16_e4m3, a block per row of hpr
// vectors) as TestFP8FuseRMSNorm, at Kev-4B's DeltaNet shape (32 value heads of 128: rows 4096 wide) and others of
// each lane count (d_v = 16 with 3 heads: a block of 6 threads rounded up to a warp; d_v = 256: 32 lanes a
// vector), with z dense and as a column view of a wider matrix (as the DeltaNet layer's in_proj output).
func TestFP8FuseGatedRMSNorm(t *testing.T) {
	b := fuseBackend(t)
	r := newRand(t)
	for _, s := range [][2]int{{128, 32}, {128, 20}, {16, 3}, {256, 10}, {64, 16}} {
		dv, hpr := s[0], s[1]
		width := dv * hpr
		w := fuseWeight(t, b, r, 64, width)
		norm, err := b.FromFloat32([]int{dv}, randVals(r, dv, 1))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fp8FuseRows {
			for _, view := range []bool{false, true} {
				t.Run(fmt.Sprintf("M=%d/dv=%d/heads=%d/zview=%v", m, dv, hpr, view), func(t *testing.T) {
					o := bf16Tensor(t, b, r, m, width, 2)
					defer b.Free(o)
					var z tensor.Tensor
					if view {
						zw := bf16Tensor(t, b, r, m, 32+width+48, 4)
						parts, err := b.SplitCols(zw, 32, width, 48)
						b.Free(zw)
						if err != nil {
							t.Fatal(err)
						}
						b.Free(parts[0], parts[2])
						z = parts[1]
					} else {
						z = bf16Tensor(t, b, r, m, width, 4)
					}
					defer b.Free(z)
					gated := func(on bool) tensor.Tensor {
						setFP8Fuse(t, on)
						y, err := b.GatedRMSNorm(o, z, norm, 1e-6)
						if err != nil {
							t.Fatal(err)
						}
						return y
					}
					checkFused(t, b, "GatedRMSNorm", w, nil, true, gated)
				})
			}
		}
		b.Free(norm)
	}
}

// TestFP8FuseSigmoidGate checks SigmoidGate's attached codes (sigmoid_gate_bf16_e4m3, a block per row) as
// TestFP8FuseRMSNorm, at Kev-4B's attention width (16 heads of 256: rows 4096 wide) and smaller ones, and that a row
// wider than the kernel takes (5120) gets no codes and keeps its bits.
func TestFP8FuseSigmoidGate(t *testing.T) {
	b := fuseBackend(t)
	r := newRand(t)
	for _, k := range []int{4096, 2560, 48, 5120} {
		w := fuseWeight(t, b, r, 64, k)
		wg := fuseWeight(t, b, r, 2*64, k)
		for _, m := range fp8FuseRows {
			t.Run(fmt.Sprintf("M=%d/n=%d", m, k), func(t *testing.T) {
				x := bf16Tensor(t, b, r, m, k, 4)
				gate := bf16Tensor(t, b, r, m, k, 6)
				defer b.Free(x, gate)
				run := func(on bool) tensor.Tensor {
					setFP8Fuse(t, on)
					y, err := b.SigmoidGate(x, gate)
					if err != nil {
						t.Fatal(err)
					}
					return y
				}
				checkFused(t, b, "SigmoidGate", w, wg, k <= sigmoidGateE4M3Max, run)
			})
		}
	}
}

// TestFP8FuseQuantizes checks that the FP8 products quantize x where it has no codes: an uploaded x, a column view
// of a normalisation's output (densified: a copy without codes) and F32 outputs, with the bits of the same values
// uploaded; and that no codes are attached on a backend without FP8 weights, with fusion off, to a width not a
// multiple of 16, or after Free.
func TestFP8FuseQuantizes(t *testing.T) {
	b := fuseBackend(t)
	r := newRand(t)
	const m, k = 40, 1024
	w := fuseWeight(t, b, r, 64, k)
	gain := gainTensor(t, b, r, 2*k)
	defer b.Free(gain)
	noCodes := func(what string, x tensor.Tensor) {
		t.Helper()
		if q := x.(*Tensor).q8; q.buf.Ptr != 0 {
			t.Errorf("%s: codes attached", what)
		}
	}
	// product returns MatMul(x, w) with fusion on, and the same product of x's values uploaded.
	product := func(what string, x tensor.Tensor) {
		t.Helper()
		yt, err := b.MatMul(x, w)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(yt)
		vals := hostOf(t, b, x)
		bits := make([]uint16, len(vals))
		for i, v := range vals {
			bits[i] = half.BF16FromF32(v)
		}
		xs := x.Shape()
		up, err := b.FromBits(tensor.BF16, xs, bits)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(up)
		noCodes(what+" uploaded", up)
		want, err := b.MatMul(up, w)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free(want)
		got, ref := hostOf(t, b, yt), hostOf(t, b, want)
		if i := sameBits(got, ref); i >= 0 {
			t.Errorf("%s: element %d = %g, %g from the same values uploaded", what, i, got[i], ref[i])
		}
	}

	x := bf16Tensor(t, b, r, m, k, 2)
	defer b.Free(x)
	noCodes("an uploaded x", x)
	product("an uploaded x", x)

	// a view of a normalised [m, 2k]: its halves read as copies, without codes
	wide := bf16Tensor(t, b, r, m, 2*k, 2)
	y, err := b.RMSNorm(wide, gain, 1e-6, true)
	b.Free(wide)
	if err != nil {
		t.Fatal(err)
	}
	if y.(*Tensor).q8.buf.Ptr == 0 {
		t.Fatal("RMSNorm on a backend with FP8 weights: no codes attached")
	}
	halves, err := b.SplitCols(y, k, k)
	if err != nil {
		t.Fatal(err)
	}
	b.Free(y)
	if y.(*Tensor).q8.buf.Ptr != 0 {
		t.Error("a freed tensor keeps its codes")
	}
	for i, h := range halves {
		noCodes(fmt.Sprintf("SplitCols half %d", i), h)
		product(fmt.Sprintf("SplitCols half %d", i), h)
		if d := h.(*Tensor).dense; d == nil || d.q8.buf.Ptr != 0 {
			t.Errorf("SplitCols half %d: dense copy %v, want one without codes", i, d)
		}
	}
	b.Free(halves...)

	// F32 rows: an F32 result, no codes
	x32, err := b.FromFloat32([]int{m, k}, randVals(r, m*k, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(x32)
	y32, err := b.RMSNorm(x32, gain32(t, b, r, k), 1e-6, false)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free(y32)
	noCodes("an F32 RMSNorm", y32)

	// fusion off; a width not a multiple of 16
	setFP8Fuse(t, false)
	yOff, err := b.RMSNorm(x, gain32(t, b, r, k), 1e-6, false)
	if err != nil {
		t.Fatal(err)
	}
	noCodes("RMSNorm with fusion off", yOff)
	b.Free(yOff)
	setFP8Fuse(t, true)
	x24 := bf16Tensor(t, b, r, m, 24, 2)
	defer b.Free(x24)
	y24, err := b.RMSNorm(x24, gain32(t, b, r, 24), 1e-6, false)
	if err != nil {
		t.Fatal(err)
	}
	noCodes("RMSNorm 24 wide", y24)
	b.Free(y24)

	// a backend without FP8 weights
	plain := NewOn(dev)
	defer plain.Trim()
	px, err := plain.FromBits(tensor.BF16, []int{m, k}, randBF16(r, m*k, 2))
	if err != nil {
		t.Fatal(err)
	}
	pg, err := plain.FromFloat32([]int{k}, randVals(r, k, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	py, err := plain.RMSNorm(px, pg, 1e-6, true)
	if err != nil {
		t.Fatal(err)
	}
	noCodes("RMSNorm on a backend without FP8 weights", py)
	plain.Free(px, pg, py)
}

// gain32 uploads n random fp32 gains, freed with the test.
func gain32(t *testing.T, b *Backend, r *rand.Rand, n int) tensor.Tensor {
	t.Helper()
	g := gainTensor(t, b, r, n)
	t.Cleanup(func() { b.Free(g) })
	return g
}

// fuseConfigs are the models of TestFP8FuseForward: four layers of Kev-4B's shape (three DeltaNet, one attention;
// d = 2560, 32 value heads of 128) and invariantConfigs' wide model (d = 512, value heads of 128).
func fuseConfigs() map[string]qwen35.Config {
	lin, full := qwen35.LinearAttention, qwen35.FullAttention
	return map[string]qwen35.Config{
		"kev4b-4": {HiddenSize: 2560, NumLayers: 4, IntermediateSize: 9216, VocabSize: 1024, RMSNormEps: 1e-6,
			LayerTypes: []qwen35.LayerType{lin, lin, lin, full},
			NumHeads:   16, NumKVHeads: 4, HeadDim: 256, RopeTheta: 1e7, PartialRotaryFactor: 0.25, AttnOutputGate: true,
			LinearNumKeyHeads: 16, LinearNumValueHeads: 32, LinearKeyHeadDim: 128, LinearValueHeadDim: 128, LinearConvKernel: 4},
		"wide": invariantConfigs()["wide"],
	}
}

// TestFP8FuseForward runs models loaded with FP8 products (layers.Options.FP8) on a new state and question rows
// continuing it, and on the rows against the kept state, with fusion on and off: the final hidden states must be
// the same bits, and fusion must save launches (the quantizations of the normalisations' outputs).
func TestFP8FuseForward(t *testing.T) {
	r := newRand(t)
	for name, c := range fuseConfigs() {
		t.Run(name, func(t *testing.T) {
			b := fuseBackend(t)
			m, err := layers.NewWith(b, modelWeights(r, c), layers.Options{FP8: true})
			if err != nil {
				t.Fatal(err)
			}
			if kept := m.KeptBF16(); len(kept) > 0 {
				t.Logf("product weights kept in bf16: %s", strings.Join(kept, ", "))
			}
			text := randomIDs(r, 300, c.VocabSize)
			var rows [][]int32
			for _, n := range []int{1, 7, 40} {
				rows = append(rows, randomIDs(r, n, c.VocabSize))
			}
			d := c.HiddenSize
			pass := func(on bool) ([][]float32, int64) {
				setFP8Fuse(t, on)
				l0 := dev.Stats().Launches
				bt := &layers.Batch{New: []layers.NewState{{IDs: text, Keep: true}}}
				for _, row := range rows {
					bt.Rows = append(bt.Rows, layers.Row{IDs: row})
				}
				first, states := hiddenRows(t, b, m, bt, d)
				cached := &layers.Batch{}
				for _, row := range rows {
					cached.Rows = append(cached.Rows, layers.Row{IDs: row, Cached: states[0]})
				}
				again, _ := hiddenRows(t, b, m, cached, d)
				for _, s := range states {
					s.Free()
				}
				return append(first, again...), dev.Stats().Launches - l0
			}
			off, lOff := pass(false)
			on, lOn := pass(true)
			for i := range off {
				if j := sameBits(on[i], off[i]); j >= 0 {
					t.Fatalf("row set %d: hidden element %d = %g with fusion on, %g off", i, j, on[i][j], off[i][j])
				}
			}
			if lOn >= lOff {
				t.Errorf("%d launches with fusion on, %d off: want fewer on", lOn, lOff)
			}
			t.Logf("launches: %d with fusion, %d without", lOn, lOff)
		})
	}
}
