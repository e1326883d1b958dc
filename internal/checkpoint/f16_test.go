package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kevgo/kev/internal/half"
	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/safetensors"
)

// TestMergeF16 checks that fp16 weights are the fp32 merge (bit-exact with torch's, TestGoldenMerge) rounded once to
// IEEE binary16, tensors that stay fp32 unchanged, from Open and OpenStream alike.
func TestMergeF16(t *testing.T) {
	for _, fx := range goldenFixtures {
		dir := goldenDir(t, fx)
		kev, base := filepath.Join(dir, "kev"), filepath.Join(dir, "base")
		f32, err := Open(kev, base, Options{DType: qwen35.F32})
		if err != nil {
			t.Fatal(err)
		}
		h, err := Open(kev, base, Options{DType: qwen35.F16})
		if err != nil {
			t.Fatal(err)
		}
		st, err := OpenStream(kev, base, StreamOptions{Options: Options{DType: qwen35.F16}})
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range f32.Weights.Tensors {
			got := h.Weights.Tensors[name]
			streamed, err := st.Weights.Lookup(name, w.Shape...)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range []*qwen35.Tensor{got, streamed} {
				if KeepsF32(name) {
					if g.DType != qwen35.F32 || !equalF32(g.F32, w.F32) {
						t.Errorf("%s %s: not kept fp32", fx, name)
					}
					continue
				}
				if g.DType != qwen35.F16 || len(g.F16) != len(w.F32) {
					t.Fatalf("%s %s: dtype %v, %d values", fx, name, g.DType, len(g.F16))
				}
				for i, v := range w.F32 {
					if g.F16[i] != half.F16FromF32(v) {
						t.Errorf("%s %s[%d] = %#04x, want fp16(%v) = %#04x", fx, name, i, g.F16[i], v, half.F16FromF32(v))
						break
					}
				}
			}
		}
		st.Close()
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestF16Base rewrites a golden base with every bf16 tensor stored as F16 and loads it as fp16 and as fp32: the
// values are the file's, and tensors no adapter touches point into the file when streamed.
func TestF16Base(t *testing.T) {
	dir := goldenDir(t, goldenFixtures[0])
	kev, base := filepath.Join(dir, "kev"), filepath.Join(dir, "base")
	tmp := t.TempDir()
	ents, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src := filepath.Join(base, e.Name())
		dst := filepath.Join(tmp, e.Name())
		if !strings.HasSuffix(e.Name(), ".safetensors") {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		f, err := safetensors.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		var out []safetensors.Tensor
		for _, n := range f.Names() {
			ts, _ := f.Tensor(n)
			if ts.DType != safetensors.BF16 {
				out = append(out, *ts)
				continue
			}
			v, err := ts.Float32()
			if err != nil {
				t.Fatal(err)
			}
			h, err := safetensors.FromFloat32(n, safetensors.F16, ts.Shape, v)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, h)
		}
		if err := safetensors.WriteFile(dst, out, nil); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	f32, err := Open(kev, tmp, Options{DType: qwen35.F32})
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStream(kev, tmp, StreamOptions{Options: Options{DType: qwen35.F16}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mapped := 0
	for name, w := range f32.Weights.Tensors {
		g, err := st.Weights.Lookup(name, w.Shape...)
		if err != nil {
			t.Fatal(err)
		}
		if KeepsF32(name) {
			continue
		}
		if g.Mapped {
			mapped++
		}
		for i, v := range w.F32 {
			if g.F16[i] != half.F16FromF32(v) {
				t.Fatalf("%s[%d]: %#04x, want %#04x", name, i, g.F16[i], half.F16FromF32(v))
			}
		}
	}
	if mapped == 0 {
		t.Error("no F16 tensor points into the file")
	}
}
