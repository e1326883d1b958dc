package layers

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/checkpoint"
	"github.com/kevgo/kev/internal/fp8"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/tensor"
	"github.com/kevgo/kev/tensor/cpu"
)

// upload is one upload a recordingFP8 backend saw.
type upload struct {
	op    string // "FromHost", "FromFloat32" or "FromFloat32FP8"
	dtype qwen35.DType
	shape []int
	f32   []float32 // a copy of the data (F32), or nil
	bits  []uint16  // a copy of the data (BF16, F16), or nil
}

func (u upload) String() string { return fmt.Sprintf("%s %v %v", u.op, u.dtype, u.shape) }

// same reports whether u and v uploaded the same data in the same type and shape, bit for bit.
func (u upload) same(v upload) bool {
	if u.dtype != v.dtype || !reflect.DeepEqual(u.shape, v.shape) || len(u.f32) != len(v.f32) || !reflect.DeepEqual(u.bits, v.bits) {
		return false
	}
	for i := range u.f32 {
		if math.Float32bits(u.f32[i]) != math.Float32bits(v.f32[i]) {
			return false
		}
	}
	return true
}

// recordingFP8 is the CPU backend with FP8 products in the way the cuda backend takes FP8 weights at load:
// FromFloat32FP8 refuses a shape other than N a multiple of 8 and K of 16 with a *tensor.ShapeError, and quantizes
// the rest per row (internal/fp8), holding the dequantized values as F32 weights. Every upload is recorded.
type recordingFP8 struct {
	tensor.Backend
	ups []upload
}

func newRecordingFP8() *recordingFP8 { return &recordingFP8{Backend: cpu.New()} }

func (r *recordingFP8) FromHost(t *qwen35.Tensor) (tensor.Tensor, error) {
	r.ups = append(r.ups, upload{op: "FromHost", dtype: t.DType, shape: append([]int(nil), t.Shape...),
		f32: append([]float32(nil), t.F32...), bits: append(append([]uint16(nil), t.BF16...), t.F16...)})
	return r.Backend.FromHost(t)
}

func (r *recordingFP8) FromFloat32(shape []int, data []float32) (tensor.Tensor, error) {
	r.ups = append(r.ups, upload{op: "FromFloat32", dtype: qwen35.F32, shape: append([]int(nil), shape...),
		f32: append([]float32(nil), data...)})
	return r.Backend.FromFloat32(shape, data)
}

func (r *recordingFP8) CheckFP8() error { return nil }

func (r *recordingFP8) FromFloat32FP8(shape []int, data []float32) (tensor.Tensor, error) {
	if len(shape) != 2 || shape[0]%8 != 0 || shape[1]%16 != 0 {
		return nil, &tensor.ShapeError{Op: "FromFloat32FP8", Arg: "shape", Shape: shape, Want: "[N, K] with N a multiple of 8 and K of 16"}
	}
	deq, err := fp8.RoundRows(data, shape[0], shape[1])
	if err != nil {
		return nil, err
	}
	r.ups = append(r.ups, upload{op: "FromFloat32FP8", dtype: qwen35.F32, shape: append([]int(nil), shape...),
		f32: append([]float32(nil), data...)})
	return r.Backend.FromFloat32(shape, deq)
}

// productShapes lists the product weights New uploads, in load order: each stacked weight's canonical names joined
// by "+" and its shape.
func productShapes(c *qwen35.Config) (names []string, shapes [][2]int) {
	add := func(n string, rows, cols int) {
		names = append(names, n)
		shapes = append(shapes, [2]int{rows, cols})
	}
	d := c.HiddenSize
	for i, lt := range c.LayerTypes {
		p := fmt.Sprintf("layers.%d.", i)
		add(p+"mlp.gate_proj.weight+"+p+"mlp.up_proj.weight", 2*c.IntermediateSize, d)
		add(p+"mlp.down_proj.weight", d, c.IntermediateSize)
		if lt == qwen35.FullAttention {
			a := p + "self_attn."
			q := c.NumHeads * c.HeadDim
			if c.AttnOutputGate {
				q *= 2
			}
			add(a+"q_proj.weight+"+a+"k_proj.weight+"+a+"v_proj.weight", q+2*c.NumKVHeads*c.HeadDim, d)
			add(a+"o_proj.weight", d, c.NumHeads*c.HeadDim)
			continue
		}
		l := p + "linear_attn."
		add(l+"in_proj_qkv.weight+"+l+"in_proj_z.weight+"+l+"in_proj_b.weight+"+l+"in_proj_a.weight",
			c.ConvDim()+c.LinearValueDim()+2*c.LinearNumValueHeads, d)
		add(l+"out_proj.weight", d, c.LinearValueDim())
	}
	return names, shapes
}

