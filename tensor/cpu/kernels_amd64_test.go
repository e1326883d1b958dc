package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/backendtest"
)

// plainGo runs f with every assembly kernel switched off.
func plainGo(f func()) {
	fast, mm := useAVX2, gemmKern
	useAVX2, gemmKern = false, kernGo
	defer func() { useAVX2, gemmKern = fast, mm }()
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

func TestAddABt(t *testing.T) {
	if !useAVX2 {
		t.Skip("no assembly kernels on this processor")
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 8))
	for iter := 0; iter < 60; iter++ {
		m, n, k := 1+r.IntN(20), 1+r.IntN(20), 1+r.IntN(300)
		if iter < 4 {
			m, n, k = []int{1, 64, 3, 7}[iter], []int{4, 64, 5, 1}[iter], []int{8, 128, 7, 9}[iter]
		}
		lda, ldb, ldy := k+r.IntN(5), k+r.IntN(5), n+r.IntN(5)
		a, b := randFloats(r, (m-1)*lda+k), randFloats(r, (n-1)*ldb+k)
		y0 := randFloats(r, (m-1)*ldy+n)
		y := append([]float32(nil), y0...)
		addABt(y, ldy, a, lda, b, ldb, m, n, k)
		for i := range m {
			for j := range n {
				want, mag := float64(y0[i*ldy+j]), math.Abs(float64(y0[i*ldy+j]))
				for p := range k {
					v := float64(a[i*lda+p]) * float64(b[j*ldb+p])
					want += v
					mag += math.Abs(v)
				}
				if !near(y[i*ldy+j], want, mag, 1e-6) {
					t.Fatalf("%dx%dx%d: y[%d,%d] = %v, want %v", m, n, k, i, j, y[i*ldy+j], want)
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

// TestAddABtPositionInvariant checks that each product gets the same bits
// wherever it sits in the output (the delta rule's chunk products rely on
// it to match across batchings).
func TestAddABtPositionInvariant(t *testing.T) {
	r := rand.New(rand.NewPCG(rand.Uint64(), 12))
	for _, sh := range [][3]int{{7, 6, 128}, {5, 5, 37}, {64, 63, 128}, {2, 3, 5}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b := randFloats(r, m*k), randFloats(r, n*k)
		y := make([]float32, m*n)
		addABt(y, n, a, k, b, k, m, n, k)
		for i := range m {
			for j := range n {
				one := make([]float32, 1)
				addABt(one, 1, a[i*k:], k, b[j*k:], k, 1, 1, k)
				if one[0] != y[i*n+j] {
					t.Fatalf("%dx%dx%d: [%d,%d] alone %v, in place %v", m, n, k, i, j, one[0], y[i*n+j])
				}
			}
		}
	}
}
