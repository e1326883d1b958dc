package backendtest

import (
	"fmt"
	"math"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
)

func (s *suite) testTransfer(t *testing.T) {
	data := s.random(15, 3)
	x := s.up(t, []int{3, 5}, data)
	compare(t, "FromFloat32", s.down(t, x), f64(data), 0)
	bits := make([]uint16, len(data))
	want := make([]float64, len(data))
	for i, v := range data {
		bits[i] = half.BF16FromF32(v)
		want[i] = float64(half.BF16ToF32(bits[i]))
	}
	h, err := s.b.FromHost(&qwen35.Tensor{Shape: []int{5, 3}, DType: qwen35.BF16, BF16: bits})
	if err != nil {
		t.Fatal(err)
	}
	s.check(t, "FromHost BF16", h, []int{5, 3}, want, 0)
	h, err = s.b.FromHost(&qwen35.Tensor{Shape: []int{15}, DType: qwen35.F32, F32: data})
	if err != nil {
		t.Fatal(err)
	}
	s.check(t, "FromHost F32", h, []int{15}, f64(data), 0)
	_, ws := s.upAs(t, tensor.F16, []int{15}, data)
	f, _ := s.upAs(t, tensor.F16, []int{15}, data)
	s.check(t, "FromBits F16", f, []int{15}, ws, 0)
	if _, err := s.b.FromFloat32([]int{4, 4}, data); err == nil {
		t.Error("FromFloat32 with 15 values for [4 4]: no error")
	}
	s.b.Free(x, nil)
	if _, err := s.b.ToHost(x); err == nil {
		t.Error("ToHost after Free: no error")
	}
}

func (s *suite) testEmbedding(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for name, g := range s.gens() {
			v, d := 11, 6
			table, vals := s.upAs(t, dt, []int{v, d}, g(v*d, 2))
			ids := []int32{3, 0, 10, 3, 7}
			want := make([]float64, 0, len(ids)*d)
			for _, id := range ids {
				want = append(want, vals[int(id)*d:(int(id)+1)*d]...)
			}
			s.poison(t, len(want))
			y, err := s.b.Embedding(table, ids)
			if err != nil {
				t.Fatal(err)
			}
			s.check(t, fmt.Sprintf("%v/%s", dt, name), y, []int{len(ids), d}, want, 0)
		}
	}
}

func matmulRef(x, w []float64, m, n, k int) []float64 {
	y := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float64
			for p := 0; p < k; p++ {
				acc += x[i*k+p] * w[j*k+p]
			}
			y[i*n+j] = acc
		}
	}
	return y
}

func (s *suite) testMatMul(t *testing.T) {
	shapes := [][3]int{{1, 1, 1}, {1, 7, 5}, {5, 3, 17}, {4, 8, 16}, {13, 9, 33}, {33, 70, 129}, {64, 37, 130}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
		for name, g := range s.gens() {
			for _, sh := range shapes {
				m, n, k := sh[0], sh[1], sh[2]
				xd := g(m*k, 1.5)
				x := s.up(t, []int{m, k}, xd)
				w, wv := s.upAs(t, dt, []int{n, k}, g(n*k+3, 0.7)[3:])
				s.poison(t, m*n)
				y, err := s.b.MatMul(x, w)
				if err != nil {
					t.Fatal(err)
				}
				s.check(t, fmt.Sprintf("%v/%s/%dx%dx%d", dt, name, m, n, k), y, []int{m, n}, matmulRef(f64(xd), wv, m, n, k), s.tol.of(dt))
			}
		}
	}
}

func (s *suite) testSplitCols(t *testing.T) {
	// Odd widths, and widths of whole 16-byte pieces (a backend may copy those in vectors).
	for _, tc := range []struct {
		m      int
		widths []int
	}{{3, []int{2, 5, 1, 4}}, {5, []int{8, 24, 4, 12}}, {2, []int{16, 0, 32}}} {
		n := 0
		for _, w := range tc.widths {
			n += w
		}
		m := tc.m
		data := s.random(m*n, 1)
		x := s.up(t, []int{m, n}, data)
		s.poison(t, m*n)
		parts, err := s.b.SplitCols(x, tc.widths...)
		if err != nil {
			t.Fatal(err)
		}
		off := 0
		for i, w := range tc.widths {
			want := make([]float64, 0, m*w)
			for r := 0; r < m; r++ {
				want = append(want, f64(data[r*n+off:r*n+off+w])...)
			}
			s.check(t, fmt.Sprintf("%v part %d", tc.widths, i), parts[i], []int{m, w}, want, 0)
			off += w
		}
	}
}

