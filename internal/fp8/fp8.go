// Package fp8 converts between float32 and the 8-bit float format FP8 E4M3
// (OCP FP8 E4M3FN, the E4M3 of NVIDIA's tensor cores), quantizes matrices to
// it with one float32 scale per row, and multiplies quantized matrices the
// way the GPU kernels do, as the reference those kernels are checked against.
//
// E4M3 code S.EEEE.MMM: sign S, exponent E with bias 7, mantissa M of 3 bits.
// E = 1…15 is the normal value ±2^(E−7)·(1 + M/8); E = 0 the subnormal value
// ±M·2^−9. There are no infinities: S.1111.111 (0x7F, 0xFF) is NaN, and the
// largest finite magnitude is 0x7E = 448. The smallest positive value is
// 2^−9 (0x01), the smallest normal 2^−6 (0x08).
package fp8

import (
	"fmt"
	"math"
	"runtime"
	"sync"
)

// Max is the largest finite E4M3 magnitude.
const Max = 448

// NaN is the positive E4M3 NaN code (0xFF is the negative one).
const NaN uint8 = 0x7F

// FromFloat32 rounds f to the nearest E4M3 value, ties to even, and returns
// its code. Magnitudes above 448, infinities included, saturate to ±448 (as
// the GPU's cvt.rn.satfinite.e4m3x2.f32 does); magnitudes up to 2^−10 round
// to ±0 (2^−10 itself is the tie between 0 and 2^−9, which goes to 0). NaN
// stays NaN: the result is 0x7F or 0xFF, the input's sign kept.
func FromFloat32(f float32) uint8 {
	b := math.Float32bits(f)
	s := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return s | NaN
	case a > 0x43e00000: // above 448 (0x43e00000), infinities too
		return s | 0x7E
	case a >= 0x3c800000: // 2^−6 and up: normal; rebias the exponent (127 → 7), round 20 mantissa bits away
		v := a - 120<<23
		v += 0x7ffff + (v>>20)&1
		return s | uint8(v>>20) // a carry out of the mantissa steps the exponent up, as it should
	}
	// below 2^−6: the value in units of 2^−9 is mant·2^(E−150+9), a right shift of 141 − E ≥ 21 bits
	e := a >> 23
	if e < 116 { // below 2^−11 (float32 subnormals and zero too): rounds to 0
		return s
	}
	mant := a&0x7fffff | 1<<23
	sh := 141 - e
	q := mant >> sh
	rem, half := mant&(1<<sh-1), uint32(1)<<(sh-1)
	if rem > half || (rem == half && q&1 == 1) {
		q++ // to 8 at most: 0x08, the smallest normal
	}
	return s | uint8(q)
}

// decode is the float32 value of every code.
var decode = func() (t [256]float32) {
	for c := range t {
		s, e, m := c>>7, c>>3&15, c&7
		var v float32
		switch {
		case e == 15 && m == 7:
			t[c] = math.Float32frombits(uint32(s)<<31 | 0x7fc00000)
			continue
		case e == 0:
			v = float32(m) / 512
		default:
			v = float32(math.Ldexp(1+float64(m)/8, e-7))
		}
		if s == 1 {
			v = -v
		}
		t[c] = v
	}
	return t
}()

// ToFloat32 returns the value of E4M3 code c, exactly (every E4M3 value is a
// float32). The NaN codes give a quiet float32 NaN with their sign.
func ToFloat32(c uint8) float32 { return decode[c] }

// NonFiniteError reports a NaN or infinite value in a matrix being
// quantized, which no scale can represent.
type NonFiniteError struct {
	Row, Col int
	Value    float32
}

// Error names the element and its value.
func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("fp8: element [%d, %d] is %v: only finite values can be quantized", e.Row, e.Col, e.Value)
}

// ShapeError reports a matrix whose data does not fit its dimensions.
type ShapeError struct {
	Rows, Cols int
	Len        int // elements given
}

// Error names the dimensions and the data's length.
func (e *ShapeError) Error() string {
	if e.Rows < 0 || e.Cols < 0 {
		return fmt.Sprintf("fp8: dimensions %d × %d are negative", e.Rows, e.Cols)
	}
	return fmt.Sprintf("fp8: a %d × %d matrix needs %d elements, got %d", e.Rows, e.Cols, e.Rows*e.Cols, e.Len)
}

