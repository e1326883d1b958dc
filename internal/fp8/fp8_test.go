package fp8

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// nearest is FromFloat32 the slow way: the code of the finite E4M3 value nearest f, ties to the even code,
// magnitudes above 448 to ±448, NaN to the NaN code of f's sign.
func nearest(f float32) uint8 {
	s := uint8(0)
	if math.Signbit(float64(f)) {
		s = 0x80
	}
	if f != f {
		return s | NaN
	}
	a := math.Abs(float64(f))
	best, bestD := uint8(0), math.Inf(1)
	for c := uint8(0); c <= 0x7E; c++ {
		d := math.Abs(float64(ToFloat32(c)) - a)
		if d < bestD || (d == bestD && c&1 == 0) {
			best, bestD = c, d
		}
	}
	return s | best
}

func TestToFloat32(t *testing.T) {
	cases := []struct {
		code uint8
		want float32
	}{
		{0x00, 0},
		{0x01, 1.0 / 512},       // smallest subnormal, 2^−9
		{0x07, 7.0 / 512},       // largest subnormal
		{0x08, 1.0 / 64},        // smallest normal, 2^−6
		{0x38, 1},               // exponent 7 = bias
		{0x3C, 1.5},             // mantissa 4/8
		{0x77, 240},             // 2^7·1.875
		{0x78, 256},             // exponent 15, mantissa 0: the top binade is finite
		{0x7E, 448},             // largest finite
		{0xB8, -1},              // sign
		{0xFE, -448},            // most negative
		{0x81, -1.0 / 512},      // negative subnormal
		{0x4A, 5},               // 2^2·1.25
		{0x2B, 0.5 * 1.375 / 2}, // 2^(5−7)·1.375
	}
	for _, c := range cases {
		if got := ToFloat32(c.code); got != c.want {
			t.Errorf("ToFloat32(%#02x) = %v, want %v", c.code, got, c.want)
		}
	}
	if z := ToFloat32(0x80); z != 0 || !math.Signbit(float64(z)) {
		t.Errorf("ToFloat32(0x80) = %v, want −0", z)
	}
	for _, c := range []uint8{0x7F, 0xFF} {
		v := ToFloat32(c)
		if v == v {
			t.Errorf("ToFloat32(%#02x) = %v, want NaN", c, v)
		}
		if math.Signbit(float64(v)) != (c&0x80 != 0) {
			t.Errorf("ToFloat32(%#02x) has the wrong sign", c)
		}
	}
}

// TestRoundTripAllCodes decodes every one of the 256 codes and encodes the value again: the same code, ±0 and
// both NaNs included; and the finite values increase with the code.
func TestRoundTripAllCodes(t *testing.T) {
	for c := 0; c < 256; c++ {
		if got := FromFloat32(ToFloat32(uint8(c))); got != uint8(c) {
			t.Errorf("FromFloat32(ToFloat32(%#02x) = %v) = %#02x", c, ToFloat32(uint8(c)), got)
		}
	}
	for c := uint8(0); c < 0x7E; c++ {
		if !(ToFloat32(c) < ToFloat32(c+1)) {
			t.Errorf("ToFloat32(%#02x) = %v is not below ToFloat32(%#02x) = %v", c, ToFloat32(c), c+1, ToFloat32(c+1))
		}
	}
}

// TestMidpoints encodes the midpoint of every two neighbouring finite values (exact in float32): ties go to the
// even code; a float32 step either side goes to the nearer value. Both signs.
func TestMidpoints(t *testing.T) {
	for c := uint8(0); c < 0x7E; c++ {
		lo, hi := ToFloat32(c), ToFloat32(c+1)
		mid := (lo + hi) / 2
		if float64(mid) != (float64(lo)+float64(hi))/2 {
			t.Fatalf("midpoint of %v and %v is not exact in float32", lo, hi)
		}
		even := c
		if c&1 == 1 {
			even = c + 1
		}
		below := math.Nextafter32(mid, 0)
		above := math.Nextafter32(mid, 1e9)
		for _, s := range []float32{1, -1} {
			sb := uint8(0)
			if s < 0 {
				sb = 0x80
			}
			for _, tc := range []struct {
				in   float32
				want uint8
			}{{s * mid, sb | even}, {s * below, sb | c}, {s * above, sb | (c + 1)}} {
				if got := FromFloat32(tc.in); got != tc.want {
					t.Errorf("FromFloat32(%v) = %#02x, want %#02x (between %#02x and %#02x)", tc.in, got, tc.want, c, c+1)
				}
			}
		}
	}
}

