#include "textflag.h"

// The Go assembler has no mnemonic for VDPBF16PS, so each one is spelled in
// bytes (EVEX.512.F3.0F38.W0 52 /r); the comment above each macro gives the
// instruction in AT&T order (sources, then the destination).
//
// VDPBF16PS zmm_acc, zmm_a, zmm_b: for each of the sixteen 32-bit lanes,
// acc += a.hi·b.hi, then acc += a.lo·b.lo, where lo and hi are the lane's two
// bfloat16 halves. DP_r_h adds the x pair of row r (broadcast in Z26 + r mod 6)
// times the weight pairs of columns 16h..16h+15 (Z24 + h) to accumulator
// Z(2r + h).

// vdpbf16ps %zmm24,%zmm26,%zmm0
#define DP_0_0 BYTE $0x62; BYTE $0x92; BYTE $0x2e; BYTE $0x40; BYTE $0x52; BYTE $0xc0
// vdpbf16ps %zmm25,%zmm26,%zmm1
#define DP_0_1 BYTE $0x62; BYTE $0x92; BYTE $0x2e; BYTE $0x40; BYTE $0x52; BYTE $0xc9
// vdpbf16ps %zmm24,%zmm27,%zmm2
#define DP_1_0 BYTE $0x62; BYTE $0x92; BYTE $0x26; BYTE $0x40; BYTE $0x52; BYTE $0xd0
// vdpbf16ps %zmm25,%zmm27,%zmm3
#define DP_1_1 BYTE $0x62; BYTE $0x92; BYTE $0x26; BYTE $0x40; BYTE $0x52; BYTE $0xd9
// vdpbf16ps %zmm24,%zmm28,%zmm4
#define DP_2_0 BYTE $0x62; BYTE $0x92; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xe0
// vdpbf16ps %zmm25,%zmm28,%zmm5
#define DP_2_1 BYTE $0x62; BYTE $0x92; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xe9
// vdpbf16ps %zmm24,%zmm29,%zmm6
#define DP_3_0 BYTE $0x62; BYTE $0x92; BYTE $0x16; BYTE $0x40; BYTE $0x52; BYTE $0xf0
// vdpbf16ps %zmm25,%zmm29,%zmm7
#define DP_3_1 BYTE $0x62; BYTE $0x92; BYTE $0x16; BYTE $0x40; BYTE $0x52; BYTE $0xf9
// vdpbf16ps %zmm24,%zmm30,%zmm8
#define DP_4_0 BYTE $0x62; BYTE $0x12; BYTE $0x0e; BYTE $0x40; BYTE $0x52; BYTE $0xc0
// vdpbf16ps %zmm25,%zmm30,%zmm9
#define DP_4_1 BYTE $0x62; BYTE $0x12; BYTE $0x0e; BYTE $0x40; BYTE $0x52; BYTE $0xc9
// vdpbf16ps %zmm24,%zmm31,%zmm10
#define DP_5_0 BYTE $0x62; BYTE $0x12; BYTE $0x06; BYTE $0x40; BYTE $0x52; BYTE $0xd0
// vdpbf16ps %zmm25,%zmm31,%zmm11
#define DP_5_1 BYTE $0x62; BYTE $0x12; BYTE $0x06; BYTE $0x40; BYTE $0x52; BYTE $0xd9
// vdpbf16ps %zmm24,%zmm26,%zmm12
#define DP_6_0 BYTE $0x62; BYTE $0x12; BYTE $0x2e; BYTE $0x40; BYTE $0x52; BYTE $0xe0
// vdpbf16ps %zmm25,%zmm26,%zmm13
#define DP_6_1 BYTE $0x62; BYTE $0x12; BYTE $0x2e; BYTE $0x40; BYTE $0x52; BYTE $0xe9
// vdpbf16ps %zmm24,%zmm27,%zmm14
#define DP_7_0 BYTE $0x62; BYTE $0x12; BYTE $0x26; BYTE $0x40; BYTE $0x52; BYTE $0xf0
// vdpbf16ps %zmm25,%zmm27,%zmm15
#define DP_7_1 BYTE $0x62; BYTE $0x12; BYTE $0x26; BYTE $0x40; BYTE $0x52; BYTE $0xf9
// vdpbf16ps %zmm24,%zmm28,%zmm16
#define DP_8_0 BYTE $0x62; BYTE $0x82; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xc0
// vdpbf16ps %zmm25,%zmm28,%zmm17
#define DP_8_1 BYTE $0x62; BYTE $0x82; BYTE $0x1e; BYTE $0x40; BYTE $0x52; BYTE $0xc9
// vdpbf16ps %zmm24,%zmm29,%zmm18
#define DP_9_0 BYTE $0x62; BYTE $0x82; BYTE $0x16; BYTE $0x40; BYTE $0x52; BYTE $0xd0
// vdpbf16ps %zmm25,%zmm29,%zmm19
#define DP_9_1 BYTE $0x62; BYTE $0x82; BYTE $0x16; BYTE $0x40; BYTE $0x52; BYTE $0xd9
// vdpbf16ps %zmm24,%zmm30,%zmm20
#define DP_10_0 BYTE $0x62; BYTE $0x82; BYTE $0x0e; BYTE $0x40; BYTE $0x52; BYTE $0xe0
// vdpbf16ps %zmm25,%zmm30,%zmm21
#define DP_10_1 BYTE $0x62; BYTE $0x82; BYTE $0x0e; BYTE $0x40; BYTE $0x52; BYTE $0xe9
// vdpbf16ps %zmm24,%zmm31,%zmm22
#define DP_11_0 BYTE $0x62; BYTE $0x82; BYTE $0x06; BYTE $0x40; BYTE $0x52; BYTE $0xf0
// vdpbf16ps %zmm25,%zmm31,%zmm23
#define DP_11_1 BYTE $0x62; BYTE $0x82; BYTE $0x06; BYTE $0x40; BYTE $0x52; BYTE $0xf9

