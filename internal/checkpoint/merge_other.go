//go:build !amd64

package checkpoint

// loraAcc sets acc[i] = Σ_k b[k]·a[k·in+i] for every column (see loraAccGo).
func loraAcc(acc []float32, a []float64, b []float64, in int) { loraAccGo(acc, a, b, in, 0) }
