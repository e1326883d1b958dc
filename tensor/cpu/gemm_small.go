package cpu

// Small products on raw row-major slices, for the kernels inside one job of
// an operation (attention blocks, the delta rule's chunk products). They run
// on the calling goroutine; the caller parallelises at its own level.
//
// Each output is one sum over p in order 0..k−1 added to its starting value
// (zero unless add is set): a chain of fused multiply-adds in the packed
// GEMM's micro-kernels (gemm.go). The micro-kernels read A where it lies,
// in either orientation, and B's rows where they lie; only B stored
// transposed (gemmNT) or a last panel of fewer than nr columns is copied
// into scratch first. So an output's bits depend on its own row and column
// alone: never on m, n, or the other rows, and they match MatMul's for the
// same row and column.

// kcSmall is the run of K a micro-kernel call of gemmS takes: 128 values
// of a 32-column panel are 16 KiB.
const kcSmall = 128

// gemmS sets c[i*ldc+j] (adds to it when add is set) to Σ_p A(i,p)·b[p*ldb+j]
// for i < m, j < n, where A(i,p) = a[i*rs+p*cs]: a row-major matrix (rs its
// row stride, cs = 1) or the transpose of one (rs = 1, cs its row stride).
func gemmS(m, n, k int, a []float32, rs, cs int, b []float32, ldb int, c []float32, ldc int, add bool) {
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 {
		if !add {
			for i := range m {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		return
	}
	kern := gemmKern
	mr := kern.mr()
	// As few row blocks as the kernel allows, of even sizes: a short last
	// block runs slower (8 rows of 32 columns run as fast as 12, 4 rows
	// about 15% slower).
	tiles := (m + mr - 1) / mr
	var s *gemmScratch
	for j0 := 0; j0 < n; j0 += nr {
		cols := min(nr, n-j0)
		if cols == nr {
			// A run of K at a time, so that the panel's run and a row
			// block's stay in L1 together; each later run continues the
			// chains from C.
			for pc := 0; pc < k; pc += kcSmall {
				kc := min(kcSmall, k-pc)
				for t := range tiles {
					i0, i1 := t*m/tiles, (t+1)*m/tiles
					kern.tileS(i1-i0, kc, a[i0*rs+pc*cs:], rs, cs, b[pc*ldb+j0:], ldb, c[i0*ldc+j0:], ldc, add || pc > 0)
				}
			}
			continue
		}
		// A last panel of fewer than nr columns: B and C through zero-padded
		// copies.
		if s == nil {
			s = scratchPool.Get().(*gemmScratch)
			defer scratchPool.Put(s)
		}
		if len(s.b) < k*nr {
			s.b = make([]float32, k*nr)
		}
		if len(s.c) < mr*nr {
			s.c = make([]float32, mr*nr)
		}
		bp, t := s.b[:k*nr], s.c[:mr*nr]
		for p := range k {
			copy(bp[p*nr:p*nr+cols], b[p*ldb+j0:p*ldb+j0+cols])
			clear(bp[p*nr+cols : (p+1)*nr])
		}
		for i0 := 0; i0 < m; i0 += mr {
			rows := min(mr, m-i0)
			if add {
				for i := range rows {
					copy(t[i*nr:i*nr+cols], c[(i0+i)*ldc+j0:])
				}
			}
			kern.tileS(rows, k, a[i0*rs:], rs, cs, bp, nr, t, nr, add)
			for i := range rows {
				copy(c[(i0+i)*ldc+j0:(i0+i)*ldc+j0+cols], t[i*nr:])
			}
		}
	}
}

// gemmNT sets c[i*ldc+j] (adds to it when add is set) to Σ_p a[i*lda+p]·b[j*ldb+p]
// for i < m, j < n: c = a·bᵀ for a [m, k] and b [n, k].
func gemmNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	if m <= 0 || n <= 0 || k <= 0 {
		gemmS(m, n, k, a, lda, 1, nil, 0, c, ldc, add)
		return
	}
	s := scratchPool.Get().(*gemmScratch)
	if len(s.a) < k*n {
		s.a = make([]float32, k*n)
	}
	transpose(s.a, n, b, ldb, n, k)
	gemmS(m, n, k, a, lda, 1, s.a, n, c, ldc, add)
	scratchPool.Put(s)
}

// gemmNN sets c[i*ldc+j] (adds to it when add is set) to Σ_p a[i*lda+p]·b[p*ldb+j]
// for i < m, j < n: c = a·b for a [m, k] and b [k, n].
func gemmNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	gemmS(m, n, k, a, lda, 1, b, ldb, c, ldc, add)
}

// transpose sets dst[p*ldd+j] to src[j*lds+p] for j < n, p < k.
func transpose(dst []float32, ldd int, src []float32, lds, n, k int) {
	if n <= 0 || k <= 0 {
		return
	}
	_, _ = dst[(k-1)*ldd+n-1], src[(n-1)*lds+k-1]
	j0, k8 := 0, 0
	if useAVX2 {
		// Eight rows of src at a time, eight values of each at a time.
		if k8 = k &^ 7; k8 > 0 {
			for ; j0+8 <= n; j0 += 8 {
				transpose8(&dst[j0], ldd, &src[j0*lds], lds, k8/8)
			}
		}
	}
	for j := 0; j < n; j++ {
		p0 := k8
		if j >= j0 {
			p0 = 0
		}
		for p, v := range src[j*lds+p0 : j*lds+k] {
			dst[(p0+p)*ldd+j] = v
		}
	}
}
