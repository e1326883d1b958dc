package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestAMXKernel checks the AMX kernel against the plain Go reference at the
// models' shapes and odd ones, and that it gives a row the same bits alone
// and in a batch. It runs where the processor has AMX-BF16 and Linux grants
// the tile state.
func TestAMXKernel(t *testing.T) {
	if !hasAMX {
		if cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 {
			t.Skip("the processor has AMX-BF16 but the OS did not grant the tile state (arch_prctl)")
		}
		t.Skip("no AMX-BF16 on this processor")
	}
	r := rand.New(rand.NewPCG(13, 14))
	b := &Backend{Threads: 4}
	for _, sh := range [][3]int{{1, 1, 1}, {31, 33, 31}, {33, 64, 64}, {40, 96, 1024}, {70, 100, 3584}, {65, 1024, 2048}} {
		m, n, k := sh[0], sh[1], sh[2]
		xs, ws := bf16Case(r, m, n, k)
		want, scale := bf16Ref(xs, ws, m, n, k), absRef(xs, ws, m, n, k)
		got := runBF16(b, bf16AMX, xs, ws, m, n, k)
		for i := range got {
			if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= 1e-5*scale[i]) {
				t.Fatalf("%dx%dx%d: y[%d] = %v, reference %v (Σ|x̂w| %.3g)", m, n, k, i, got[i], want[i], scale[i])
			}
		}
		for _, i := range []int{0, m / 2, m - 1} {
			row := runBF16(&Backend{Threads: 1}, bf16AMX, xs[i*k:(i+1)*k], ws, 1, n, k)
			for j := range row {
				if math.Float32bits(row[j]) != math.Float32bits(got[i*n+j]) {
					t.Fatalf("%dx%dx%d: row %d col %d alone %v, in the batch %v", m, n, k, i, j, row[j], got[i*n+j])
				}
			}
		}
	}
}