func checkShape(rows, cols, n int) error {
	if rows < 0 || cols < 0 || (cols > 0 && rows > math.MaxInt/cols) || rows*cols != n {
		return &ShapeError{Rows: rows, Cols: cols, Len: n}
	}
	return nil
}

// RowScale is the scale of a row whose largest magnitude is absmax (≥ 0, not
// NaN): absmax/448 in float32, so that the row's largest element maps to
// ±448; or 1 when that is 0 — a zero row, or one whose magnitudes are all
// below 448·2^−150, which then quantizes to ±0 (every value so small rounds to
// 0 in E4M3). An infinite absmax gives an infinite scale. The GPU's
// quant_rows_e4m3 computes the same float32 division.
func RowScale(absmax float32) float32 {
	s := absmax / Max
	if s == 0 {
		return 1
	}
	return s
}

// quantizeRow writes the codes of row x with scale s: FromFloat32(x[c] / s),
// a float32 division rounded to nearest.
func quantizeRow(q []uint8, x []float32, s float32) {
	for c, v := range x {
		q[c] = FromFloat32(v / s)
	}
}

// QuantizeRows quantizes a weight matrix w [n, k] (row-major) to E4M3 with
// one scale per row (output channel): scale[r] = RowScale(max over c of
// |w[r, c]|) and q[r·k + c] = FromFloat32(w[r, c] / scale[r]), so that
// w[r, c] ≈ ToFloat32(q[r·k + c]) · scale[r]. A NaN or infinite element is a
// *NonFiniteError naming its row and column; data that does not fit n × k a
// *ShapeError.
func QuantizeRows(w []float32, n, k int) (q []uint8, scale []float32, err error) {
	if err := checkShape(n, k, len(w)); err != nil {
		return nil, nil, err
	}
	q = make([]uint8, len(w))
	scale = make([]float32, n)
	if err := quantizeRows(q, scale, w, k, 0, n); err != nil {
		return nil, nil, err
	}
	return q, scale, nil
}

// quantizeRows quantizes rows [lo, hi) of w (k columns) into q and scale, by QuantizeRows' rule; the first
// non-finite element of those rows, in row-major order, is a *NonFiniteError.
func quantizeRows(q []uint8, scale, w []float32, k, lo, hi int) error {
	for r := lo; r < hi; r++ {
		row := w[r*k : r*k+k]
		var m uint32 // the largest magnitude's bits: non-negative floats order as their bits do
		for c, v := range row {
			a := math.Float32bits(v) &^ (1 << 31)
			if a >= 0x7f800000 {
				return &NonFiniteError{Row: r, Col: c, Value: v}
			}
			m = max(m, a)
		}
		scale[r] = RowScale(math.Float32frombits(m))
		quantizeRow(q[r*k:r*k+k], row, scale[r])
	}
	return nil
}

// minParallel is the fewest elements QuantizeRowsParallel gives one goroutine: below it, starting goroutines
// costs more than it saves.
const minParallel = 1 << 16

// QuantizeRowsParallel is QuantizeRows with the rows split into contiguous blocks quantized by up to workers
// goroutines at once (workers ≤ 0: GOMAXPROCS). Every row is quantized by itself, so the codes and scales are
// QuantizeRows' bit for bit, and so is the error: of several non-finite elements, the first in row-major order
// is reported.
func QuantizeRowsParallel(w []float32, n, k, workers int) (q []uint8, scale []float32, err error) {
	if err := checkShape(n, k, len(w)); err != nil {
		return nil, nil, err
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	blocks := min(workers, n, max(1, len(w)/minParallel))
	if blocks <= 1 {
		return QuantizeRows(w, n, k)
	}
	q = make([]uint8, len(w))
	scale = make([]float32, n)
	errs := make([]error, blocks)
	var wg sync.WaitGroup
	for b := range blocks {
		lo, hi := b*n/blocks, (b+1)*n/blocks
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[b] = quantizeRows(q, scale, w, k, lo, hi)
		}()
	}
	wg.Wait()
	for _, err := range errs { // the first block's error is the first element's
		if err != nil {
			return nil, nil, err
		}
	}
	return q, scale, nil
}