// BCAST broadcasts the 32-bit x pair at off(SI) into reg.
#define BCAST(off, reg) VPBROADCASTD off(SI), reg

// func dpbf16x12(x *uint32, w *uint32, kh int, y *float32, ldy int)
//
// Sets y[r*ldy + c] for r < 12, c < 32 to the bf16 dot products of twelve
// rows of x against a 32-column weight panel. x holds kh groups of twelve
// 32-bit pairs (one per row), w holds kh groups of 32 pairs (one per
// column); kh > 0. Each output is one lane's sum, pair after pair in order.
TEXT ·dpbf16x12(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ kh+16(FP), CX
	MOVQ y+24(FP), DX
	MOVQ ldy+32(FP), BX
	SHLQ $2, BX

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

loop12:
	VMOVDQU32 (DI), Z24
	VMOVDQU32 64(DI), Z25
	BCAST(0, Z26)
	DP_0_0
	DP_0_1
	BCAST(4, Z27)
	DP_1_0
	DP_1_1
	BCAST(8, Z28)
	DP_2_0
	DP_2_1
	BCAST(12, Z29)
	DP_3_0
	DP_3_1
	BCAST(16, Z30)
	DP_4_0
	DP_4_1
	BCAST(20, Z31)
	DP_5_0
	DP_5_1
	BCAST(24, Z26)
	DP_6_0
	DP_6_1
	BCAST(28, Z27)
	DP_7_0
	DP_7_1
	BCAST(32, Z28)
	DP_8_0
	DP_8_1
	BCAST(36, Z29)
	DP_9_0
	DP_9_1
	BCAST(40, Z30)
	DP_10_0
	DP_10_1
	BCAST(44, Z31)
	DP_11_0
	DP_11_1
	ADDQ $48, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop12

	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z2, (DX)
	VMOVUPS Z3, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z4, (DX)
	VMOVUPS Z5, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z6, (DX)
	VMOVUPS Z7, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z8, (DX)
	VMOVUPS Z9, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z10, (DX)
	VMOVUPS Z11, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z12, (DX)
	VMOVUPS Z13, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z14, (DX)
	VMOVUPS Z15, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z16, (DX)
	VMOVUPS Z17, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z18, (DX)
	VMOVUPS Z19, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z20, (DX)
	VMOVUPS Z21, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z22, (DX)
	VMOVUPS Z23, 64(DX)
	VZEROUPPER
	RET

// func dpbf16x4(x *uint32, w *uint32, kh int, y *float32, ldy int)
//
// dpbf16x12 for four rows: x holds kh groups of four pairs. Each output gets
// the same instructions as in dpbf16x12, so its bits do not depend on the
// kernel that computed it.
TEXT ·dpbf16x4(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ kh+16(FP), CX
	MOVQ y+24(FP), DX
	MOVQ ldy+32(FP), BX
	SHLQ $2, BX

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7

loop4:
	VMOVDQU32 (DI), Z24
	VMOVDQU32 64(DI), Z25
	BCAST(0, Z26)
	DP_0_0
	DP_0_1
	BCAST(4, Z27)
	DP_1_0
	DP_1_1
	BCAST(8, Z28)
	DP_2_0
	DP_2_1
	BCAST(12, Z29)
	DP_3_0
	DP_3_1
	ADDQ $16, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop4

	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z2, (DX)
	VMOVUPS Z3, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z4, (DX)
	VMOVUPS Z5, 64(DX)
	ADDQ    BX, DX
	VMOVUPS Z6, (DX)
	VMOVUPS Z7, 64(DX)
	VZEROUPPER
	RET

// func roundBF16Pairs(dst *uint32, src *float32, n int)
//
// Sets dst[i] for i < n/2 to the pair (src[2i], src[2i+1]) rounded to bf16
// (to nearest even; VCVTNE2PS2BF16 reads subnormal inputs as zero), the even
// element in the low half; n is a positive multiple of 32.
TEXT ·roundBF16Pairs(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

loopcvt:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	// vcvtne2ps2bf16 %zmm0,%zmm1,%zmm2: the low 16 bf16 of Z2 from Z0, the high from Z1
	BYTE $0x62; BYTE $0xf2; BYTE $0x77; BYTE $0x48; BYTE $0x72; BYTE $0xd0
	VMOVDQU32 Z2, (DI)
	ADDQ $128, SI
	ADDQ $64, DI
	SUBQ $32, CX
	JNZ  loopcvt
	VZEROUPPER
	RET
