package cpu

import (
	"math/rand/v2"
	"testing"
)

func TestSizeClass(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{1, 1}, {7, 7}, {8, 8}, {9, 10}, {17, 20}, {1 << 14, 1 << 14}, {1<<14 + 1, 1<<14 + 1<<12}, {100000, 114688},
	} {
		if got := sizeClass(tc.n); got != tc.want {
			t.Errorf("sizeClass(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	r := rand.New(rand.NewPCG(rand.Uint64(), 1))
	for range 1000 {
		n := 1 + r.IntN(1<<26)
		c := sizeClass(n)
		if c < n || 4*c > 5*n+4 || sizeClass(c) != c {
			t.Fatalf("sizeClass(%d) = %d: not a fixed point within 25%% above n", n, c)
		}
	}
}

func TestFreedResultsAreRecycledZeroed(t *testing.T) {
	b := New()
	for _, n := range []int{minPooled, 3*minPooled + 5, 1 << 20} {
		for range 3 {
			x := newF32(n)
			for i := range x.f32 {
				x.f32[i] = float32(i + 1)
			}
			b.Free(x, x) // twice: the second is a no-op
			y := newF32(n)
			if len(y.f32) != n {
				t.Fatalf("len %d, want %d", len(y.f32), n)
			}
			for i, v := range y.f32 {
				if v != 0 {
					t.Fatalf("n %d: recycled buffer [%d] = %v, want 0", n, i, v)
				}
			}
			b.Free(y)
		}
	}
	// Tensors made from caller data are never handed out again.
	data := make([]float32, 2*minPooled)
	u, err := b.FromFloat32([]int{2, minPooled}, data)
	if err != nil {
		t.Fatal(err)
	}
	if u.(*Tensor).owned {
		t.Fatal("FromFloat32 tensor marked as recyclable")
	}
}
