package checkpoint

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/safetensors"
)

// The golden fixtures (scripts/golden/FORMAT.md) are written by the PyTorch
// reference: a tiny Kev checkpoint and reference/merged.safetensors holding
// each merged weight in fp32 (canonical name) and rounded once to bf16
// (canonical name + ".bf16").

var goldenFixtures = []string{"tiny-a", "tiny-b", "tiny-qwen3", "tiny-qwen2"}

func goldenDir(t *testing.T, fixture string) string {
	dir := filepath.Join("..", "..", "testdata", "golden", fixture)
	if _, err := os.Stat(filepath.Join(dir, "reference", "merged.safetensors")); err != nil {
		t.Skipf("golden fixture %s not present", fixture)
	}
	return dir
}

func TestGoldenMerge(t *testing.T) {
	for _, fx := range goldenFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := goldenDir(t, fx)
			n := checkGoldenMerge(t, filepath.Join(dir, "kev"), filepath.Join(dir, "base"), filepath.Join(dir, "reference", "merged.safetensors"), true)
			t.Logf("%s: %d reference tensors match", fx, n)
		})
	}
}

// checkGoldenMerge loads kev on base in fp32 and bf16 and compares every
// tensor of the reference file; it returns how many it checked. strict
// demands bit equality (the merge reproduces torch's fp32 arithmetic);
// otherwise fp32 may differ by 1e-6 relative and bf16 by one ulp where the
// fp32 values are that close.
func checkGoldenMerge(t *testing.T, kev, base, refPath string, strict bool) int {
	t.Helper()
	f32, err := Open(kev, base, Options{DType: qwen35.F32})
	if err != nil {
		t.Fatal(err)
	}
	bf, err := Open(kev, base, Options{DType: qwen35.BF16})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := safetensors.Open(refPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	checked := 0
	for _, name := range ref.Names() {
		rt, _ := ref.Tensor(name)
		canon, isBF16 := strings.CutSuffix(name, ".bf16")
		got32 := f32.Weights.Tensors[canon]
		if got32 == nil {
			t.Fatalf("reference has %s, the loader has no %s", name, canon)
		}
		if isBF16 {
			r32, err := ref.Tensor(canon)
			if err != nil {
				t.Fatalf("reference has %s but not %s", name, canon)
			}
			want32, err := r32.Float32()
			if err != nil {
				t.Fatal(err)
			}
			checkGoldenBF16(t, name, rt, want32, got32, bf.Weights.Tensors[canon], strict)
		} else {
			checkGoldenF32(t, name, rt, got32, strict)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("reference/merged.safetensors is empty")
	}
	return checked
}

func checkGoldenF32(t *testing.T, name string, rt *safetensors.Tensor, got *qwen35.Tensor, strict bool) {
	t.Helper()
	want, err := rt.Float32()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(got.F32) {
		t.Fatalf("%s: %d values, want %d", name, len(got.F32), len(want))
	}
	for i, w := range want {
		if strict && math.Float32bits(got.F32[i]) != math.Float32bits(w) {
			t.Fatalf("%s[%d] = %v, want %v bit for bit", name, i, got.F32[i], w)
		}
		if !closeF32(got.F32[i], w) {
			d := math.Abs(float64(got.F32[i])-float64(w)) / math.Abs(float64(w))
			t.Fatalf("%s[%d] = %v, want %v (relative %.2g)", name, i, got.F32[i], w, d)
		}
	}
}

// closeF32 is the non-strict fp32 tolerance: 1e-6 relative, or 1e-6
// absolute below magnitude 1, where a cancelling merge leaves less relative
// precision.
func closeF32(a, b float32) bool {
	return math.Abs(float64(a)-float64(b)) <= 1e-6*math.Max(1, math.Abs(float64(b)))
}

// checkGoldenBF16 wants the bf16 weights to equal the reference exactly,
// except one bf16 ulp where our fp32 merge and the reference's differ by at
// most 1e-6 relative (a rounding tie decided by the last fp32 bit).
func checkGoldenBF16(t *testing.T, name string, rt *safetensors.Tensor, want32 []float32, got32, got *qwen35.Tensor, strict bool) {
	t.Helper()
	var want []uint16
	var err error
	if rt.DType == safetensors.BF16 {
		want, err = rt.BF16()
	} else {
		var f []float32
		f, err = rt.Float32()
		want = make([]uint16, len(f))
		for i, v := range f {
			want[i] = half.BF16FromF32(v)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	bits := func(i int) uint16 {
		if got.DType == qwen35.BF16 {
			return got.BF16[i]
		}
		return half.BF16FromF32(got.F32[i])
	}
	ties := 0
	for i, w := range want {
		g := bits(i)
		if g == w {
			continue
		}
		if d := int(g) - int(w); !strict && (d == 1 || d == -1) && closeF32(got32.F32[i], want32[i]) {
			ties++
			continue
		}
		t.Fatalf("%s[%d] = %#04x, want %#04x (fp32 merge %v)", name, i, g, w, got32.F32[i])
	}
	if ties > 0 {
		t.Logf("%s: %d one-ulp rounding ties", name, ties)
	}
}

func TestGoldenHead(t *testing.T) {
	for _, fx := range goldenFixtures {
		t.Run(fx, func(t *testing.T) {
			dir := goldenDir(t, fx)
			h, err := ReadHead(filepath.Join(dir, "kev", HeadFile))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(filepath.Join(dir, "reference", "cases.json"))
			if err != nil {
				t.Fatal(err)
			}
			var cases struct {
				Temperature float64 `json:"temperature"`
				HeadDim     int     `json:"head_dim"`
			}
			if err := json.Unmarshal(raw, &cases); err != nil {
				t.Fatal(err)
			}
			if h.Temperature != cases.Temperature || h.HeadDim != cases.HeadDim {
				t.Errorf("head.pt: T %v head_dim %d; cases.json: T %v head_dim %d", h.Temperature, h.HeadDim, cases.Temperature, cases.HeadDim)
			}
			if h.Base == "" || len(h.QWeight.F32) != h.HeadDim*h.Dim() || h.Weights != "lora" || h.LoRA == 0 {
				t.Errorf("head: base %q, weights %q, lora %d, q.weight %v", h.Base, h.Weights, h.LoRA, h.QWeight.Shape)
			}
			// reference/head.safetensors holds the same state_dict.
			ref, err := safetensors.Open(filepath.Join(dir, "reference", "head.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			for name, got := range map[string]*qwen35.Tensor{"q.weight": h.QWeight, "q.bias": h.QBias, "k.weight": h.KWeight, "k.bias": h.KBias} {
				rt, err := ref.Tensor(name)
				if err != nil {
					t.Fatal(err)
				}
				want, err := rt.Float32()
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.F32, want) || !reflect.DeepEqual(got.Shape, rt.Shape) {
					t.Errorf("head %s differs from reference/head.safetensors", name)
				}
			}
		})
	}
}

// TestGoldenCheckerOnSynthetic runs the golden comparison on the synthetic
// fixture with a reference file in the golden layout, computed exactly.
func TestGoldenCheckerOnSynthetic(t *testing.T) {
	f := newFixture(t, 9)
	kev, base := f.write()
	cfg, err := LoadConfig(filepath.Join(base, ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, name := range sortedNames(ExpectedShapes(&cfg)) {
		exact := f.reference(name, 2)
		v32 := make([]float32, len(exact))
		for i, e := range exact {
			v32[i] = float32(e)
		}
		shape := ExpectedShapes(&cfg)[name]
		a, _ := safetensors.FromFloat32(name, safetensors.F32, shape, v32)
		b, _ := safetensors.FromFloat32(name+".bf16", safetensors.BF16, shape, v32)
		ts = append(ts, a, b)
	}
	refPath := filepath.Join(t.TempDir(), "merged.safetensors")
	if err := safetensors.WriteFile(refPath, ts, nil); err != nil {
		t.Fatal(err)
	}
	if n := checkGoldenMerge(t, kev, base, refPath, false); n != len(ts) {
		t.Fatalf("checked %d of %d", n, len(ts))
	}
}

// TestGoldenFull loads kev-full (tiny-a only): the merged model saved as
// full bf16 weights (A_log fp32), which must equal the reference's
// once-rounded merge.
func TestGoldenFull(t *testing.T) {
	dir := goldenDir(t, "tiny-a")
	full := filepath.Join(dir, "kev-full")
	if _, err := os.Stat(full); err != nil {
		t.Skip("no kev-full checkpoint")
	}
	ck, err := Open(full, "", Options{DType: qwen35.F32})
	if err != nil {
		t.Fatal(err)
	}
	if ck.Adapter != nil || ck.Head.Weights != "full" {
		t.Fatalf("adapter %v, weights %q", ck.Adapter, ck.Head.Weights)
	}
	ref, err := safetensors.Open(filepath.Join(dir, "reference", "merged.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	for name, got := range ck.Weights.Tensors {
		key := name + ".bf16"
		if strings.HasSuffix(name, "A_log") {
			key = name
		}
		rt, err := ref.Tensor(key)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want, err := rt.Float32()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.F32, want) {
			t.Fatalf("%s differs from the reference %s", name, key)
		}
	}
}
