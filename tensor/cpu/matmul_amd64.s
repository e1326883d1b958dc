#include "textflag.h"

// func dot3x4(x *float32, ldx int, w *float32, ldw int, k int, y *float32, ldy int)
TEXT ·dot3x4(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	MOVQ ldx+8(FP), BX
	SHLQ $2, BX
	LEAQ (SI)(BX*1), R8
	LEAQ (R8)(BX*1), R9
	MOVQ w+16(FP), DI
	MOVQ ldw+24(FP), DX
	SHLQ $2, DX
	LEAQ (DI)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	LEAQ (R11)(DX*1), R12
	MOVQ k+32(FP), CX
	MOVQ y+40(FP), R13
	MOVQ ldy+48(FP), BX
	SHLQ $2, BX

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	XORQ   AX, AX

loop3x4:
	VMOVUPS     (SI)(AX*4), Y12
	VMOVUPS     (R8)(AX*4), Y13
	VMOVUPS     (R9)(AX*4), Y14
	VMOVUPS     (DI)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y0
	VFMADD231PS Y15, Y13, Y4
	VFMADD231PS Y15, Y14, Y8
	VMOVUPS     (R10)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y1
	VFMADD231PS Y15, Y13, Y5
	VFMADD231PS Y15, Y14, Y9
	VMOVUPS     (R11)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y2
	VFMADD231PS Y15, Y13, Y6
	VFMADD231PS Y15, Y14, Y10
	VMOVUPS     (R12)(AX*4), Y15
	VFMADD231PS Y15, Y12, Y3
	VFMADD231PS Y15, Y13, Y7
	VFMADD231PS Y15, Y14, Y11
	ADDQ        $8, AX
	CMPQ        AX, CX
	JLT         loop3x4

	// Row r's accumulators hold w_0..w_3 partial sums in eight lanes each;
	// three horizontal adds and a fold of the two halves give the four
	// sums in order.
	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VADDPS       (R13), X0, X0
	VMOVUPS      X0, (R13)

	VHADDPS      Y5, Y4, Y4
	VHADDPS      Y7, Y6, Y6
	VHADDPS      Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS       X5, X4, X4
	VADDPS       (R13)(BX*1), X4, X4
	VMOVUPS      X4, (R13)(BX*1)

	VHADDPS      Y9, Y8, Y8
	VHADDPS      Y11, Y10, Y10
	VHADDPS      Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS       X9, X8, X8
	VADDPS       (R13)(BX*2), X8, X8
	VMOVUPS      X8, (R13)(BX*2)

	VZEROUPPER
	RET

// func dot1x4(x *float32, w *float32, ldw int, k int, y *float32)
//
// The same accumulation and reduction as one row of dot3x4, so a row's
// result does not depend on how the rows were grouped.
TEXT ·dot1x4(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ ldw+16(FP), DX
	SHLQ $2, DX
	LEAQ (DI)(DX*1), R10
	LEAQ (R10)(DX*1), R11
	LEAQ (R11)(DX*1), R12
	MOVQ k+24(FP), CX
	MOVQ y+32(FP), R13

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

loop1x4:
	VMOVUPS     (SI)(AX*4), Y8
	VFMADD231PS (DI)(AX*4), Y8, Y0
	VFMADD231PS (R10)(AX*4), Y8, Y1
	VFMADD231PS (R11)(AX*4), Y8, Y2
	VFMADD231PS (R12)(AX*4), Y8, Y3
	ADDQ        $8, AX
	CMPQ        AX, CX
	JLT         loop1x4

	VHADDPS      Y1, Y0, Y0
	VHADDPS      Y3, Y2, Y2
	VHADDPS      Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VADDPS       (R13), X0, X0
	VMOVUPS      X0, (R13)
	VZEROUPPER
	RET

// func widenBF16(dst *float32, src *uint16, n int)
TEXT ·widenBF16(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

loopwiden:
	VPMOVZXWD (SI)(AX*2), Y0
	VPSLLD    $16, Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	CMPQ      AX, CX
	JLT       loopwiden
	VZEROUPPER
	RET

// func axpyRows(y *float32, x *float32, ldx int, c *float32, rows int, n int)
TEXT ·axpyRows(SB), NOSPLIT, $0-48
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ ldx+16(FP), DX
	SHLQ $2, DX
	MOVQ c+24(FP), R8
	MOVQ rows+32(FP), R9
	MOVQ n+40(FP), CX
	XORQ AX, AX

	// Sixty-four columns of y a strip, held in eight registers while every
	// row of x adds into them.
strip64:
	MOVQ    CX, BX
	SUBQ    AX, BX
	CMPQ    BX, $64
	JLT     strip8
	VMOVUPS (DI)(AX*4), Y0
	VMOVUPS 32(DI)(AX*4), Y1
	VMOVUPS 64(DI)(AX*4), Y2
	VMOVUPS 96(DI)(AX*4), Y3
	VMOVUPS 128(DI)(AX*4), Y4
	VMOVUPS 160(DI)(AX*4), Y5
	VMOVUPS 192(DI)(AX*4), Y6
	VMOVUPS 224(DI)(AX*4), Y7
	LEAQ    (SI)(AX*4), R10
	XORQ    R11, R11

row64:
	VBROADCASTSS (R8)(R11*4), Y8
	VFMADD231PS  (R10), Y8, Y0
	VFMADD231PS  32(R10), Y8, Y1
	VFMADD231PS  64(R10), Y8, Y2
	VFMADD231PS  96(R10), Y8, Y3
	VFMADD231PS  128(R10), Y8, Y4
	VFMADD231PS  160(R10), Y8, Y5
	VFMADD231PS  192(R10), Y8, Y6
	VFMADD231PS  224(R10), Y8, Y7
	ADDQ         DX, R10
	INCQ         R11
	CMPQ         R11, R9
	JLT          row64
	VMOVUPS      Y0, (DI)(AX*4)
	VMOVUPS      Y1, 32(DI)(AX*4)
	VMOVUPS      Y2, 64(DI)(AX*4)
	VMOVUPS      Y3, 96(DI)(AX*4)
	VMOVUPS      Y4, 128(DI)(AX*4)
	VMOVUPS      Y5, 160(DI)(AX*4)
	VMOVUPS      Y6, 192(DI)(AX*4)
	VMOVUPS      Y7, 224(DI)(AX*4)
	ADDQ         $64, AX
	JMP          strip64

strip8:
	CMPQ    AX, CX
	JGE     doneaxpy
	VMOVUPS (DI)(AX*4), Y0
	LEAQ    (SI)(AX*4), R10
	XORQ    R11, R11

row8:
	VBROADCASTSS (R8)(R11*4), Y8
	VFMADD231PS  (R10), Y8, Y0
	ADDQ         DX, R10
	INCQ         R11
	CMPQ         R11, R9
	JLT          row8
	VMOVUPS      Y0, (DI)(AX*4)
	ADDQ         $8, AX
	JMP          strip8

doneaxpy:
	VZEROUPPER
	RET
