package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/tensor"
)

// TestConvFusedBits checks the fused four-tap convolution (convSiLU4AVX2 and
// its scalar tail) against clearing the rows, four mulAdd passes and
// siluVec, bit for bit: channels past one 1,024-channel block with a tail of
// fewer than eight, segments continuing a history and starting from zero,
// rows shorter than the taps, and values that make products of −0.
func TestConvFusedBits(t *testing.T) {
	if !useAVX2 {
		t.Skip("the processor lacks AVX2: no fused convolution")
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 41))
	for _, ch := range []int{8, 37, 1024 + 13, 2048} {
		const kw = 4
		n := 70
		xs := randFloats(r, n*ch)
		ws := randFloats(r, ch*kw)
		for i := 0; i < len(xs); i += 17 {
			xs[i] = float32(math.Copysign(0, float64(-ws[(i%ch)*kw])))
		}
		b := &Backend{Threads: 3}
		x, _ := b.FromFloat32([]int{n, ch}, xs)
		w, _ := b.FromFloat32([]int{ch, kw}, ws)
		hist, _ := b.FromFloat32([]int{kw - 1, ch}, randFloats(r, (kw-1)*ch))
		segs := []tensor.Segment{{Len: 2, From: tensor.FromPrefix, Index: 0}, {Len: 40, Keep: true}, {Len: 28, From: tensor.FromPrefix, Index: 0, Keep: true}}
		run := func(fused bool) []float32 {
			defer func(v bool) { convFused = v }(convFused)
			convFused = fused
			y, kept, err := b.CausalConv1dSiLUSegments(x, w, []tensor.Tensor{hist}, segs)
			if err != nil {
				t.Fatal(err)
			}
			out := append([]float32(nil), y.(*Tensor).f32...)
			b.Free(y)
			b.Free(kept...)
			return out
		}
		got, want := run(true), run(false)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("ch %d: y[%d, %d] = %v fused, %v in passes", ch, i/ch, i%ch, got[i], want[i])
			}
		}
	}
}