func (s *suite) testRMSNorm(t *testing.T) {
	for _, plusOne := range []bool{true, false} {
		for name, g := range s.gens() {
			for _, sh := range [][2]int{{1, 1}, {3, 7}, {5, 256}} {
				m, n := sh[0], sh[1]
				xd, gd := g(m*n, 3), s.random(n, 0.5)
				want := make([]float64, 0, m*n)
				for r := 0; r < m; r++ {
					want = append(want, rmsRef(f64(xd[r*n:(r+1)*n]), f64(gd), 1e-6, plusOne)...)
				}
				s.poison(t, m*n)
				y, err := s.b.RMSNorm(s.up(t, []int{m, n}, xd), s.up(t, []int{n}, gd), 1e-6, plusOne)
				if err != nil {
					t.Fatal(err)
				}
				s.check(t, fmt.Sprintf("plusOne=%v/%s/%dx%d", plusOne, name, m, n), y, []int{m, n}, want, s.tol.F32)
			}
		}
	}
}

func (s *suite) testAddRMSNorm(t *testing.T) {
	for _, plusOne := range []bool{true, false} {
		for name, g := range s.gens() {
			m, n := 4, 33
			xd, rd, gd := g(m*n, 2), s.random(m*n, 5), s.random(n, 0.5)
			sum := make([]float64, m*n)
			for i := range sum {
				sum[i] = float64(xd[i]) + float64(rd[i])
			}
			var want []float64
			for r := 0; r < m; r++ {
				want = append(want, rmsRef(sum[r*n:(r+1)*n], f64(gd), 1e-6, plusOne)...)
			}
			s.poison(t, m*n, m*n)
			a, y, err := s.b.AddRMSNorm(s.up(t, []int{m, n}, xd), s.up(t, []int{m, n}, rd), s.up(t, []int{n}, gd), 1e-6, plusOne)
			if err != nil {
				t.Fatal(err)
			}
			s.check(t, fmt.Sprintf("sum/plusOne=%v/%s", plusOne, name), a, []int{m, n}, sum, s.tol.F32)
			s.check(t, fmt.Sprintf("normed/plusOne=%v/%s", plusOne, name), y, []int{m, n}, want, s.tol.F32)
		}
	}
}

func (s *suite) testSwiGLU(t *testing.T) {
	for name, g := range s.gens() {
		for _, sh := range [][2]int{{1, 5}, {7, 33}} {
			m, n := sh[0], sh[1]
			xd := g(m*2*n, 4)
			want := make([]float64, m*n)
			for r := 0; r < m; r++ {
				for i := 0; i < n; i++ {
					want[r*n+i] = silu(float64(xd[r*2*n+i])) * float64(xd[r*2*n+n+i])
				}
			}
			s.poison(t, m*n)
			y, err := s.b.SwiGLU(s.up(t, []int{m, 2 * n}, xd))
			if err != nil {
				t.Fatal(err)
			}
			s.check(t, fmt.Sprintf("%s/%dx%d", name, m, n), y, []int{m, n}, want, s.tol.F32)
		}
	}
}

// testMatMulSwiGLU checks that the fused operation gives exactly the bits of MatMul then SwiGLU, for F32 and
// BF16 weights, at shapes a GPU can fuse (I a multiple of 8, K of 8), shapes a CPU fuses (I a multiple of 32, rows
// past one 240-row block) and shapes neither can.
func (s *suite) testMatMulSwiGLU(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, sh := range [][3]int{{1, 8, 16}, {3, 5, 7}, {70, 144, 64}, {130, 24, 40}, {300, 72, 128},
			{1, 32, 40}, {70, 64, 64}, {250, 320, 96}} {
			m, n, k := sh[0], sh[1], sh[2]
			x := s.up(t, []int{m, k}, s.random(m*k, 1))
			w, _ := s.upAs(t, dt, []int{2 * n, k}, s.random(2*n*k, 1/float64(k)))
			name := fmt.Sprintf("%v/%dx%dx%d", dt, m, n, k)
			gu, err := s.b.MatMul(x, w)
			if err != nil {
				t.Fatal(name, err)
			}
			want, err := s.b.SwiGLU(gu)
			if err != nil {
				t.Fatal(name, err)
			}
			got, err := s.b.MatMulSwiGLU(x, w)
			if err != nil {
				t.Fatal(name, err)
			}
			if sh := got.Shape(); len(sh) != 2 || sh[0] != m || sh[1] != n {
				t.Fatalf("%s: shape %v, want [%d %d]", name, sh, m, n)
			}
			a, err := s.b.ToHost(got)
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.b.ToHost(want)
			if err != nil {
				t.Fatal(err)
			}
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Errorf("%s: element %d: fused %v, MatMul then SwiGLU %v", name, i, a[i], b[i])
					break
				}
			}
			s.b.Free(x, w, gu, want, got)
		}
	}
	if _, err := s.b.MatMulSwiGLU(s.up(t, []int{2, 4}, s.random(8, 1)), s.up(t, []int{3, 4}, s.random(12, 1))); err == nil {
		t.Error("MatMulSwiGLU with an odd number of weight rows: no error")
	}
}

