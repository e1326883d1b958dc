package mt19937

import (
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"slices"
	"testing"
)

// vectors is testdata/vectors.json, written by testdata/gen_vectors.py from CPython's random module.
type vectors struct {
	Python string `json:"python"`
	Cases  []struct {
		Seed     string      `json:"seed"`
		U32      []uint32    `json:"u32"`
		Bits     [][2]any    `json:"bits"`
		Below    [][2]uint64 `json:"below"`
		Random   []float64   `json:"random"`
		Shuffles [][]int     `json:"shuffles"`
		Permute  struct {
			Keys []string   `json:"keys"`
			Runs [][]string `json:"runs"`
		} `json:"permute"`
	} `json:"cases"`
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	data, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) == 0 {
		t.Fatal("no cases")
	}
	return v
}

func seeded(t *testing.T, seed string) *Rand {
	t.Helper()
	b, ok := new(big.Int).SetString(seed, 10)
	if !ok {
		t.Fatalf("bad seed %q", seed)
	}
	r := NewBig(b)
	if b.IsInt64() {
		// New and NewBig must agree wherever both apply.
		r2 := New(b.Int64())
		if r.mt != r2.mt || r.mti != r2.mti {
			t.Fatalf("seed %s: New and NewBig disagree", seed)
		}
	}
	return r
}

// TestCPythonStream replays each case's draws in the generator script's order on one stream.
func TestCPythonStream(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Cases {
		t.Run("seed="+c.Seed, func(t *testing.T) {
			r := seeded(t, c.Seed)
			for i, want := range c.U32 {
				if got := r.Uint32(); got != want {
					t.Fatalf("getrandbits(32) #%d = %d, want %d", i, got, want)
				}
			}
			for _, kv := range c.Bits {
				k := int(kv[0].(float64))
				want := kv[1].(string)
				var got string
				if k <= 64 {
					got = fmt.Sprint(r.Bits(k))
				} else {
					got = r.BigBits(k).String()
				}
				if got != want {
					t.Fatalf("getrandbits(%d) = %s, want %s", k, got, want)
				}
			}
			for _, nb := range c.Below {
				if got := r.Below(nb[0]); got != nb[1] {
					t.Fatalf("_randbelow(%d) = %d, want %d", nb[0], got, nb[1])
				}
			}
			for i, want := range c.Random {
				if got := r.Float64(); got != want {
					t.Fatalf("random() #%d = %v, want %v", i, got, want)
				}
			}
			for _, want := range c.Shuffles {
				x := make([]int, len(want))
				for i := range x {
					x[i] = i
				}
				r.Shuffle(len(x), func(i, j int) { x[i], x[j] = x[j], x[i] })
				if !slices.Equal(x, want) {
					t.Fatalf("shuffle(range(%d)) = %v, want %v", len(x), x, want)
				}
			}
		})
	}
}

// TestPermuteOrders checks Kev's permute order recipe: a fresh copy of the keys per run, shuffled after run 0.
func TestPermuteOrders(t *testing.T) {
	v := loadVectors(t)
	for _, c := range v.Cases {
		r := seeded(t, c.Seed)
		for i, want := range c.Permute.Runs {
			order := slices.Clone(c.Permute.Keys)
			if i > 0 {
				r.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
			}
			if !slices.Equal(order, want) {
				t.Fatalf("seed %s run %d: %v, want %v", c.Seed, i, order, want)
			}
		}
	}
}

// TestBigBitsMatchesBits checks the two getrandbits forms against each other on fresh seeds and every width.
func TestBigBitsMatchesBits(t *testing.T) {
	for seed := int64(-3); seed < 40; seed += 7 {
		a, b := New(seed), New(seed)
		for k := 0; k <= 64; k++ {
			x := a.Bits(k)
			y := b.BigBits(k)
			if !y.IsUint64() || y.Uint64() != x {
				t.Fatalf("seed %d k %d: Bits %d, BigBits %s", seed, k, x, y)
			}
		}
	}
}

func TestBelowRange(t *testing.T) {
	r := New(7)
	if got := r.Below(0); got != 0 {
		t.Fatalf("Below(0) = %d", got)
	}
	for n := uint64(1); n < 300; n++ {
		if v := r.Below(n); v >= n {
			t.Fatalf("Below(%d) = %d", n, v)
		}
	}
}

func TestSignDropped(t *testing.T) {
	a, b := New(-123456789012), New(123456789012)
	for range 1000 {
		if a.Uint32() != b.Uint32() {
			t.Fatal("New(-x) and New(x) differ")
		}
	}
}

func ExampleRand_Shuffle() {
	keys := []string{"returns", "shipping", "billing"}
	r := New(0) // Python: random.Random(0)
	r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	fmt.Println(keys)
	// Output: [returns billing shipping]
}

func BenchmarkUint32(b *testing.B) {
	r := New(42)
	for b.Loop() {
		r.Uint32()
	}
}
