package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/backendtest"
)

// plainGo runs f with every assembly kernel switched off.
func plainGo(f func()) {
	fast, wide, mm := useAVX2, useAVX512, gemmKern
	useAVX2, useAVX512, gemmKern = false, false, kernGo
	defer func() { useAVX2, useAVX512, gemmKern = fast, wide, mm }()
	f()
}

// TestConformancePlainGo keeps the Go fallbacks of every kernel covered on
// processors that run the assembly ones.
func TestConformancePlainGo(t *testing.T) {
	plainGo(func() { backendtest.RunAll(t, &Backend{Threads: 2}, tolerance) })
}

func TestMulAddRows(t *testing.T) {
	if !useAVX2 {
		t.Skip("no assembly kernels on this processor")
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 7))
	for _, tc := range [][3]int{{1, 8, 8}, {3, 7, 9}, {5, 64, 64}, {128, 128, 130}, {9, 200, 211}, {2, 77, 77}, {64, 136, 136}} {
		rows, n, ldx := tc[0], tc[1], tc[2]
		for iter := 0; iter < 3; iter++ {
			if iter > 0 {
				rows, n = 1+r.IntN(70), 1+r.IntN(150)
				ldx = n + r.IntN(9)
			}
			y0, x, c := randFloats(r, n), randFloats(r, (rows-1)*ldx+n), randFloats(r, rows)
			y := append([]float32(nil), y0...)
			mulAddRows(y, x, ldx, c)
			for j := range n {
				want, mag := float64(y0[j]), math.Abs(float64(y0[j]))
				for i := range rows {
					p := float64(c[i]) * float64(x[i*ldx+j])
					want += p
					mag += math.Abs(p)
				}
				if !near(y[j], want, mag, 1e-6) {
					t.Fatalf("rows %d n %d ldx %d: y[%d] = %v, want %v", rows, n, ldx, j, y[j], want)
				}
			}
		}
	}
}