func TestSaturateAndTiny(t *testing.T) {
	inf := float32(math.Inf(1))
	cases := []struct {
		in   float32
		want uint8
	}{
		{448, 0x7E},
		{math.Nextafter32(448, 1e9), 0x7E},
		{464, 0x7E}, // the tie with 480, which does not exist: saturates
		{480, 0x7E},
		{1e6, 0x7E},
		{math.MaxFloat32, 0x7E},
		{inf, 0x7E},
		{-449, 0xFE},
		{-inf, 0xFE},
		{0, 0x00},
		{float32(math.Copysign(0, -1)), 0x80},
		{1.0 / 1024, 0x00}, // 2^−10: the tie between 0 and 2^−9, to 0
		{-1.0 / 1024, 0x80},
		{math.Nextafter32(1.0/1024, 1), 0x01},
		{math.Nextafter32(-1.0/1024, -1), 0x81},
		{1.0 / 2048, 0x00},
		{math.SmallestNonzeroFloat32, 0x00},
		{-math.SmallestNonzeroFloat32, 0x80},
		{3.0 / 1024, 0x02},  // the tie between 2^−9 and 2·2^−9, to the even code
		{15.0 / 1024, 0x08}, // the tie between the largest subnormal and the smallest normal
		{math.Nextafter32(1.0/64, 0), 0x08},
		{0.3, 0x2A}, // 0.3 lies between 0.28125 (0x29) and 0.3125 (0x2A), nearer the second
		{float32(math.NaN()), NaN},
		{float32(math.Copysign(math.NaN(), -1)), 0xFF},
		{math.Float32frombits(0x7f800001), NaN}, // signalling NaN payload
	}
	for _, c := range cases {
		if got := FromFloat32(c.in); got != c.want {
			t.Errorf("FromFloat32(%v [%#08x]) = %#02x, want %#02x", c.in, math.Float32bits(c.in), got, c.want)
		}
	}
}

// TestFromFloat32Nearest checks FromFloat32 against the exhaustive nearest-value search on values of every
// magnitude E4M3 distinguishes, and a sweep of float32 bit patterns around each code.
func TestFromFloat32Nearest(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		f := float32(r.NormFloat64() * math.Ldexp(1, r.IntN(30)-15))
		if got, want := FromFloat32(f), nearest(f); got != want {
			t.Fatalf("FromFloat32(%v [%#08x]) = %#02x, want %#02x", f, math.Float32bits(f), got, want)
		}
	}
	for c := 0; c < 0x7F; c++ {
		b := math.Float32bits(ToFloat32(uint8(c)))
		for d := -300; d <= 300; d++ {
			f := math.Float32frombits(b + uint32(d)<<12)
			if got, want := FromFloat32(f), nearest(f); got != want {
				t.Fatalf("FromFloat32(%v [%#08x]) = %#02x, want %#02x", f, math.Float32bits(f), got, want)
			}
		}
	}
}

func FuzzFromFloat32(f *testing.F) {
	for _, b := range []uint32{0, 0x80000000, 0x3f800000, 0x43e00000, 0x43e80000, 0x3a800000, 0x3c800000, 0x7f800000, 0x7fc00000, 1} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b uint32) {
		v := math.Float32frombits(b)
		c := FromFloat32(v)
		if want := nearest(v); c != want {
			t.Fatalf("FromFloat32(%v [%#08x]) = %#02x, want %#02x", v, b, c, want)
		}
		if back := FromFloat32(ToFloat32(c)); back != c {
			t.Fatalf("code %#02x from %v does not survive decode and encode: %#02x", c, v, back)
		}
		if v == v && !math.IsInf(float64(v), 0) && math.Abs(float64(v)) <= Max {
			// the decoded value is within half a step of the input
			d := math.Abs(float64(ToFloat32(c)) - float64(v))
			step := math.Max(math.Ldexp(1, -9), math.Ldexp(math.Abs(float64(v)), -3))
			if d > step/2 {
				t.Fatalf("FromFloat32(%v) = %#02x = %v: off by %g, more than half a step %g", v, c, ToFloat32(c), d, step)
			}
		}
	})
}

