package checkpoint

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kevgo/kev/internal/half"
)

// TestLoRAAccKernel checks loraAcc (the AVX2/FMA kernel where the CPU has it) against loraAccGo bit for bit on
// random factors of every magnitude fp32 holds, normal and subnormal, for column counts around the kernel's 16 and
// ranks 0 to 17.
func TestLoRAAccKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	val := func() float64 {
		switch rng.IntN(6) {
		case 0:
			return float64(float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(200)-100)))
		case 1:
			return float64(math.Float32frombits(rng.Uint32() & 0x807fffff)) // subnormal or zero
		case 2:
			return float64(float32(rng.NormFloat64() * 1e30))
		default:
			return float64(float32(rng.NormFloat64() * 0.02))
		}
	}
	for _, in := range []int{1, 15, 16, 17, 31, 32, 48, 100, 2560} {
		for _, r := range []int{0, 1, 3, 4, 8, 16, 17} {
			a := make([]float64, r*in)
			for i := range a {
				a[i] = val()
			}
			b := make([]float64, r)
			for i := range b {
				b[i] = val()
			}
			got := make([]float32, in)
			for i := range got {
				got[i] = float32(rng.NormFloat64()) // loraAcc must overwrite
			}
			want := make([]float32, in)
			loraAcc(got, a, b, in)
			loraAccGo(want, a, b, in, 0)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
					t.Fatalf("in %d, r %d, column %d: %v (%#x), want %v (%#x)", in, r, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

func BenchmarkLoRAAcc(b *testing.B) {
	const in, r = 4096, 16
	rng := rand.New(rand.NewPCG(1, 2))
	a := make([]float64, r*in)
	for i := range a {
		a[i] = float64(float32(rng.NormFloat64()))
	}
	bk := make([]float64, r)
	for i := range bk {
		bk[i] = float64(float32(rng.NormFloat64()))
	}
	acc := make([]float32, in)
	b.Run("kernel", func(b *testing.B) {
		b.SetBytes(in * 2)
		for range b.N {
			loraAcc(acc, a, bk, in)
		}
	})
	b.Run("go", func(b *testing.B) {
		b.SetBytes(in * 2)
		for range b.N {
			loraAccGo(acc, a, bk, in, 0)
		}
	})
}

// TestMergeRowBF16 checks the vector form of a bf16 merge row against the scalar arithmetic bit for bit: weights of
// every kind (normal, subnormal, zero, infinite, NaN), sums that land on rounding ties, and every tail length.
func TestMergeRowBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	specials := []uint16{0, 0x8000, 0x7f80, 0xff80, 0x7fc1, 0xffa0, 0x0001, 0x807f, 0x7f7f, 0xff7f}
	for n := 1; n <= 70; n++ {
		for trial := range 20 {
			w := make([]byte, 2*n)
			acc := make([]float32, n)
			for i := range n {
				var bits uint16
				if rng.IntN(8) == 0 {
					bits = specials[rng.IntN(len(specials))]
				} else {
					bits = half.BF16FromF32(float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20)))
				}
				w[2*i], w[2*i+1] = byte(bits), byte(bits>>8)
				switch rng.IntN(4) {
				case 0: // lands exactly half a bf16 step from w: a tie
					acc[i] = math.Float32frombits(uint32(bits)<<16|0x8000) - half.BF16ToF32(bits)
				case 1:
					acc[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
				default:
					acc[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(40)-20))
				}
			}
			s := float32([]float64{1, 2, 0.5, 1.0 / 3}[trial%4])
			got := make([]uint16, n)
			if !mergeRowBF16(got, w, acc, s) {
				t.Skip("no vector form on this CPU")
			}
			for i := range n {
				wi := half.BF16ToF32(uint16(w[2*i]) | uint16(w[2*i+1])<<8)
				want := half.BF16FromF32(wi + float32(acc[i]*s))
				if got[i] != want {
					t.Fatalf("n %d, element %d: w %v, acc %v, s %v: %#04x, want %#04x", n, i, wi, acc[i], s, got[i], want)
				}
			}
		}
	}
}
