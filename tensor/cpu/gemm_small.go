package cpu

// Small products on raw row-major slices, for the kernels inside one job of
// an operation (attention blocks, the delta rule's chunk products). They run
// on the calling goroutine; the caller parallelises at its own level.
//
// Each output is one sum over p in order 0..k−1 added to its starting value
// (zero unless add is set), so its bits depend on its own row and column
// alone: never on m, n, or the other rows.

// gemmNT sets c[i*ldc+j] (adds to it when add is set) to Σ_p a[i*lda+p]·b[j*ldb+p]
// for i < m, j < n: c = a·bᵀ for a [m, k] and b [n, k].
func gemmNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	for i := 0; i < m; i++ {
		ar := a[i*lda : i*lda+k]
		cr := c[i*ldc : i*ldc+n]
		for j := range cr {
			br := b[j*ldb : j*ldb+k]
			s := float32(0)
			if add {
				s = cr[j]
			}
			for p, v := range ar {
				s += v * br[p]
			}
			cr[j] = s
		}
	}
}

// gemmNN sets c[i*ldc+j] (adds to it when add is set) to Σ_p a[i*lda+p]·b[p*ldb+j]
// for i < m, j < n: c = a·b for a [m, k] and b [k, n].
func gemmNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	for i := 0; i < m; i++ {
		ar := a[i*lda : i*lda+k]
		cr := c[i*ldc : i*ldc+n]
		if !add {
			clear(cr)
		}
		for p, v := range ar {
			br := b[p*ldb : p*ldb+n]
			for j, w := range br {
				cr[j] += v * w
			}
		}
	}
}
