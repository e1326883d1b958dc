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

// tileAsm runs the assembly kernel k on rows rows.
func tileAsm(k gemmKernel, rows, kc int, a, b, c []float32, ldc int, load bool) {
	if k == kernAVX512 {
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