// testMatMulSplit checks that MatMulSplit gives exactly the bits of MatMul then SplitCols, for F32, F16 and BF16
// weights, at blocks that start and end on 32-column panels, blocks that start inside one (a gated DeltaNet's
// [conv | z | b | a] with 16 heads), empty blocks, and rows past one 240-row block; then that it refuses widths
// that do not add up to the weight's rows or are negative.
func (s *suite) testMatMulSplit(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.F32, tensor.F16, tensor.BF16} {
		for _, c := range []struct {
			m, k   int
			widths []int
		}{
			{1, 16, []int{32, 64}},
			{3, 7, []int{5, 0, 9, 1}},
			{40, 64, []int{192, 64, 16, 16}},
			{70, 40, []int{96, 32, 3, 3}},
			{250, 24, []int{64, 33, 31, 64, 1}},
			{300, 48, []int{0, 160}},
		} {
			n := 0
			for _, v := range c.widths {
				n += v
			}
			name := fmt.Sprintf("%v/%dx%d/%v", dt, c.m, c.k, c.widths)
			x := s.up(t, []int{c.m, c.k}, s.random(c.m*c.k, 1))
			w, _ := s.upAs(t, dt, []int{n, c.k}, s.random(n*c.k, 1/float64(c.k)))
			y, err := s.b.MatMul(x, w)
			if err != nil {
				t.Fatal(name, err)
			}
			want, err := s.b.SplitCols(y, c.widths...)
			if err != nil {
				t.Fatal(name, err)
			}
			got, err := s.b.MatMulSplit(x, w, c.widths...)
			if err != nil {
				t.Fatal(name, err)
			}
			if len(got) != len(c.widths) {
				t.Fatalf("%s: %d blocks, want %d", name, len(got), len(c.widths))
			}
			for i := range got {
				if sh := got[i].Shape(); len(sh) != 2 || sh[0] != c.m || sh[1] != c.widths[i] {
					t.Fatalf("%s: block %d shape %v, want [%d %d]", name, i, sh, c.m, c.widths[i])
				}
				a, b := s.down(t, got[i]), s.down(t, want[i])
				for j := range a {
					if math.Float32bits(a[j]) != math.Float32bits(b[j]) {
						t.Errorf("%s: block %d element %d: MatMulSplit %v, MatMul then SplitCols %v", name, i, j, a[j], b[j])
						break
					}
				}
			}
			s.b.Free(x, w, y)
			s.b.Free(want...)
			s.b.Free(got...)
		}
	}
	x := s.up(t, []int{2, 4}, s.random(8, 1))
	w := s.up(t, []int{6, 4}, s.random(24, 1))
	defer s.b.Free(x, w)
	for _, widths := range [][]int{{2, 3}, {4, 4}, {7, -1}, nil} {
		if _, err := s.b.MatMulSplit(x, w, widths...); err == nil {
			t.Errorf("MatMulSplit of a [6, 4] weight into widths %v: no error", widths)
		}
	}
}

// testMatMulAddRMSNorm checks that the fused operation gives exactly the bits of MatMul then AddRMSNorm (sum and
// normed), for F32 and BF16 weights, at shapes a GPU runs split-K at few rows (N small against K) and shapes it
// does not. (With bf16 activations the CUDA backend fuses them; its own tests check that path.)
func (s *suite) testMatMulAddRMSNorm(t *testing.T) {
	bitsOf := func(x tensor.Tensor) []float32 {
		t.Helper()
		v, err := s.b.ToHost(x)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, sh := range [][3]int{{3, 128, 1024}, {70, 256, 2048}, {300, 264, 1000}, {5, 24, 40}, {1, 8, 16}} {
			for _, plusOne := range []bool{true, false} {
				m, n, k := sh[0], sh[1], sh[2]
				x := s.up(t, []int{m, k}, s.random(m*k, 1))
				w, _ := s.upAs(t, dt, []int{n, k}, s.random(n*k, 1/float64(k)))
				res := s.up(t, []int{m, n}, s.random(m*n, 2))
				gain := s.up(t, []int{n}, s.random(n, 0.5))
				name := fmt.Sprintf("%v/%dx%dx%d/plusOne=%v", dt, m, n, k, plusOne)
				y, err := s.b.MatMul(x, w)
				if err != nil {
					t.Fatal(name, err)
				}
				wantSum, wantNorm, err := s.b.AddRMSNorm(y, res, gain, 1e-6, plusOne)
				if err != nil {
					t.Fatal(name, err)
				}
				gotSum, gotNorm, err := s.b.MatMulAddRMSNorm(x, w, res, gain, 1e-6, plusOne)
				if err != nil {
					t.Fatal(name, err)
				}
				for _, c := range []struct {
					what      string
					got, want tensor.Tensor
				}{{"sum", gotSum, wantSum}, {"normed", gotNorm, wantNorm}} {
					if sh := c.got.Shape(); len(sh) != 2 || sh[0] != m || sh[1] != n {
						t.Fatalf("%s: %s shape %v, want [%d %d]", name, c.what, sh, m, n)
					}
					if g, w := c.got.DType(), c.want.DType(); g != w {
						t.Errorf("%s: %s dtype %v, MatMul then AddRMSNorm %v", name, c.what, g, w)
					}
					a, b := bitsOf(c.got), bitsOf(c.want)
					for i := range a {
						if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
							t.Errorf("%s: %s element %d: fused %v, MatMul then AddRMSNorm %v", name, c.what, i, a[i], b[i])
							break
						}
					}
				}
				s.b.Free(x, w, res, gain, y, wantSum, wantNorm, gotSum, gotNorm)
			}
		}
	}
	x := s.up(t, []int{2, 8}, s.random(16, 1))
	w := s.up(t, []int{8, 8}, s.random(64, 1))
	if _, _, err := s.b.MatMulAddRMSNorm(x, w, s.up(t, []int{2, 7}, s.random(14, 1)), s.up(t, []int{8}, s.random(8, 1)), 1e-6, true); err == nil {
		t.Error("MatMulAddRMSNorm with a residual of the wrong width: no error")
	}
	if _, _, err := s.b.MatMulAddRMSNorm(x, w, s.up(t, []int{2, 8}, s.random(16, 1)), s.up(t, []int{7}, s.random(7, 1)), 1e-6, true); err == nil {
		t.Error("MatMulAddRMSNorm with a gain of the wrong length: no error")
	}
}

