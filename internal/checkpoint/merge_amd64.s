#include "textflag.h"

// func mergeAcc32(dst *float32, a *float64, b *float64, n int, r int, lda int)
//
// For each of the n columns i (n a multiple of 32): acc = 0, then for k = 0..r-1
// acc = float32(b[k]*a[k*lda+i] + float64(acc)) with one double-precision fused
// multiply-add (b·a is exact in float64, so this is the rounding of Go's
// float32(b*a + float64(acc))); dst[i] = acc. Thirty-two columns at a time, in
// eight independent chains, each register widened and narrowed in place.
TEXT ·mergeAcc32(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ r+32(FP), R8
	MOVQ lda+40(FP), R9
	SHLQ $3, R9

cols:
	CMPQ CX, $32
	JLT  done
	VXORPS X0, X0, X0
	VXORPS X1, X1, X1
	VXORPS X2, X2, X2
	VXORPS X3, X3, X3
	VXORPS X4, X4, X4
	VXORPS X5, X5, X5
	VXORPS X6, X6, X6
	VXORPS X7, X7, X7
	MOVQ   SI, R10
	MOVQ   DX, R11
	MOVQ   R8, R12

ks:
	TESTQ R12, R12
	JZ    store
	VBROADCASTSD (R11), Y15
	VCVTPS2PD    X0, Y0
	VCVTPS2PD    X1, Y1
	VCVTPS2PD    X2, Y2
	VCVTPS2PD    X3, Y3
	VCVTPS2PD    X4, Y4
	VCVTPS2PD    X5, Y5
	VCVTPS2PD    X6, Y6
	VCVTPS2PD    X7, Y7
	VFMADD231PD  (R10), Y15, Y0
	VFMADD231PD  32(R10), Y15, Y1
	VFMADD231PD  64(R10), Y15, Y2
	VFMADD231PD  96(R10), Y15, Y3
	VFMADD231PD  128(R10), Y15, Y4
	VFMADD231PD  160(R10), Y15, Y5
	VFMADD231PD  192(R10), Y15, Y6
	VFMADD231PD  224(R10), Y15, Y7
	VCVTPD2PSY   Y0, X0
	VCVTPD2PSY   Y1, X1
	VCVTPD2PSY   Y2, X2
	VCVTPD2PSY   Y3, X3
	VCVTPD2PSY   Y4, X4
	VCVTPD2PSY   Y5, X5
	VCVTPD2PSY   Y6, X6
	VCVTPD2PSY   Y7, X7
	ADDQ         R9, R10
	ADDQ         $8, R11
	DECQ         R12
	JMP          ks

store:
	VMOVUPS X0, (DI)
	VMOVUPS X1, 16(DI)
	VMOVUPS X2, 32(DI)
	VMOVUPS X3, 48(DI)
	VMOVUPS X4, 64(DI)
	VMOVUPS X5, 80(DI)
	VMOVUPS X6, 96(DI)
	VMOVUPS X7, 112(DI)
	ADDQ    $128, DI
	ADDQ    $256, SI
	SUBQ    $32, CX
	JMP     cols

done:
	VZEROUPPER
	RET

// func mergeOutBF16(dst *uint16, w *uint16, acc *float32, s float32, n int)
//
// dst[i] = bf16(f32(w[i]) + acc[i]*s) for i < n (n a multiple of 8), each
// operation rounded to fp32 and the sum rounded to bfloat16 to nearest even,
// NaN kept quiet with its sign, as half.BF16FromF32.
TEXT ·mergeOutBF16(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         w+8(FP), SI
	MOVQ         acc+16(FP), DX
	VBROADCASTSS s+24(FP), Y15
	MOVQ         n+32(FP), CX
	MOVL         $0x7fff, AX
	VMOVD        AX, X14
	VPBROADCASTD X14, Y14
	MOVL         $1, AX
	VMOVD        AX, X13
	VPBROADCASTD X13, Y13
	MOVL         $0x7fffffff, AX
	VMOVD        AX, X12
	VPBROADCASTD X12, Y12
	MOVL         $0x7f800000, AX
	VMOVD        AX, X11
	VPBROADCASTD X11, Y11
	MOVL         $0x40, AX
	VMOVD        AX, X10
	VPBROADCASTD X10, Y10

out8:
	CMPQ         CX, $8
	JLT          outdone
	VPMOVZXWD    (SI), Y0
	VPSLLD       $16, Y0, Y0
	VMULPS       (DX), Y15, Y1
	VADDPS       Y1, Y0, Y0
	VPSRLD       $16, Y0, Y2
	VPAND        Y13, Y2, Y3
	VPADDD       Y14, Y0, Y4
	VPADDD       Y3, Y4, Y4
	VPSRLD       $16, Y4, Y4
	VPAND        Y12, Y0, Y5
	VPCMPGTD     Y11, Y5, Y5
	VPOR         Y10, Y2, Y2
	VPBLENDVB    Y5, Y2, Y4, Y4
	VEXTRACTI128 $1, Y4, X6
	VPACKUSDW    X6, X4, X4
	VMOVDQU      X4, (DI)
	ADDQ         $16, DI
	ADDQ         $16, SI
	ADDQ         $32, DX
	SUBQ         $8, CX
	JMP          out8

outdone:
	VZEROUPPER
	RET