// TestDeltaRuleKernelsAgree runs the gated delta rule at the model's head
// sizes (128) with the assembly kernels and with plain Go.
func TestDeltaRuleKernelsAgree(t *testing.T) {
	if !useAVX2 {
		t.Skip("no assembly kernels on this processor")
	}
	b := &Backend{Threads: 2}
	r := rand.New(rand.NewPCG(rand.Uint64(), 9))
	c := tensor.DeltaConfig{KeyHeads: 1, ValueHeads: 2, KeyDim: 128, ValueDim: 128}
	n := 150
	width := 2*c.KeyHeads*c.KeyDim + c.ValueHeads*c.ValueDim
	up := func(shape []int, d []float32) tensor.Tensor {
		x, err := b.FromFloat32(shape, d)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	qkv := up([]int{n, width}, randFloats(r, n*width))
	gs, bs := make([]float32, n*c.ValueHeads), make([]float32, n*c.ValueHeads)
	for i := range gs {
		gs[i] = -0.3 * r.Float32()
		bs[i] = 0.1 + 0.8*r.Float32()
	}
	g, beta := up([]int{n, c.ValueHeads}, gs), up([]int{n, c.ValueHeads}, bs)
	state := up([]int{c.ValueHeads, c.KeyDim, c.ValueDim}, randFloats(r, c.ValueHeads*c.KeyDim*c.ValueDim))
	for _, chunk := range []int{0, 64, 48} {
		c.Chunk = chunk
		run := func() ([]float32, []float32) {
			o, f, err := b.GatedDeltaRule(qkv, g, beta, state, nil, c)
			if err != nil {
				t.Fatal(err)
			}
			oh, _ := b.ToHost(o)
			fh, _ := b.ToHost(f)
			return oh, fh
		}
		o1, f1 := run()
		var o2, f2 []float32
		plainGo(func() { o2, f2 = run() })
		for name, p := range map[string][2][]float32{"out": {o1, o2}, "state": {f1, f2}} {
			var scale float64
			for _, v := range p[1] {
				scale = max(scale, math.Abs(float64(v)))
			}
			for i := range p[0] {
				if !near(p[0][i], float64(p[1][i]), scale, 1e-5) {
					t.Fatalf("chunk %d %s[%d]: assembly %v, Go %v (max |Go| %v)", chunk, name, i, p[0][i], p[1][i], scale)
				}
			}
		}
	}
}

// TestExp512 checks that the AVX-512 exponentials give the AVX2 ones' bits
// at every length up to 40 and over the whole input range, and that
// softmaxShift's maximum and sum agree between the two.
func TestExp512(t *testing.T) {
	if !useAVX512 {
		t.Skip("the processor lacks AVX-512")
	}
	r := rand.New(rand.NewPCG(13, 14))
	xs := expInputs(r)
	for n := 1; n <= 40; n++ {
		xs = append(xs, expInputs(r)[:n]...)
	}
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, -0.0}
	for off := 0; off < len(xs); {
		n := min(1+r.IntN(40), len(xs)-off)
		x := append(xs[off:off+n:off+n], special[:r.IntN(len(special)+1)]...)
		off += n
		shift := float32(r.NormFloat64())
		wide, narrow := make([]float32, len(x)), make([]float32, len(x))
		expShift(wide, x, shift)
		useAVX512 = false
		expShift(narrow, x, shift)
		useAVX512 = true
		for i := range wide {
			if math.Float32bits(wide[i]) != math.Float32bits(narrow[i]) {
				t.Fatalf("exp(%v−%v): AVX-512 %v, AVX2 %v", x[i], shift, wide[i], narrow[i])
			}
		}
		if slices.ContainsFunc(x, func(v float32) bool { return v != v || math.IsInf(float64(v), 0) }) {
			continue
		}
		a, b := append([]float32(nil), x...), append([]float32(nil), x...)
		m := float32(r.NormFloat64() * 50)
		if r.IntN(4) == 0 {
			m = float32(math.Inf(-1))
		}
		slack := float32(r.IntN(3) * 4)
		mw, sw := softmaxShift(a, m, slack)
		useAVX512 = false
		mn, sn := softmaxShift(b, m, slack)
		useAVX512 = true
		if want := max(m, maxVec(x)); want > m+slack && mw != want || want <= m+slack && mw != m {
			t.Fatalf("softmaxShift(m %v, slack %v): shift %v, largest %v", m, slack, mw, want)
		}
		if mw != mn || math.Abs(float64(sw-sn)) > 1e-6*float64(sn)+1e-30 {
			t.Fatalf("softmaxShift: AVX-512 (%v, %v), AVX2 (%v, %v)", mw, sw, mn, sn)
		}
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("softmaxShift[%d]: AVX-512 %v, AVX2 %v", i, a[i], b[i])
			}
		}
	}
}

// TestTranspose checks transpose, with and without the assembly kernel, at
// shapes around its blocks of eight.
func TestTranspose(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 30))
	for _, n := range []int{1, 7, 8, 9, 16, 23} {
		for _, k := range []int{1, 5, 8, 15, 64, 130} {
			lds, ldd := k+r.IntN(3), n+r.IntN(3)
			src := randFloats(r, (n-1)*lds+k)
			for _, asm := range []bool{false, true} {
				if asm && !useAVX2 {
					continue
				}
				dst := make([]float32, (k-1)*ldd+n)
				fast := useAVX2
				useAVX2 = asm
				transpose(dst, ldd, src, lds, n, k)
				useAVX2 = fast
				for j := range n {
					for p := range k {
						if dst[p*ldd+j] != src[j*lds+p] {
							t.Fatalf("n %d k %d asm %v: dst[%d,%d] = %v, want %v", n, k, asm, p, j, dst[p*ldd+j], src[j*lds+p])
						}
					}
				}
			}
		}
	}
}