func TestQuantizeRows(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name  string
		w     []float32
		n, k  int
		scale []float32
		q     []uint8
		err   error
	}{
		{name: "empty", w: nil, n: 0, k: 5, scale: []float32{}, q: []uint8{}},
		{name: "max maps to 448", w: []float32{448, -224, 1, 0.5, -0.25, 0}, n: 2, k: 3,
			scale: []float32{1, 0.5 / 448}, q: []uint8{0x7E, 0xF6, 0x38, 0x7E, 0xF6, 0x00}},
		{name: "zero row", w: []float32{0, 0, 0, 1, 2, 4}, n: 2, k: 3,
			scale: []float32{1, 4.0 / 448}, q: []uint8{0, 0, 0, 0x6E, 0x76, 0x7E}},
		{name: "negative zero row", w: []float32{float32(math.Copysign(0, -1)), 0}, n: 1, k: 2,
			scale: []float32{1}, q: []uint8{0x80, 0x00}},
		{name: "scale underflows", w: []float32{1e-43, -1e-44}, n: 1, k: 2, scale: []float32{1}, q: []uint8{0, 0x80}},
		{name: "length", w: make([]float32, 5), n: 2, k: 3, err: &ShapeError{2, 3, 5}},
		{name: "negative", w: nil, n: -1, k: 0, err: &ShapeError{-1, 0, 0}},
		{name: "NaN", w: []float32{1, 2, 3, 4, 5, nan}, n: 2, k: 3, err: &NonFiniteError{1, 2, nan}},
		{name: "Inf", w: []float32{1, 2, -inf, 4}, n: 2, k: 2, err: &NonFiniteError{1, 0, -inf}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, s, err := QuantizeRows(c.w, c.n, c.k)
			if c.err != nil {
				switch want := c.err.(type) {
				case *NonFiniteError:
					var e *NonFiniteError
					if !errors.As(err, &e) || e.Row != want.Row || e.Col != want.Col {
						t.Fatalf("error %v, want a NonFiniteError at [%d, %d]", err, want.Row, want.Col)
					}
				case *ShapeError:
					var e *ShapeError
					if !errors.As(err, &e) || *e != *want {
						t.Fatalf("error %v, want %v", err, want)
					}
				}
				if q != nil || s != nil {
					t.Errorf("results beside an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s) != len(c.scale) || len(q) != len(c.q) {
				t.Fatalf("got %d scales and %d codes, want %d and %d", len(s), len(q), len(c.scale), len(c.q))
			}
			for i := range s {
				if s[i] != c.scale[i] {
					t.Errorf("scale[%d] = %v, want %v", i, s[i], c.scale[i])
				}
			}
			for i := range q {
				if q[i] != c.q[i] {
					t.Errorf("q[%d] = %#02x, want %#02x", i, q[i], c.q[i])
				}
			}
		})
	}
}

// randMatrix returns n × k values whose rows have magnitudes from 2^−12 to 2^12 and a few exact zeros.
func randMatrix(r *rand.Rand, n, k int) []float32 {
	w := make([]float32, n*k)
	for i := 0; i < n; i++ {
		mag := math.Ldexp(1, r.IntN(25)-12)
		for j := 0; j < k; j++ {
			if r.IntN(50) == 0 {
				continue
			}
			w[i*k+j] = float32(r.NormFloat64() * mag)
		}
	}
	return w
}