// TestNewFP8 loads each golden checkpoint three times, on a backend that records its uploads: fp32, bf16, and FP8
// (bf16 with fp32 product weights, Options.FP8). The FP8 load must make the same uploads as the bf16 one, bit for
// bit, but for the product weights: those go through FromFloat32FP8 with the fp32 load's values (the fp32 merge),
// bit for bit, unless the backend refuses their shape — then they are the bf16 load's uploads and KeptBF16 names
// them. Every product weight is one or the other; nothing else is FP8. The FP8 model runs, its final hidden states
// (weights quantized, activations not) near the fp32 model's.
func TestNewFP8(t *testing.T) {
	for _, fx := range []string{"tiny-a", "tiny-b", "tiny-qwen3", "tiny-qwen2"} {
		t.Run(fx, func(t *testing.T) {
			dir := goldenRoot(t, fx)
			kev, base := filepath.Join(dir, "kev"), filepath.Join(dir, "base")
			load := func(opts checkpoint.Options, fp8 bool) (*Model, *recordingFP8) {
				t.Helper()
				ck, err := checkpoint.Open(kev, base, opts)
				if err != nil {
					t.Fatal(err)
				}
				r := newRecordingFP8()
				m, err := NewWith(r, ck.Weights, Options{FP8: fp8})
				if err != nil {
					t.Fatal(err)
				}
				return m, r
			}
			m32, r32 := load(checkpoint.Options{DType: qwen35.F32}, false)
			m16, r16 := load(checkpoint.Options{DType: qwen35.BF16}, false)
			m8, r8 := load(checkpoint.Options{DType: qwen35.BF16, ProductsF32: true}, true)
			if m32.KeptBF16() != nil || m16.KeptBF16() != nil {
				t.Errorf("KeptBF16 of loads without FP8: %v, %v", m32.KeptBF16(), m16.KeptBF16())
			}
			if len(r8.ups) != len(r16.ups) || len(r8.ups) != len(r32.ups) {
				t.Fatalf("%d uploads in FP8, %d in bf16, %d in fp32", len(r8.ups), len(r16.ups), len(r32.ups))
			}
			names, shapes := productShapes(&m8.Config)
			var wantKept []string
			for i, s := range shapes {
				if s[0]%8 != 0 || s[1]%16 != 0 {
					wantKept = append(wantKept, names[i])
				}
			}
			if !reflect.DeepEqual(m8.KeptBF16(), wantKept) {
				t.Errorf("KeptBF16 = %q, want %q", m8.KeptBF16(), wantKept)
			}
			if fx == "tiny-b" && len(wantKept) == 0 {
				t.Error("tiny-b has no product weight the FP8 products refuse: the bf16 fallback goes untested")
			}
			var fp8Shapes [][2]int
			for i, u := range r8.ups {
				if u.op != "FromFloat32FP8" {
					if !u.same(r16.ups[i]) {
						t.Errorf("upload %d: FP8 load %v, bf16 load %v: not the same bits", i, u, r16.ups[i])
					}
					continue
				}
				fp8Shapes = append(fp8Shapes, [2]int{u.shape[0], u.shape[1]})
				want := r32.ups[i] // the fp32 load's upload of the same weight
				want.op = u.op
				if want.dtype != qwen35.F32 || !u.same(want) {
					t.Errorf("upload %d: FP8 load quantizes %v, fp32 load uploads %v: not the same values", i, u, r32.ups[i])
				}
				if r16.ups[i].op != "FromHost" || r16.ups[i].dtype != qwen35.BF16 || !reflect.DeepEqual(r16.ups[i].shape, u.shape) {
					t.Errorf("upload %d: FP8 load quantizes %v, bf16 load uploads %v", i, u, r16.ups[i])
				}
			}
			var wantFP8 [][2]int
			for i, s := range shapes {
				if !strings.Contains(strings.Join(wantKept, " "), names[i]) {
					wantFP8 = append(wantFP8, s)
				}
			}
			if !reflect.DeepEqual(fp8Shapes, wantFP8) {
				t.Errorf("FP8 weights of shapes %v, want %v", fp8Shapes, wantFP8)
			}

			g := readGoldenCases(t, filepath.Join(dir, "reference", "cases.json"))
			ids := g.Cases[0].StateIDs
			_, h32, err := m32.Prefill(ids)
			if err != nil {
				t.Fatal(err)
			}
			_, h8, err := m8.Prefill(ids)
			if err != nil {
				t.Fatal(err)
			}
			want, err := m32.b.ToHost(h32)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m8.b.ToHost(h8)
			if err != nil {
				t.Fatal(err)
			}
			e := compareBlock(got, want)
			t.Logf("%s: FP8 weights vs fp32, final hidden states of %d tokens: relative error %.4f, max |Δ| %.4f", fx, len(ids), e.rel, e.abs)
			// E4M3 keeps 3 mantissa bits: each weight moves by up to 1/16 of itself. Through these random tiny models
			// that comes to 5 % (attention-only) to 13 % (hybrid) of the final hidden states.
			if !(e.rel < 0.2) {
				t.Errorf("FP8 weights vs fp32: relative error %.4f of the final hidden states, want < 0.2", e.rel)
			}
		})
	}
}

// TestNewFP8Errors checks what an FP8 load returns from a backend without FP8 products (the *tensor.DTypeError,
// after the first product weight) and for a weight that cannot be quantized (NaN: the error names the weight).
func TestNewFP8Errors(t *testing.T) {
	dir := goldenRoot(t, "tiny-a")
	kev, base := filepath.Join(dir, "kev"), filepath.Join(dir, "base")
	ck, err := checkpoint.Open(kev, base, checkpoint.Options{DType: qwen35.BF16, ProductsF32: true})
	if err != nil {
		t.Fatal(err)
	}
	var de *tensor.DTypeError
	if _, err := NewWith(cpu.New(), ck.Weights, Options{FP8: true}); !errors.As(err, &de) {
		t.Errorf("FP8 load on the cpu backend: %v, want a *tensor.DTypeError", err)
	}
	ck.Weights.Tensors["layers.0.mlp.down_proj.weight"].F32[5] = float32(math.NaN())
	var nf *fp8.NonFiniteError
	_, err = NewWith(newRecordingFP8(), ck.Weights, Options{FP8: true})
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "layers.0.mlp.down_proj.weight") {
		t.Errorf("a NaN weight: %v, want an *fp8.NonFiniteError naming layers.0.mlp.down_proj.weight", err)
	}
}
