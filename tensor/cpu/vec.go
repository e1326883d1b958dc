package cpu

// mulAddRows adds Σ_r c[r]·x[r*ldx : r*ldx+len(y)] to y, the rows in order
// (one fused multiply-add per term where the processor has them).
func mulAddRows(y, x []float32, ldx int, c []float32) {
	n, rows := len(y), len(c)
	if n == 0 || rows == 0 {
		return
	}
	_ = x[(rows-1)*ldx+n-1]
	n8 := 0
	if useAVX2 {
		n8 = n &^ 7
		if n8 > 0 {
			axpyRows(&y[0], &x[0], ldx, &c[0], rows, n8)
		}
	}
	if n8 == n {
		return
	}
	for r, a := range c {
		axpy(y[n8:], x[r*ldx+n8:r*ldx+n], a)
	}
}
