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