// TestQuantizeRowsError checks the quantization error of random rows of varied magnitude: the largest element of
// a row maps to ±448, and every element is within half an E4M3 step of its dequantized value (relative 2^−4 for
// normal codes, 2^−10·scale below them), allowing float32's rounding of the division and of the dequantization.
func TestQuantizeRowsError(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n, k = 64, 300
	w := randMatrix(r, n, k)
	q, s, err := QuantizeRows(w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	dq, err := Dequantize(q, s, n, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		var m float32
		for j := 0; j < k; j++ {
			m = max(m, float32(math.Abs(float64(w[i*k+j]))))
		}
		if s[i] != m/448 {
			t.Fatalf("row %d: scale %v, want %v/448", i, s[i], m)
		}
		top := false
		for j := 0; j < k; j++ {
			x, y := float64(w[i*k+j]), float64(dq[i*k+j])
			bound := math.Max(math.Abs(x)*0x1p-4, float64(s[i])*0x1p-10)*(1+0x1p-20) + math.Abs(x)*0x1p-22
			if math.Abs(x-y) > bound {
				t.Fatalf("[%d, %d]: %v dequantizes to %v (code %#02x, scale %v), off by more than %g", i, j, x, y, q[i*k+j], s[i], bound)
			}
			top = top || q[i*k+j]&0x7F == 0x7E
		}
		if !top {
			t.Errorf("row %d: no element at ±448", i)
		}
	}
}

// TestQuantizeActivations checks that activations quantize as weights do where every value is finite, and the
// documented handling of NaN and infinities.
func TestQuantizeActivations(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const m, k = 40, 96
	x := randMatrix(r, m, k)
	q1, s1, err := QuantizeRows(x, m, k)
	if err != nil {
		t.Fatal(err)
	}
	q2, s2, err := QuantizeActivations(x, m, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := range s1 {
		if s1[i] != s2[i] {
			t.Fatalf("scale[%d]: %v from QuantizeRows, %v from QuantizeActivations", i, s1[i], s2[i])
		}
	}
	for i := range q1 {
		if q1[i] != q2[i] {
			t.Fatalf("code %d: %#02x from QuantizeRows, %#02x from QuantizeActivations", i, q1[i], q2[i])
		}
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name  string
		row   []float32
		scale float32
		q     []uint8
	}{
		{"NaN skipped by the maximum", []float32{nan, 224, -448}, 1, []uint8{NaN, 0x76, 0xFE}},
		{"all NaN", []float32{nan, nan}, 1, []uint8{NaN, NaN}},
		{"Inf", []float32{inf, 3, -5}, inf, []uint8{NaN, 0x00, 0x80}},
	}
	for _, c := range cases {
		q, s, err := QuantizeActivations(c.row, 1, len(c.row))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if s[0] != c.scale {
			t.Errorf("%s: scale %v, want %v", c.name, s[0], c.scale)
		}
		for i := range q {
			if q[i] != c.q[i] && !(q[i]&0x7F == NaN && c.q[i] == NaN) { // a NaN the division makes: either sign
				t.Errorf("%s: q[%d] = %#02x, want %#02x", c.name, i, q[i], c.q[i])
			}
		}
	}
	if _, _, err := QuantizeActivations(make([]float32, 3), 2, 2); err == nil {
		t.Error("no error for 3 values as 2 × 2")
	}
}

func TestMatMulFP8(t *testing.T) {
	// x = [[1, 2], [0.5, -448]] (scales 1), w = [[1, 1], [3, -0.25]] (scales 2 and 0.5)
	xq := []uint8{FromFloat32(1), FromFloat32(2), FromFloat32(0.5), FromFloat32(-448)}
	wq := []uint8{FromFloat32(1), FromFloat32(1), FromFloat32(3), FromFloat32(-0.25)}
	y := MatMulFP8(xq, []float32{1, 1}, wq, []float32{2, 0.5}, 2, 2, 2)
	want := []float32{(1 + 2) * 2, (3 - 0.5) * 0.5, (0.5 - 448) * 2, (1.5 + 112) * 0.5}
	for i := range want {
		if y[i] != want[i] {
			t.Errorf("y[%d] = %v, want %v", i, y[i], want[i])
		}
	}
	if MatMulFP8(xq, []float32{1}, wq, []float32{2, 0.5}, 2, 2, 2) != nil {
		t.Error("a result for a scale vector of the wrong length")
	}
	if MatMulFP8(xq, []float32{1, 1}, wq, []float32{2, 0.5}, 2, 2, 3) != nil {
		t.Error("a result for a k the operands do not have")
	}

	// Random operands: the reference is the float64 product of the dequantized matrices to within float32's
	// rounding of the sum.
	r := rand.New(rand.NewPCG(9, 10))
	const m, n, k = 7, 9, 333
	x := randMatrix(r, m, k)
	w := randMatrix(r, n, k)
	xq, xs, _ := QuantizeActivations(x, m, k)
	wq, ws, _ := QuantizeRows(w, n, k)
	y = MatMulFP8(xq, xs, wq, ws, m, n, k)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, a float64
			for c := 0; c < k; c++ {
				p := float64(ToFloat32(xq[i*k+c])) * float64(ToFloat32(wq[j*k+c]))
				s += p
				a += math.Abs(p)
			}
			sc := float64(xs[i]) * float64(ws[j])
			if d := math.Abs(float64(y[i*n+j]) - s*sc); d > (a*k*0x1p-24+math.Abs(s)*0x1p-22)*sc {
				t.Errorf("y[%d, %d] = %v, the float64 product is %v", i, j, y[i*n+j], s*sc)
			}
		}
	}
}

func BenchmarkFromFloat32(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, 4096)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 100)
	}
	b.SetBytes(4 * int64(len(x)))
	var sink uint8
	for b.Loop() {
		for _, v := range x {
			sink ^= FromFloat32(v)
		}
	}
	_ = sink
}

