package cpu

// Small products on raw row-major slices, for the kernels inside one job of
// an operation (attention blocks, the delta rule's chunk products). They run
// on the calling goroutine; the caller parallelises at its own level.
//
// Each output is one sum over p in order 0..k−1 added to its starting value
// (zero unless add is set): a chain of fused multiply-adds in the packed
// GEMM's micro-kernels (gemm.go), the operands packed into scratch. So its
// bits depend on its own row and column alone: never on m, n, or the other
// rows, and they match MatMul's for the same row and column.

// gemmNT sets c[i*ldc+j] (adds to it when add is set) to Σ_p a[i*lda+p]·b[j*ldb+p]
// for i < m, j < n: c = a·bᵀ for a [m, k] and b [n, k].
func gemmNT(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	g := gemmArgs{m: m, n: n, k: k, a: a, lda: lda, c: c, ldc: ldc, add: add, kern: gemmKern,
		b: bSource{b: b, ldb: ldb, trans: true, n: n, k: k}}
	g.serial()
}

// gemmNN sets c[i*ldc+j] (adds to it when add is set) to Σ_p a[i*lda+p]·b[p*ldb+j]
// for i < m, j < n: c = a·b for a [m, k] and b [k, n].
func gemmNN(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, add bool) {
	g := gemmArgs{m: m, n: n, k: k, a: a, lda: lda, c: c, ldc: ldc, add: add, kern: gemmKern,
		b: bSource{b: b, ldb: ldb, n: n, k: k}}
	g.serial()
}