func (s *suite) testSigmoidGate(t *testing.T) {
	for name, g := range s.gens() {
		m, n := 3, 19
		xd, gd := g(m*n, 3), s.random(m*n, 6)
		want := make([]float64, m*n)
		for i := range want {
			want[i] = float64(xd[i]) * sigmoid(float64(gd[i]))
		}
		s.poison(t, m*n)
		y, err := s.b.SigmoidGate(s.up(t, []int{m, n}, xd), s.up(t, []int{m, n}, gd))
		if err != nil {
			t.Fatal(err)
		}
		s.check(t, name, y, []int{m, n}, want, s.tol.F32)
	}
}

func (s *suite) testAddBias(t *testing.T) {
	for name, g := range s.gens() {
		for _, sz := range [][2]int{{5, 37}, {1, 8}, {33, 96}} {
			m, n := sz[0], sz[1]
			xd, bd := g(m*n, 3), s.random(n, 1)
			want := make([]float64, m*n)
			for i := range want {
				want[i] = float64(xd[i]) + float64(bd[i%n])
			}
			s.poison(t, m*n)
			y, err := s.b.AddBias(s.up(t, []int{m, n}, xd), s.up(t, []int{n}, bd))
			if err != nil {
				t.Fatal(err)
			}
			s.check(t, fmt.Sprintf("%s/%dx%d", name, m, n), y, []int{m, n}, want, s.tol.F32)
		}
	}
}

// ropeRef normalises (as norm says) and rotates one head vector as
// QKNormRope documents.
func ropeRef(x, gain []float64, eps float64, pos int32, rot int, theta float64, norm tensor.QKNorm) []float64 {
	y := append([]float64(nil), x...)
	if norm != tensor.QKNormNone {
		y = rmsRef(x, gain, eps, norm == tensor.QKNormPlusOne)
	}
	h := rot / 2
	for j := 0; j < h; j++ {
		inv := float32(1 / math.Pow(theta, float64(2*j)/float64(rot)))
		phi := float64(float32(pos) * inv)
		c, sn := math.Cos(phi), math.Sin(phi)
		a, b := y[j], y[j+h]
		y[j], y[j+h] = a*c-b*sn, b*c+a*sn
	}
	return y
}

func (s *suite) testQKNormRope(t *testing.T) {
	cfgs := []tensor.RopeConfig{
		{Heads: 3, KVHeads: 1, HeadDim: 16, RotaryDim: 8, Theta: 1e7, Eps: 1e-6, Gated: true},
		{Heads: 4, KVHeads: 2, HeadDim: 8, RotaryDim: 8, Theta: 10000, Eps: 1e-6},
		{Heads: 2, KVHeads: 2, HeadDim: 6, RotaryDim: 2, Theta: 500, Eps: 1e-5, Gated: true},
		{Heads: 4, KVHeads: 2, HeadDim: 16, RotaryDim: 16, Theta: 1e6, Eps: 1e-6, Norm: tensor.QKNormPlain},
		{Heads: 2, KVHeads: 1, HeadDim: 64, RotaryDim: 64, Theta: 1e6, Eps: 1e-6, Norm: tensor.QKNormPlain},
		{Heads: 3, KVHeads: 1, HeadDim: 16, RotaryDim: 16, Theta: 1e4, Eps: 1e-6, Norm: tensor.QKNormNone},
	}
	for ci, c := range cfgs {
		for name, g := range s.gens() {
			positions := []int32{0, 1, 7, 130, 4097}
			n, d := len(positions), c.HeadDim
			qw := c.Heads * d
			if c.Gated {
				qw *= 2
			}
			qd, kd := g(n*qw, 3), s.random(n*c.KVHeads*d, 3)
			qg, kg := s.random(d, 0.4), s.random(d, 0.4)
			var wq, wk, wg []float64
			for ti, p := range positions {
				for h := 0; h < c.Heads; h++ {
					var src, gate []float32
					if c.Gated {
						src, gate = qd[ti*qw+2*h*d:ti*qw+2*h*d+d], qd[ti*qw+2*h*d+d:ti*qw+2*h*d+2*d]
						wg = append(wg, f64(gate)...)
					} else {
						src = qd[ti*qw+h*d : ti*qw+(h+1)*d]
					}
					wq = append(wq, ropeRef(f64(src), f64(qg), float64(c.Eps), p, c.RotaryDim, c.Theta, c.Norm)...)
				}
				for h := 0; h < c.KVHeads; h++ {
					src := kd[(ti*c.KVHeads+h)*d : (ti*c.KVHeads+h+1)*d]
					wk = append(wk, ropeRef(f64(src), f64(kg), float64(c.Eps), p, c.RotaryDim, c.Theta, c.Norm)...)
				}
			}
			s.poison(t, n*c.Heads*d, n*c.KVHeads*d, n*c.Heads*d)
			var qgt, kgt tensor.Tensor // nil gains: QKNormNone ignores them
			if c.Norm != tensor.QKNormNone {
				qgt, kgt = s.up(t, []int{d}, qg), s.up(t, []int{d}, kg)
			}
			qo, ko, gate, err := s.b.QKNormRope(s.up(t, []int{n, qw}, qd), s.up(t, []int{n, c.KVHeads * d}, kd),
				qgt, kgt, positions, c)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("cfg%d/%s", ci, name)
			s.check(t, what+"/q", qo, []int{n, c.Heads * d}, wq, s.tol.F32)
			s.check(t, what+"/k", ko, []int{n, c.KVHeads * d}, wk, s.tol.F32)
			if c.Gated {
				s.check(t, what+"/gate", gate, []int{n, c.Heads * d}, wg, 0)
			} else if gate != nil {
				t.Errorf("%s: gate is not nil for an ungated config", what)
			}
		}
	}
}

