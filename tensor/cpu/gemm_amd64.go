package cpu

import "golang.org/x/sys/cpu"

//go:generate go run gen_gemm_amd64.go

// hasAVX512 reports whether the processor (and its operating system) runs
// the AVX-512 micro-kernels.
var hasAVX512 = cpu.X86.HasAVX512F

func init() {
	switch {
	case hasAVX512:
		gemmKern = kernAVX512
	case useAVX2:
		gemmKern = kernAVX2
	}
}

// The GEMM micro-kernels (gemm_amd64.s, written by gen_gemm_amd64.go). Each
// computes r rows of a tile of C (row stride ldc) as described at
// gemmKernel.tile: a holds kc rows of mr values (12 for AVX-512, 6 for
// AVX2), of which the kernel reads the first r, b kc rows of a panel (nr =
// 32 values apart), and each output is the chain of fused multiply-adds
// over the kc rows from zero or, with load, from C. kern512rR computes R
// rows of 32 outputs with AVX-512, kern256rR R rows of 16 (the first 16
// columns of the panel at b) with AVX2 and FMA.

// microKernel is the signature of the assembly micro-kernels.
type microKernel func(kc int, a, b, c *float32, ldc int, load bool)

// kern512 and kern256 hold the kernels by row count.
var (
	kern512 = [...]microKernel{nil, kern512r1, kern512r2, kern512r3, kern512r4, kern512r5, kern512r6,
		kern512r7, kern512r8, kern512r9, kern512r10, kern512r11, kern512r12}
	kern256 = [...]microKernel{nil, kern256r1, kern256r2, kern256r3, kern256r4, kern256r5, kern256r6}
)

//go:noescape
func kern512r1(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r2(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r3(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r4(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r5(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r6(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r7(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r8(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r9(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r10(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r11(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512r12(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern256r1(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern256r2(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern256r3(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern256r4(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern256r5(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern256r6(kc int, a, b, c *float32, ldc int, load bool)

// kern512p holds the AVX-512 kernels by row count that also prefetch the
// panel's next kc rows into L2 as they run (gen_gemm_amd64.go's
// prefetching): the same arithmetic as kern512, so the same bits.
var kern512p = [...]microKernel{nil, kern512p1, kern512p2, kern512p3, kern512p4, kern512p5, kern512p6,
	kern512p7, kern512p8, kern512p9, kern512p10, kern512p11, kern512p12}

//go:noescape
func kern512p1(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p2(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p3(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p4(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p5(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p6(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p7(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p8(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p9(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p10(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p11(kc int, a, b, c *float32, ldc int, load bool)

//go:noescape
func kern512p12(kc int, a, b, c *float32, ldc int, load bool)

// The micro-kernels on operands read in place: as above, but row i of a
// starts at a+i·rs and its values lie cs apart (rs = 1, cs = mr is a packed
// block; rs = lda, cs = 1 a row-major matrix; rs = 1, cs = lda its
// transpose), and b's rows lie ldb apart.

// stridedKernel is the signature of the in-place micro-kernels.
type stridedKernel func(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

// kern512s and kern256s hold the in-place kernels by row count.
var (
	kern512s = [...]stridedKernel{nil, kern512s1, kern512s2, kern512s3, kern512s4, kern512s5, kern512s6,
		kern512s7, kern512s8, kern512s9, kern512s10, kern512s11, kern512s12}
	kern256s = [...]stridedKernel{nil, kern256s1, kern256s2, kern256s3, kern256s4, kern256s5, kern256s6}
)

//go:noescape
func kern512s1(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s2(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s3(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s4(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s5(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s6(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s7(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s8(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s9(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s10(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s11(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern512s12(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern256s1(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern256s2(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern256s3(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern256s4(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern256s5(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

//go:noescape
func kern256s6(kc int, a *float32, rs, cs int, b *float32, ldb int, c *float32, ldc int, load bool)

// tileAsmS runs the in-place assembly kernel k on rows rows.
func tileAsmS(k gemmKernel, rows, kc int, a []float32, rs, cs int, b []float32, ldb int, c []float32, ldc int, load bool) {
	if k == kernAVX512 {
		kern512s[rows](kc, &a[0], rs, cs, &b[0], ldb, &c[0], ldc, load)
		return
	}
	f := kern256s[rows]
	f(kc, &a[0], rs, cs, &b[0], ldb, &c[0], ldc, load)
	f(kc, &a[0], rs, cs, &b[16], ldb, &c[16], ldc, load)
}

// tileAsm runs the assembly kernel k on rows rows; with ahead, an AVX-512
// one that prefetches the panel's next kc rows (kern512p).
func tileAsm(k gemmKernel, rows, kc int, a, b, c []float32, ldc int, load, ahead bool) {
	if k == kernAVX512 {
		if ahead {
			kern512p[rows](kc, &a[0], &b[0], &c[0], ldc, load)
			return
		}
		kern512[rows](kc, &a[0], &b[0], &c[0], ldc, load)
		return
	}
	f := kern256[rows]
	f(kc, &a[0], &b[0], &c[0], ldc, load)
	f(kc, &a[0], &b[16], &c[16], ldc, load)
}

// widenBF16T8 widens eight bfloat16 rows (src, row stride lds) into eight
// columns of a panel (dst, rows nr apart), 8·blocks values of p:
// dst[p*nr+r] = src[r*lds+p] for r < 8, p < 8·blocks. It needs AVX2.
//
//go:noescape
func widenBF16T8(dst *float32, src *uint16, lds int, blocks int)

// transpose8 transposes eight float32 rows (src, row stride lds) into eight
// columns of dst (row stride ldd), 8·blocks values of p:
// dst[p*ldd+r] = src[r*lds+p] for r < 8, p < 8·blocks. It needs AVX2.
//
//go:noescape
func transpose8(dst *float32, ldd int, src *float32, lds int, blocks int)
