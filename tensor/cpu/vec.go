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

// addABt adds a_i · b_j to y[i*ldy+j] for i < m and j < n, where
// a_i = a[i*lda : i*lda+k] and b_j = b[j*ldb : j*ldb+k]. Every element gets
// the same arithmetic wherever it sits in y (the last n mod 4 columns run
// through the same kernel on zero-padded copies).
func addABt(y []float32, ldy int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	if m == 0 || n == 0 || k == 0 {
		return
	}
	_ = y[(m-1)*ldy+n-1]
	_ = a[(m-1)*lda+k-1]
	_ = b[(n-1)*ldb+k-1]
	k8 := 0
	if useAVX2 {
		k8 = k &^ 7
	}
	if k8 > 0 {
		j := 0
		for ; j+4 <= n; j += 4 {
			tiles(y[j:], ldy, a, lda, b[j*ldb:], ldb, m, k8)
		}
		if rem := n - j; rem > 0 {
			bt, yt := make([]float32, 4*k8), make([]float32, 4*m)
			for c := range rem {
				copy(bt[c*k8:(c+1)*k8], b[(j+c)*ldb:])
			}
			tiles(yt, 4, a, lda, bt, k8, m, k8)
			for i := range m {
				for c := range rem {
					y[i*ldy+j+c] += yt[i*4+c]
				}
			}
		}
	}
	if k8 == k {
		return
	}
	for i := 0; i < m; i++ {
		ar := a[i*lda+k8 : i*lda+k]
		for j := 0; j < n; j++ {
			y[i*ldy+j] += dot(ar, b[j*ldb+k8:j*ldb+k])
		}
	}
}

// tiles adds a_i · b_c (k8 columns, a positive multiple of 8) to
// y[i*ldy+c] for i < m and c < 4 with the assembly kernels.
func tiles(y []float32, ldy int, a []float32, lda int, b []float32, ldb int, m, k8 int) {
	i := 0
	for ; i+3 <= m; i += 3 {
		dot3x4(&a[i*lda], lda, &b[0], ldb, k8, &y[i*ldy], ldy)
	}
	for ; i < m; i++ {
		dot1x4(&a[i*lda], &b[0], ldb, k8, &y[i*ldy])
	}
}
