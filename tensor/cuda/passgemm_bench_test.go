//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// BenchmarkPassGEMMs times the matrix products of one Kev-4B pass and nothing else, queued back to back with the
// device stream held behind a gate, so that one pair of events spans them all — the way a cuBLAS pass is timed
// for comparison (every matmul of a pass on its own weights, one pair of events around them). Per layer, in the
// model's order: the input projection (DeltaNet: N = 12,352, K = 2,560; attention: 10,240 × 2,560), the output
// projection (2,560 × 4,096), the gate/up projection (18,432 × 2,560) and the down projection (2,560 × 9,216);
// 24 DeltaNet and 8 attention layers, every weight its own upload. Two modes:
//   - "pass": the backend calls of a served pass — MatMul for the input projection, MatMulAddRMSNorm for the output
//     and down projections (a split-K schedule ends in the fused residual add and norm), MatMulSwiGLU for gate/up;
//   - "plain": MatMul for all four (gate/up as one 18,432-wide product, the split-K ends in a plain reduce), the
//     set of products a cuBLAS pass computes.
//
// The inputs are results of the backend (RMSNorm of random rows), so they have the room past M that the pass's
// operands have. It reports the median device time of 5 gated runs per M (KEV_PASSGEMM_M=240,2392,… to choose;
// default 240, 253, 2,392 and 16,384) and the dense TFLOP/s of the plain products.
func BenchmarkPassGEMMs(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	ms := []int{240, 253, 2392, 16384}
	if v := os.Getenv("KEV_PASSGEMM_M"); v != "" {
		ms = nil
		for _, f := range strings.Split(v, ",") {
			m, err := strconv.Atoi(f)
			if err != nil || m < 1 {
				b.Fatalf("KEV_PASSGEMM_M=%q: %q is not a row count", v, f)
			}
			ms = append(ms, m)
		}
	}
	be := NewOn(dev)
	defer be.Trim()
	const d, inner, vo = 2560, 9216, 4096
	type layer struct{ in, out, gateUp, down tensor.Tensor }
	host := map[[2]int][]uint16{}
	up := func(n, k int) tensor.Tensor {
		v, ok := host[[2]int{n, k}]
		if !ok {
			v = randBF16(r, n*k, 1/math.Sqrt(float64(k)))
			host[[2]int{n, k}] = v
		}
		t, err := be.FromBits(tensor.BF16, []int{n, k}, v)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	var ls []layer
	for i := range 32 {
		inN := 12352
		if i%4 == 3 {
			inN = 10240
		}
		ls = append(ls, layer{up(inN, d), up(d, vo), up(2*inner, d), up(d, inner)})
	}
	defer func() {
		for _, l := range ls {
			be.Free(l.in, l.out, l.gateUp, l.down)
		}
	}()
	gain := func(n int) tensor.Tensor {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(0.5 + r.Float64())
		}
		t, err := be.FromFloat32([]int{n}, v)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	gD, gV, gI := gain(d), gain(vo), gain(inner)
	defer be.Free(gD, gV, gI)
	var flop float64
	for _, l := range ls[:32] {
		for _, w := range []tensor.Tensor{l.in, l.out, l.gateUp, l.down} {
			s := w.Shape()
			flop += 2 * float64(s[0]) * float64(s[1])
		}
	}
	g := openGate(b)
	for range b.N {
		for _, m := range ms {
			// rows returns RMSNorm of n-wide random rows: a backend result, with the room past M of the pass's operands.
			rows := func(n int, gn tensor.Tensor) tensor.Tensor {
				x0, err := be.FromBits(tensor.BF16, []int{m, n}, randBF16(r, m*n, 1))
				if err != nil {
					b.Fatal(err)
				}
				defer be.Free(x0)
				x, err := be.RMSNorm(x0, gn, 1e-6, false)
				if err != nil {
					b.Fatal(err)
				}
				return x
			}
			xD, xV, xI := rows(d, gD), rows(vo, gV), rows(inner, gI)
			for _, mode := range []string{"pass", "plain"} {
				pass := func() (tensor.Tensor, func(), error) {
					var last tensor.Tensor
					keep := func(y tensor.Tensor) { be.Free(last); last = y }
					for _, l := range ls {
						y, err := be.MatMul(xD, l.in)
						if err != nil {
							return nil, nil, err
						}
						keep(y)
						for _, p := range [][2]tensor.Tensor{{xV, l.out}, {xI, l.down}} {
							if mode == "plain" {
								y, err = be.MatMul(p[0], p[1])
							} else {
								var s tensor.Tensor
								y, s, err = be.MatMulAddRMSNorm(p[0], p[1], xD, gD, 1e-6, false)
								be.Free(s)
							}
							if err != nil {
								return nil, nil, err
							}
							keep(y)
							if p[1] == l.out { // the gate/up projection comes between the output and the down projection
								if mode == "plain" {
									y, err = be.MatMul(xD, l.gateUp)
								} else {
									y, err = be.MatMulSwiGLU(xD, l.gateUp)
								}
								if err != nil {
									return nil, nil, err
								}
								keep(y)
							}
						}
					}
					return last, func() { be.Free(last) }, nil
				}
				// Warm-up: the plans, tensor maps and pool buffers of every shape.
				for range 2 {
					if err := be.Run(func() error {
						y, done, err := pass()
						if err == nil {
							_, err = be.ToHost(y)
							done()
						}
						return err
					}); err != nil {
						b.Fatal(err)
					}
				}
				sec, _, err := gatedTimes(g, be.Run, pass, 5, 0.05)
				if err != nil {
					b.Fatal(err)
				}
				fmt.Printf("KEVBENCH passgemm M=%d mode=%s device_ms=%.3f tflops_plain=%.0f\n", m, mode, sec*1e3, flop*float64(m)/sec/1e12)
			}
			be.Free(xD, xV, xI)
		}
	}
}