// QuantizeActivations quantizes an activation matrix x [m, k] with a dynamic
// scale per row (token), by QuantizeRows' rule, exactly as the GPU's
// quant_rows_e4m3 does; the only error is a *ShapeError. Non-finite values
// are not refused, so that they reach the product as the GPU would pass them
// on: a row's largest magnitude ignores NaN (a row of NaN has scale 1), a NaN
// element becomes a NaN code, and an infinite element makes the row's scale
// infinite, its other codes ±0 and its own a NaN code (∞/∞, whose sign the
// hardware chooses) — either way the row's products are NaN.
func QuantizeActivations(x []float32, m, k int) (q []uint8, scale []float32, err error) {
	if err := checkShape(m, k, len(x)); err != nil {
		return nil, nil, err
	}
	q = make([]uint8, len(x))
	scale = make([]float32, m)
	for r := 0; r < m; r++ {
		row := x[r*k : r*k+k]
		var a uint32 // as in QuantizeRows
		for _, v := range row {
			if b := math.Float32bits(v) &^ (1 << 31); b <= 0x7f800000 { // NaN skipped, as fmaxf skips it
				a = max(a, b)
			}
		}
		scale[r] = RowScale(math.Float32frombits(a))
		quantizeRow(q[r*k:r*k+k], row, scale[r])
	}
	return q, scale, nil
}

// Dequantize returns the float32 matrix [n, k] that codes q with row scales
// scale stand for: ToFloat32(q[r·k + c]) · scale[r], rounded to float32.
func Dequantize(q []uint8, scale []float32, n, k int) ([]float32, error) {
	if err := checkShape(n, k, len(q)); err != nil {
		return nil, err
	}
	if len(scale) != n {
		return nil, &ShapeError{Rows: n, Cols: 1, Len: len(scale)}
	}
	out := make([]float32, len(q))
	for r := 0; r < n; r++ {
		for c := 0; c < k; c++ {
			out[r*k+c] = decode[q[r*k+c]] * scale[r]
		}
	}
	return out, nil
}

// RoundRows returns the values weight w [n, k] stands for once quantized
// per row: Dequantize of QuantizeRowsParallel's codes and scales, with its
// errors. A backend without FP8 products computes with these to do the FP8
// weights' arithmetic in float32.
func RoundRows(w []float32, n, k int) ([]float32, error) {
	q, s, err := QuantizeRowsParallel(w, n, k, 0)
	if err != nil {
		return nil, err
	}
	return Dequantize(q, s, n, k)
}

// MatMulFP8 is the product of quantized matrices that the GPU's FP8 GEMM
// computes: y [m, n] with y[i, j] = S·(xs[i]·ws[j]), where
// S = Σ_c ToFloat32(xq[i·k + c])·ToFloat32(wq[j·k + c]) summed in float32 in
// order of c (each product of two E4M3 values is exact in float32). xq, xs
// are the activations [m, k] and their row scales (QuantizeActivations), wq,
// ws the weights [n, k] and theirs (QuantizeRows). It returns nil when the
// slices do not fit m, n, k.
//
// The GPU sums in its own order (the tensor cores' products and adds within a
// step of k, fp32 adds between steps) and rounds y to bf16, so its results
// agree with these to within those roundings, not bit for bit.
func MatMulFP8(xq []uint8, xs []float32, wq []uint8, ws []float32, m, n, k int) []float32 {
	if checkShape(m, k, len(xq)) != nil || checkShape(n, k, len(wq)) != nil || len(xs) != m || len(ws) != n {
		return nil
	}
	y := make([]float32, m*n)
	xf := make([]float32, k)
	for i := 0; i < m; i++ {
		for c := range xf {
			xf[c] = decode[xq[i*k+c]]
		}
		for j := 0; j < n; j++ {
			w := wq[j*k : j*k+k]
			var s float32
			for c, x := range xf {
				s += x * decode[w[c]]
			}
			y[i*n+j] = s * (xs[i] * ws[j])
		}
	}
	return y
}
