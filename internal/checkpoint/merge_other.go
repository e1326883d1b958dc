//go:build !amd64

package checkpoint

// loraAcc sets acc[i] = Σ_k b[k]·a[k·in+i] for every column (see loraAccGo).
func loraAcc(acc []float32, a []float64, b []float64, in int) { loraAccGo(acc, a, b, in, 0) }

// mergeRowBF16 has no vector form here: ok is false and merge.run does the row.
func mergeRowBF16(dst []uint16, w []byte, acc []float32, s float32) (ok bool) { return false }
