package half

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestBF16RoundTrip(t *testing.T) {
	cases := []struct {
		in   float32
		want uint16
	}{
		{1, 0x3f80},
		{-2, 0xc000},
		{float32(math.Inf(1)), 0x7f80},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81}, // above the tie
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // max float rounds to +Inf
	}
	for _, c := range cases {
		if got := BF16FromF32(c.in); got != c.want {
			t.Errorf("BF16FromF32(%v [%#x]) = %#x, want %#x", c.in, math.Float32bits(c.in), got, c.want)
		}
	}
	if n := BF16ToF32(BF16FromF32(float32(math.NaN()))); !math.IsNaN(float64(n)) {
		t.Errorf("NaN became %v", n)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		f := float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(20)-10)))
		got := RoundBF16(f)
		// the result is one of the two bf16 neighbours and the nearer one
		lo := math.Float32frombits(math.Float32bits(f) &^ 0xffff)
		hi := BF16ToF32(BF16FromF32(lo) + 1)
		dl, dh := math.Abs(float64(f-lo)), math.Abs(float64(hi-f))
		want := lo
		if dh < dl || (dh == dl && BF16FromF32(lo)&1 == 1) {
			want = hi
		}
		if got != want {
			t.Fatalf("RoundBF16(%v) = %v, want %v", f, got, want)
		}
	}
}

func TestF16(t *testing.T) {
	for _, f := range []float32{0.5, -3.25, 65504, 6.1035156e-05} {
		if got := F16ToF32(F16FromF32(f)); got != f {
			t.Errorf("F16 round trip of %v = %v", f, got)
		}
	}
}
