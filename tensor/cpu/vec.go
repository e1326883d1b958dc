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
// a_i = a[i*lda : i*lda+k] and b_j = b[j*ldb : j*ldb+k].
func addABt(y []float32, ldy int, a []float32, lda int, b []float32, ldb int, m, n, k int) {
	if m == 0 || n == 0 || k == 0 {
		return
	}
	_ = y[(m-1)*ldy+n-1]
	_ = a[(m-1)*lda+k-1]
	_ = b[(n-1)*ldb+k-1]
	k8, j := 0, 0
	if useAVX2 {
		k8 = k &^ 7
	}
	if k8 > 0 {
		for ; j+4 <= n; j += 4 {
			i := 0
			for ; i+3 <= m; i += 3 {
				dot3x4(&a[i*lda], lda, &b[j*ldb], ldb, k8, &y[i*ldy+j], ldy)
			}
			for ; i < m; i++ {
				dot1x4(&a[i*lda], &b[j*ldb], ldb, k8, &y[i*ldy+j])
			}
		}
	}
	// Columns below j still need K from k8; those from j need all of it.
	for i := 0; i < m; i++ {
		ar := a[i*lda : i*lda+k]
		for jj := 0; jj < n; jj++ {
			lo := k8
			if jj >= j {
				lo = 0
			}
			if lo < k {
				y[i*ldy+jj] += dot(ar[lo:], b[jj*ldb+lo:jj*ldb+k])
			}
		}
	}
}