func attentionRef(q, k, v, kp, vp []float64, p int, lens []int, c tensor.AttentionConfig) []float64 {
	d, kvw, qw := c.HeadDim, c.KVHeads*c.HeadDim, c.Heads*c.HeadDim
	n := len(q) / qw
	out := make([]float64, n*qw)
	start := 0
	for _, l := range lens {
		for t := start; t < start+l; t++ {
			for h := 0; h < c.Heads; h++ {
				kh := h / (c.Heads / c.KVHeads)
				qv := q[t*qw+h*d : t*qw+(h+1)*d]
				var keys, vals [][]float64
				for j := 0; j < p; j++ {
					keys = append(keys, kp[j*kvw+kh*d:j*kvw+(kh+1)*d])
					vals = append(vals, vp[j*kvw+kh*d:j*kvw+(kh+1)*d])
				}
				for j := start; j <= t; j++ {
					keys = append(keys, k[j*kvw+kh*d:j*kvw+(kh+1)*d])
					vals = append(vals, v[j*kvw+kh*d:j*kvw+(kh+1)*d])
				}
				sc := make([]float64, len(keys))
				mx := math.Inf(-1)
				for j, kv := range keys {
					for i := range kv {
						sc[j] += qv[i] * kv[i]
					}
					sc[j] *= float64(c.Scale)
					mx = math.Max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for j, vv := range vals {
					for i := range vv {
						out[t*qw+h*d+i] += sc[j] / sum * vv[i]
					}
				}
			}
		}
		start += l
	}
	return out
}

func (s *suite) testAttention(t *testing.T) {
	cases := []struct {
		c    tensor.AttentionConfig
		p    int
		lens []int
	}{
		{tensor.AttentionConfig{Heads: 6, KVHeads: 2, HeadDim: 8}, 0, []int{9}},
		{tensor.AttentionConfig{Heads: 6, KVHeads: 2, HeadDim: 8}, 5, []int{3, 1, 4}},
		{tensor.AttentionConfig{Heads: 2, KVHeads: 2, HeadDim: 5}, 0, []int{1}},
		{tensor.AttentionConfig{Heads: 4, KVHeads: 1, HeadDim: 16}, 7, []int{1}},
		{tensor.AttentionConfig{Heads: 3, KVHeads: 3, HeadDim: 4}, 3, []int{0, 6, 2}},
	}
	for ci, tc := range cases {
		for name, g := range s.gens() {
			c := tc.c
			c.Scale = float32(1 / math.Sqrt(float64(c.HeadDim)))
			n := 0
			for _, l := range tc.lens {
				n += l
			}
			qw, kvw := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
			qd, kd, vd := g(n*qw, 2), s.random(n*kvw, 2), s.random(n*kvw, 1)
			kpd, vpd := s.random(tc.p*kvw, 2), s.random(tc.p*kvw, 1)
			var kp, vp tensor.Tensor
			if tc.p > 0 {
				kp, vp = s.up(t, []int{tc.p, kvw}, kpd), s.up(t, []int{tc.p, kvw}, vpd)
			}
			lens := tc.lens
			if len(lens) == 1 && ci%2 == 0 {
				lens = nil // nil means one segment
			}
			want := attentionRef(f64(qd), f64(kd), f64(vd), f64(kpd), f64(vpd), tc.p, tc.lens, c)
			s.poison(t, n*qw)
			y, err := s.b.Attention(s.up(t, []int{n, qw}, qd), s.up(t, []int{n, kvw}, kd), s.up(t, []int{n, kvw}, vd), kp, vp, lens, c)
			if err != nil {
				t.Fatal(err)
			}
			s.check(t, fmt.Sprintf("case%d/%s", ci, name), y, []int{n, qw}, want, s.tol.F32)
		}
	}
}

func (s *suite) testConv(t *testing.T) {
	cases := []struct {
		ch, kw    int
		lens      []int
		withState bool
	}{
		{7, 4, []int{9}, false},
		{7, 4, []int{9}, true},
		{5, 4, []int{2}, true},
		{5, 4, []int{1}, false},
		{6, 3, []int{2, 5, 1}, true},
		{3, 1, []int{4}, false},
	}
	for ci, tc := range cases {
		for name, g := range s.gens() {
			n := 0
			for _, l := range tc.lens {
				n += l
			}
			xd, wd := g(n*tc.ch, 2), s.random(tc.ch*tc.kw, 1)
			sd := make([]float32, (tc.kw-1)*tc.ch)
			var st tensor.Tensor
			if tc.withState {
				sd = s.random(len(sd), 2)
				st = s.up(t, []int{tc.kw - 1, tc.ch}, sd)
			}
			want := make([]float64, n*tc.ch)
			var lastHist []float64
			start := 0
			for _, l := range tc.lens {
				seq := append(f64(sd), f64(xd[start*tc.ch:(start+l)*tc.ch])...) // [K−1+l, C]
				for t := 0; t < l; t++ {
					for c := 0; c < tc.ch; c++ {
						var acc float64
						for j := 0; j < tc.kw; j++ {
							acc += float64(wd[c*tc.kw+j]) * seq[(t+j)*tc.ch+c]
						}
						want[(start+t)*tc.ch+c] = silu(acc)
					}
				}
				lastHist = seq[len(seq)-(tc.kw-1)*tc.ch:]
				start += l
			}
			s.poison(t, n*tc.ch, len(sd))
			y, ns, err := s.b.CausalConv1dSiLU(s.up(t, []int{n, tc.ch}, xd), s.up(t, []int{tc.ch, tc.kw}, wd), st, tc.lens)
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("case%d/%s", ci, name)
			s.check(t, what+"/y", y, []int{n, tc.ch}, want, s.tol.F32)
			if len(tc.lens) == 1 {
				s.check(t, what+"/state", ns, []int{tc.kw - 1, tc.ch}, lastHist, 0)
			} else if ns != nil {
				t.Errorf("%s: newState not nil for several segments", what)
			}
		}
	}
}

func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

func (s *suite) testDeltaGates(t *testing.T) {
	for name, g := range s.gens() {
		n, h := 6, 5
		bd, ad := g(n*h, 6), s.random(n*h, 8)
		ad[3], ad[7] = 25, 19.9 // both sides of the softplus threshold
		ld, dd := s.random(h, 2), s.random(h, 2)
		wb, wg := make([]float64, n*h), make([]float64, n*h)
		for t := 0; t < n; t++ {
			for i := 0; i < h; i++ {
				wb[t*h+i] = sigmoid(float64(bd[t*h+i]))
				wg[t*h+i] = -math.Exp(float64(ld[i])) * softplus(float64(float32(ad[t*h+i])+dd[i]))
			}
		}
		s.poison(t, n*h, n*h)
		beta, gg, err := s.b.DeltaGates(s.up(t, []int{n, h}, bd), s.up(t, []int{n, h}, ad), s.up(t, []int{h}, ld), s.up(t, []int{h}, dd))
		if err != nil {
			t.Fatal(err)
		}
		s.check(t, name+"/beta", beta, []int{n, h}, wb, s.tol.F32)
		s.check(t, name+"/g", gg, []int{n, h}, wg, s.tol.F32)
	}
}

// deltaRef runs the recurrent gated delta rule in float64; returns outputs
// and, per segment, the final state.
func deltaRef(qkv, g, beta, s0 []float64, lens []int, c tensor.DeltaConfig) ([]float64, [][]float64) {
	hk, hv, dk, dv := c.KeyHeads, c.ValueHeads, c.KeyDim, c.ValueDim
	width := 2*hk*dk + hv*dv
	n := len(qkv) / width
	out := make([]float64, n*hv*dv)
	var finals [][]float64
	l2 := func(v []float64, scale float64) []float64 {
		var ss float64
		for _, x := range v {
			ss += x * x
		}
		r := scale / math.Sqrt(ss+1e-6)
		o := make([]float64, len(v))
		for i, x := range v {
			o[i] = x * r
		}
		return o
	}
	start := 0
	for _, l := range lens {
		S := make([]float64, hv*dk*dv)
		copy(S, s0)
		for t := start; t < start+l; t++ {
			row := qkv[t*width : (t+1)*width]
			for h := 0; h < hv; h++ {
				kh := h / (hv / hk)
				q := l2(row[kh*dk:(kh+1)*dk], 1/math.Sqrt(float64(dk)))
				k := l2(row[hk*dk+kh*dk:hk*dk+(kh+1)*dk], 1)
				v := row[2*hk*dk+h*dv : 2*hk*dk+(h+1)*dv]
				Sh := S[h*dk*dv : (h+1)*dk*dv]
				a := math.Exp(g[t*hv+h])
				for i := range Sh {
					Sh[i] *= a
				}
				for j := 0; j < dv; j++ {
					var r float64
					for i := 0; i < dk; i++ {
						r += Sh[i*dv+j] * k[i]
					}
					delta := beta[t*hv+h] * (v[j] - r)
					for i := 0; i < dk; i++ {
						Sh[i*dv+j] += k[i] * delta
					}
				}
				for j := 0; j < dv; j++ {
					var o float64
					for i := 0; i < dk; i++ {
						o += Sh[i*dv+j] * q[i]
					}
					out[t*hv*dv+h*dv+j] = o
				}
			}
		}
		finals = append(finals, S)
		start += l
	}
	return out, finals
}

func (s *suite) testDeltaRule(t *testing.T) {
	cases := []struct {
		hk, hv, dk, dv int
		lens           []int
		chunks         []int
		withState      bool
	}{
		{1, 3, 5, 7, []int{11}, []int{0, 4, 64}, false},
		{1, 3, 5, 7, []int{11}, []int{0, 4, 3}, true},
		{2, 2, 8, 4, []int{1}, []int{0, 64}, true},
		{2, 4, 6, 6, []int{130}, []int{0, 64}, true},
		{2, 6, 4, 3, []int{5, 1, 9}, []int{0, 4}, true},
	}
	for ci, tc := range cases {
		for name, gn := range s.gens() {
			n := 0
			for _, l := range tc.lens {
				n += l
			}
			width := 2*tc.hk*tc.dk + tc.hv*tc.dv
			xd := gn(n*width, 2)
			gd := s.random(n*tc.hv, 1)
			for i := range gd {
				gd[i] = -gd[i] * gd[i] // log decay in (−1, 0]
			}
			gd[len(gd)/2] = -9 // a near-total forget
			bd := s.random(n*tc.hv, 0.5)
			for i := range bd {
				bd[i] += 0.5
			}
			var sd []float32
			var st tensor.Tensor
			if tc.withState {
				sd = s.random(tc.hv*tc.dk*tc.dv, 1)
				st = s.up(t, []int{tc.hv, tc.dk, tc.dv}, sd)
			}
			want, finals := deltaRef(f64(xd), f64(gd), f64(bd), f64(sd), tc.lens, tensor.DeltaConfig{KeyHeads: tc.hk, ValueHeads: tc.hv, KeyDim: tc.dk, ValueDim: tc.dv})
			for _, chunk := range tc.chunks {
				c := tensor.DeltaConfig{KeyHeads: tc.hk, ValueHeads: tc.hv, KeyDim: tc.dk, ValueDim: tc.dv, Chunk: chunk}
				s.poison(t, n*tc.hv*tc.dv, tc.hv*tc.dk*tc.dv)
				o, ns, err := s.b.GatedDeltaRule(s.up(t, []int{n, width}, xd), s.up(t, []int{n, tc.hv}, gd), s.up(t, []int{n, tc.hv}, bd), st, tc.lens, c)
				if err != nil {
					t.Fatal(err)
				}
				what := fmt.Sprintf("case%d/%s/chunk%d", ci, name, chunk)
				s.check(t, what+"/o", o, []int{n, tc.hv * tc.dv}, want, s.tol.F32)
				if len(tc.lens) == 1 {
					s.check(t, what+"/state", ns, []int{tc.hv, tc.dk, tc.dv}, finals[0], s.tol.F32)
				} else if ns != nil {
					t.Errorf("%s: newState not nil for several segments", what)
				}
			}
		}
	}
}

func (s *suite) testGatedRMSNorm(t *testing.T) {
	// Small odd vectors in fp32, and 16-bit ones of 128 (Kev-4B's value heads: a backend may vectorise those).
	for _, tc := range []struct {
		dt       tensor.DType
		n, h, dv int
	}{{tensor.F32, 3, 4, 6}, {tensor.BF16, 5, 3, 128}, {tensor.BF16, 2, 5, 64}} {
		for name, g := range s.gens() {
			n, h, dv := tc.n, tc.h, tc.dv
			ot, od := s.upAs(t, tc.dt, []int{n, h * dv}, g(n*h*dv, 2))
			zt, zd := s.upAs(t, tc.dt, []int{n, h * dv}, s.random(n*h*dv, 4))
			wd := s.random(dv, 1.5)
			want := make([]float64, 0, n*h*dv)
			for v := 0; v < n*h; v++ {
				y := rmsRef(od[v*dv:(v+1)*dv], f64(wd), 1e-6, false)
				for i := range y {
					y[i] *= silu(zd[v*dv+i])
				}
				want = append(want, y...)
			}
			s.poison(t, n*h*dv)
			y, err := s.b.GatedRMSNorm(ot, zt, s.up(t, []int{dv}, wd), 1e-6)
			if err != nil {
				t.Fatal(err)
			}
			tol := s.tol.F32
			if tc.dt != tensor.F32 { // 16-bit activations give 16-bit outputs: half a step, 2⁻⁸ of the largest
				tol = s.tol.of(tc.dt) + 1.0/256
			}
			s.check(t, fmt.Sprintf("%v/%s/dv%d", tc.dt, name, dv), y, []int{n, h * dv}, want, tol)
		}
	}
}

func (s *suite) testPointer(t *testing.T) {
	for _, temp := range []float32{1, 2.41, 0} {
		for name, g := range s.gens() {
			n, d, dp := 9, 12, 5
			hd := g(n*d, 2)
			wq, bq, wk, bk := s.random(dp*d, 1), s.random(dp, 0.5), s.random(dp*d, 1), s.random(dp, 0.5)
			scale := float32(1 / math.Sqrt(float64(dp)))
			decide, opts := 8, []int{2, 5, 7}
			lin := func(w, b []float32, row int) []float64 {
				y := make([]float64, dp)
				for i := range y {
					y[i] = float64(b[i])
					for j := 0; j < d; j++ {
						y[i] += float64(w[i*d+j]) * float64(hd[row*d+j])
					}
				}
				return y
			}
			xq := lin(wq, bq, decide)
			logits := make([]float64, len(opts))
			mx := math.Inf(-1)
			for j, o := range opts {
				xk := lin(wk, bk, o)
				for i := range xk {
					logits[j] += xk[i] * xq[i]
				}
				logits[j] *= float64(scale)
				if temp != 0 {
					logits[j] /= float64(temp)
				}
				mx = math.Max(mx, logits[j])
			}
			var sum float64
			for j := range logits {
				logits[j] = math.Exp(logits[j] - mx)
				sum += logits[j]
			}
			for j := range logits {
				logits[j] /= sum
			}
			head := &tensor.PointerHead{Wq: s.up(t, []int{dp, d}, wq), Bq: s.up(t, []int{dp}, bq), Wk: s.up(t, []int{dp, d}, wk), Bk: s.up(t, []int{dp}, bk), Scale: scale, Temperature: temp}
			p, err := s.b.Pointer(s.up(t, []int{n, d}, hd), head, decide, opts)
			if err != nil {
				t.Fatal(err)
			}
			compare(t, fmt.Sprintf("T=%v/%s", temp, name), p, logits, s.tol.F32)
		}
	}
}

// testErrors checks that bad operands give errors, not panics.
func (s *suite) testErrors(t *testing.T) {
	x := s.up(t, []int{2, 3}, s.random(6, 1))
	w := s.up(t, []int{4, 5}, s.random(20, 1))
	v := s.up(t, []int{3}, s.random(3, 1))
	cases := map[string]func() error{
		"MatMul K mismatch":  func() error { _, err := s.b.MatMul(x, w); return err },
		"MatMul nil":         func() error { _, err := s.b.MatMul(x, nil); return err },
		"Embedding id":       func() error { _, err := s.b.Embedding(w, []int32{4}); return err },
		"Embedding negative": func() error { _, err := s.b.Embedding(w, []int32{-1}); return err },
		"SplitCols widths":   func() error { _, err := s.b.SplitCols(x, 1, 1); return err },
		"RMSNorm gain":       func() error { _, err := s.b.RMSNorm(w, v, 1e-6, true); return err },
		"SwiGLU odd":         func() error { _, err := s.b.SwiGLU(x); return err },
		"SigmoidGate shape":  func() error { _, err := s.b.SigmoidGate(x, w); return err },
		"AddBias width":      func() error { _, err := s.b.AddBias(w, v); return err },
		"AddBias nil":        func() error { _, err := s.b.AddBias(x, nil); return err },
		"QKNormRope norm": func() error {
			_, _, _, err := s.b.QKNormRope(x, x, v, v, []int32{0, 1}, tensor.RopeConfig{Heads: 1, KVHeads: 1, HeadDim: 3, Norm: 7})
			return err
		},
		"Attention lens": func() error {
			_, err := s.b.Attention(x, x, x, nil, nil, []int{1}, tensor.AttentionConfig{Heads: 1, KVHeads: 1, HeadDim: 3, Scale: 1})
			return err
		},
		"Conv state": func() error {
			_, _, err := s.b.CausalConv1dSiLU(x, s.up(t, []int{3, 4}, s.random(12, 1)), x, nil)
			return err
		},
		"DeltaRule width": func() error {
			_, _, err := s.b.GatedDeltaRule(x, x, x, nil, nil, tensor.DeltaConfig{KeyHeads: 1, ValueHeads: 1, KeyDim: 2, ValueDim: 2})
			return err
		},
		"Pointer decide": func() error {
			h := &tensor.PointerHead{Wq: w, Bq: s.up(t, []int{4}, s.random(4, 1)), Wk: w, Bk: s.up(t, []int{4}, s.random(4, 1)), Scale: 1}
			_, err := s.b.Pointer(s.up(t, []int{2, 5}, s.random(10, 1)), h, 2, []int{0})
			return err
		},
	}
	for name, f := range cases {
		if err := f(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
