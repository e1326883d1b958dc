package checkpoint

import (
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/internal/qwen35"
	"github.com/kevgo/kev/safetensors"
)

// One Qwen3.5-4B MLP matrix (9216 × 2560) merged with a rank-16 adapter.
func benchMerge(b *testing.B, dt qwen35.DType) {
	const rows, in, r = 9216, 2560, 16
	rng := rand.New(rand.NewPCG(1, 2))
	w, _ := safetensors.FromFloat32("w", safetensors.BF16, []int{rows, in}, values(rng, rows*in, 0.02))
	a, _ := safetensors.FromFloat32("a", safetensors.F32, []int{r, in}, values(rng, r*in, 0.02))
	bb, _ := safetensors.FromFloat32("b", safetensors.F32, []int{rows, r}, values(rng, rows*r, 0.02))
	out := &qwen35.Tensor{Shape: []int{rows, in}, DType: dt}
	if dt == qwen35.F32 {
		out.F32 = make([]float32, rows*in)
	} else {
		out.BF16 = make([]uint16, rows*in)
	}
	b.SetBytes(int64(rows * in * 2))
	b.ResetTimer()
	for range b.N {
		m, err := newMerge(&w, &loraPair{a: &a, b: &bb}, out, 2)
		if err != nil {
			b.Fatal(err)
		}
		if err := runJobs(m.jobs(), 2); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMergeBF16(b *testing.B) { benchMerge(b, qwen35.BF16) }
func BenchmarkMergeF32(b *testing.B)  { benchMerge(b, qwen35.F32) }

func BenchmarkConvertBF16ToF32(b *testing.B) {
	const n = 9216 * 2560
	rng := rand.New(rand.NewPCG(3, 4))
	w, _ := safetensors.FromFloat32("w", safetensors.BF16, []int{n}, values(rng, n, 0.02))
	out := &qwen35.Tensor{Shape: []int{n}, DType: qwen35.F32, F32: make([]float32, n)}
	b.SetBytes(n * 2)
	b.ResetTimer()
	for range b.N {
		if err := runJobs(convertJobs(&w, out), 2); err != nil {
			b.Fatal(err)
		}
	}
}