// BenchmarkQuantizeRows quantizes a Kev-4B MLP projection's worth of rows ([1024, 2560]).
func BenchmarkQuantizeRows(b *testing.B) {
	const n, k = 1024, 2560
	w := randMatrix(rand.New(rand.NewPCG(1, 2)), n, k)
	b.SetBytes(4 * n * k)
	for b.Loop() {
		if _, _, err := QuantizeRows(w, n, k); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQuantizeActivations quantizes 240 tokens of a 2,560-wide hidden state.
func BenchmarkQuantizeActivations(b *testing.B) {
	const m, k = 240, 2560
	x := randMatrix(rand.New(rand.NewPCG(1, 3)), m, k)
	b.SetBytes(4 * m * k)
	for b.Loop() {
		if _, _, err := QuantizeActivations(x, m, k); err != nil {
			b.Fatal(err)
		}
	}
}

// TestQuantizeRowsParallel checks that QuantizeRowsParallel's codes, scales and errors are QuantizeRows', bit for
// bit, however many goroutines split the rows (matrices big enough to be split into that many blocks, and small
// ones that are not split at all).
func TestQuantizeRowsParallel(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	nan, inf := float32(math.NaN()), float32(math.Inf(-1))
	big := randMatrix(r, 1031, 512) // 1031 rows: blocks of unequal sizes
	twoBad := append([]float32(nil), big...)
	twoBad[900*512+3] = inf   // a late block's...
	twoBad[200*512+511] = nan // ...and an earlier one's: the earlier is reported
	cases := []struct {
		name    string
		w       []float32
		n, k    int
		workers []int
	}{
		{"big", big, 1031, 512, []int{0, 1, 2, 3, 7, 64}},
		{"small", randMatrix(r, 8, 16), 8, 16, []int{0, 4}},
		{"one row", randMatrix(r, 1, minParallel*2), 1, minParallel * 2, []int{4}},
		{"empty", nil, 0, 16, []int{4}},
		{"two non-finite", twoBad, 1031, 512, []int{2, 7}},
		{"short data", big[:100], 1031, 512, []int{3}},
	}
	for _, c := range cases {
		wq, ws, werr := QuantizeRows(c.w, c.n, c.k)
		for _, workers := range c.workers {
			q, s, err := QuantizeRowsParallel(c.w, c.n, c.k, workers)
			if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Errorf("%s, %d workers: error %v, QuantizeRows' %v", c.name, workers, err, werr)
				continue
			}
			if len(q) != len(wq) || len(s) != len(ws) {
				t.Errorf("%s, %d workers: %d codes and %d scales, QuantizeRows gives %d and %d", c.name, workers, len(q), len(s), len(wq), len(ws))
				continue
			}
			for i := range ws {
				if math.Float32bits(s[i]) != math.Float32bits(ws[i]) {
					t.Fatalf("%s, %d workers: scale[%d] = %v, QuantizeRows' %v", c.name, workers, i, s[i], ws[i])
				}
			}
			for i := range wq {
				if q[i] != wq[i] {
					t.Fatalf("%s, %d workers: q[%d] = %#02x, QuantizeRows' %#02x", c.name, workers, i, q[i], wq[i])
				}
			}
		}
	}
	var e *NonFiniteError
	if _, _, err := QuantizeRowsParallel(twoBad, 1031, 512, 7); !errors.As(err, &e) || e.Row != 200 || e.Col != 511 {
		t.Errorf("two non-finite elements: %v, want the first, [200, 511]", err)
	}
}

// BenchmarkQuantizeRowsParallel is BenchmarkQuantizeRows on GOMAXPROCS goroutines.
func BenchmarkQuantizeRowsParallel(b *testing.B) {
	const n, k = 1024, 2560
	w := randMatrix(rand.New(rand.NewPCG(1, 2)), n, k)
	b.SetBytes(4 * n * k)
	for b.Loop() {
		if _, _, err := QuantizeRowsParallel(w, n, k, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRoundRows: RoundRows is Dequantize of QuantizeRows's codes and scales, bit for bit, and passes on their errors.
func TestRoundRows(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n, k = 9, 48
	w := make([]float32, n*k)
	for i := range w {
		w[i] = float32(r.NormFloat64()) * float32(i%7+1)
	}
	got, err := RoundRows(w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	q, s, err := QuantizeRows(w, n, k)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Dequantize(q, s, n, k)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("value %d: %v, want %v", i, got[i], want[i])
		}
	}
	w[17] = float32(math.Inf(1))
	var nf *NonFiniteError
	if _, err := RoundRows(w, n, k); !errors.As(err, &nf) || nf.Row != 0 || nf.Col != 17 {
		t.Errorf("RoundRows of an infinite weight: %v, want a NonFiniteError at row 0, column 17", err)
	}
}
