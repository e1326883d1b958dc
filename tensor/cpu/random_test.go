package cpu

import (
	"math"
	"math/rand/v2"
)

// randFloats draws n normal values, none zero.
func randFloats(r *rand.Rand, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.NormFloat64())
		if out[i] == 0 {
			out[i] = 0.25
		}
	}
	return out
}

// near reports whether got is within tol·mag of want.
func near(got float32, want, mag, tol float64) bool {
	return math.Abs(float64(got)-want) <= tol*mag+1e-30
}
