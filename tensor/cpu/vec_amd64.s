#include "textflag.h"

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

// func prefetchRows(p *float32, stride, rows, n int)
TEXT ·prefetchRows(SB), NOSPLIT, $0-32
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), DX
	SHLQ $2, DX
	MOVQ rows+16(FP), CX
	MOVQ n+24(FP), BX
	SHLQ $2, BX

row:
	XORQ AX, AX

line:
	PREFETCHT1 (SI)(AX*1)
	ADDQ       $64, AX
	CMPQ       AX, BX
	JLT        line
	ADDQ       DX, SI
	DECQ       CX
	JNZ        row
	RET
