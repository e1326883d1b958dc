#include "textflag.h"

// Constants of the exponential (Cephes' expf): log2(e), ln 2 in two parts,
// the polynomial for e^r on |r| ≤ ln2/2, 1, the range limits, the
// exponent bias and +Inf.
DATA expc<>+0(SB)/4, $0x3fb8aa3b
DATA expc<>+4(SB)/4, $0x3f318000
DATA expc<>+8(SB)/4, $0xb95e8083
DATA expc<>+12(SB)/4, $0x39506967
DATA expc<>+16(SB)/4, $0x3ab743ce
DATA expc<>+20(SB)/4, $0x3c088908
DATA expc<>+24(SB)/4, $0x3d2aa9c1
DATA expc<>+28(SB)/4, $0x3e2aaaaa
DATA expc<>+32(SB)/4, $0x3f000000
DATA expc<>+36(SB)/4, $0x3f800000
DATA expc<>+40(SB)/4, $0x42b00000
DATA expc<>+44(SB)/4, $0xc2ae0000
DATA expc<>+48(SB)/4, $127
DATA expc<>+52(SB)/4, $0x7f800000
GLOBL expc<>(SB), RODATA|NOPTR, $56

// LOADCONSTS puts log2(e), ln 2 (high, low), the six coefficients and 1
// into Y6–Y15.
#define LOADCONSTS \
	VBROADCASTSS expc<>+0(SB), Y6 \
	VBROADCASTSS expc<>+4(SB), Y7 \
	VBROADCASTSS expc<>+8(SB), Y8 \
	VBROADCASTSS expc<>+12(SB), Y9 \
	VBROADCASTSS expc<>+16(SB), Y10 \
	VBROADCASTSS expc<>+20(SB), Y11 \
	VBROADCASTSS expc<>+24(SB), Y12 \
	VBROADCASTSS expc<>+28(SB), Y13 \
	VBROADCASTSS expc<>+32(SB), Y14 \
	VBROADCASTSS expc<>+36(SB), Y15

// EXP8 sets Y3 to e^Y0 lane by lane: x = k·ln2 + r, e^r by the polynomial,
// times 2^k; 0 below −87, +Inf above 88, NaN for NaN. It uses Y1, Y2, Y4
// and Y5.
#define EXP8 \
	VBROADCASTSS expc<>+40(SB), Y4 \
	VMINPS       Y4, Y0, Y1 \
	VBROADCASTSS expc<>+44(SB), Y4 \
	VMAXPS       Y4, Y1, Y1 \
	VMULPS       Y6, Y1, Y2 \
	VROUNDPS     $0, Y2, Y2 \
	VFNMADD231PS Y7, Y2, Y1 \
	VFNMADD231PS Y8, Y2, Y1 \
	VMOVAPS      Y9, Y3 \
	VFMADD213PS  Y10, Y1, Y3 \
	VFMADD213PS  Y11, Y1, Y3 \
	VFMADD213PS  Y12, Y1, Y3 \
	VFMADD213PS  Y13, Y1, Y3 \
	VFMADD213PS  Y14, Y1, Y3 \
	VMULPS       Y1, Y1, Y4 \
	VFMADD213PS  Y1, Y4, Y3 \
	VADDPS       Y15, Y3, Y3 \
	VCVTPS2DQ    Y2, Y2 \
	VBROADCASTSS expc<>+48(SB), Y4 \
	VPADDD       Y4, Y2, Y2 \
	VPSLLD       $23, Y2, Y2 \
	VMULPS       Y2, Y3, Y3 \
	VBROADCASTSS expc<>+44(SB), Y4 \
	VCMPPS       $1, Y4, Y0, Y5 \
	VANDNPS      Y3, Y5, Y3 \
	VBROADCASTSS expc<>+40(SB), Y4 \
	VCMPPS       $1, Y0, Y4, Y5 \
	VBROADCASTSS expc<>+52(SB), Y4 \
	VBLENDVPS    Y5, Y4, Y3, Y3 \
	VCMPPS       $3, Y0, Y0, Y5 \
	VBLENDVPS    Y5, Y0, Y3, Y3

// ONEPLUSEXPNEG sets Y3 to 1 + e^−Y0 lane by lane, the denominator of the
// sigmoid and of SiLU (Y0 becomes −Y0; EXP8's registers).
#define ONEPLUSEXPNEG \
	VXORPS  Y4, Y4, Y4 \
	VSUBPS  Y0, Y4, Y0 \
	EXP8 \
	VADDPS  Y15, Y3, Y3

// func expAVX2(dst, src *float32, n int)
TEXT ·expAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LOADCONSTS
	XORQ AX, AX

loop:
	VMOVUPS (SI)(AX*4), Y0
	EXP8
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     loop
	VZEROUPPER
	RET

// func siluAVX2(dst, src *float32, n int)
TEXT ·siluAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LOADCONSTS
	XORQ AX, AX

loop:
	VMOVUPS (SI)(AX*4), Y0
	ONEPLUSEXPNEG
	VMOVUPS (SI)(AX*4), Y0
	VDIVPS  Y3, Y0, Y3
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     loop
	VZEROUPPER
	RET

// func sigmoidAVX2(dst, src *float32, n int)
TEXT ·sigmoidAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LOADCONSTS
	XORQ AX, AX

loop:
	VMOVUPS (SI)(AX*4), Y0
	ONEPLUSEXPNEG
	VDIVPS  Y3, Y15, Y3
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     loop
	VZEROUPPER
	RET

// func mulAddAVX2(y, w, x *float32, n int)
TEXT ·mulAddAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ w+8(FP), SI
	MOVQ x+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  (DX)(AX*4), Y0, Y0
	VADDPS  (DI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     loop
	VZEROUPPER
	RET

// func expShiftAVX2(dst, src *float32, n int, shift float32)
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	LOADCONSTS
	XORQ AX, AX

loop:
	VMOVUPS      (SI)(AX*4), Y0
	VBROADCASTSS shift+24(FP), Y4
	VSUBPS       Y4, Y0, Y0
	EXP8
	VMOVUPS      Y3, (DI)(AX*4)
	ADDQ         $8, AX
	CMPQ         AX, CX
	JLT          loop
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	MOVQ    $8, AX

loop:
	CMPQ    AX, CX
	JGE     done
	VMAXPS  (SI)(AX*4), Y0, Y0
	ADDQ    $8, AX
	JMP     loop

done:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET

// func sumAVX2(x *float32, n int) float32
TEXT ·sumAVX2(SB), NOSPLIT, $0-20
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	MOVQ    $8, AX

loop:
	CMPQ    AX, CX
	JGE     done
	VADDPS  (SI)(AX*4), Y0, Y0
	ADDQ    $8, AX
	JMP     loop

done:
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VADDPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleAVX2(dst, src *float32, n int, a float32)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS a+24(FP), Y1
	XORQ         AX, AX

loop:
	VMULPS  (SI)(AX*4), Y1, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     loop
	VZEROUPPER
	RET

// func mulAVX2(dst, x, y *float32, n int)
TEXT ·mulAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

loop:
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     loop
	VZEROUPPER
	RET

// func sumSqAVX2(x *float32, n int) float32
TEXT ·sumSqAVX2(SB), NOSPLIT, $0-20
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ   AX, AX

loop32:
	LEAQ        32(AX), DX
	CMPQ        DX, CX
	JGT         tail
	VMOVUPS     (SI)(AX*4), Y4
	VFMADD231PS Y4, Y4, Y0
	VMOVUPS     32(SI)(AX*4), Y5
	VFMADD231PS Y5, Y5, Y1
	VMOVUPS     64(SI)(AX*4), Y6
	VFMADD231PS Y6, Y6, Y2
	VMOVUPS     96(SI)(AX*4), Y7
	VFMADD231PS Y7, Y7, Y3
	MOVQ        DX, AX
	JMP         loop32

tail:
	CMPQ        AX, CX
	JGE         done
	VMOVUPS     (SI)(AX*4), Y4
	VFMADD231PS Y4, Y4, Y0
	ADDQ        $8, AX
	CMPQ        AX, CX
	JGE         done
	VMOVUPS     (SI)(AX*4), Y5
	VFMADD231PS Y5, Y5, Y1
	ADDQ        $8, AX
	CMPQ        AX, CX
	JGE         done
	VMOVUPS     (SI)(AX*4), Y6
	VFMADD231PS Y6, Y6, Y2

done:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VADDPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VADDPS       X1, X0, X0
	VMOVSS       X0, ret+16(FP)
	VZEROUPPER
	RET

// The AVX-512 forms: sixteen lanes, a masked last block, the constants in
// registers. EXP16 is EXP8's arithmetic lane for lane (the same bits).

// LOADCONSTS512 puts log2(e), ln 2 (high, low), the six coefficients and 1
// into Z6–Z15, 88 and −87 into Z16 and Z17, the exponent bias into Z18 and
// +Inf into Z19.
#define LOADCONSTS512 \
	VBROADCASTSS expc<>+0(SB), Z6 \
	VBROADCASTSS expc<>+4(SB), Z7 \
	VBROADCASTSS expc<>+8(SB), Z8 \
	VBROADCASTSS expc<>+12(SB), Z9 \
	VBROADCASTSS expc<>+16(SB), Z10 \
	VBROADCASTSS expc<>+20(SB), Z11 \
	VBROADCASTSS expc<>+24(SB), Z12 \
	VBROADCASTSS expc<>+28(SB), Z13 \
	VBROADCASTSS expc<>+32(SB), Z14 \
	VBROADCASTSS expc<>+36(SB), Z15 \
	VBROADCASTSS expc<>+40(SB), Z16 \
	VBROADCASTSS expc<>+44(SB), Z17 \
	VPBROADCASTD expc<>+48(SB), Z18 \
	VBROADCASTSS expc<>+52(SB), Z19

// EXP16 sets Z3 to e^Z0 lane by lane, as EXP8. It uses Z1, Z2, Z4 and
// K2–K4.
#define EXP16 \
	VMINPS       Z16, Z0, Z1 \
	VMAXPS       Z17, Z1, Z1 \
	VMULPS       Z6, Z1, Z2 \
	VRNDSCALEPS  $0, Z2, Z2 \
	VFNMADD231PS Z7, Z2, Z1 \
	VFNMADD231PS Z8, Z2, Z1 \
	VMOVAPS      Z9, Z3 \
	VFMADD213PS  Z10, Z1, Z3 \
	VFMADD213PS  Z11, Z1, Z3 \
	VFMADD213PS  Z12, Z1, Z3 \
	VFMADD213PS  Z13, Z1, Z3 \
	VFMADD213PS  Z14, Z1, Z3 \
	VMULPS       Z1, Z1, Z4 \
	VFMADD213PS  Z1, Z4, Z3 \
	VADDPS       Z15, Z3, Z3 \
	VCVTPS2DQ    Z2, Z2 \
	VPADDD       Z18, Z2, Z2 \
	VPSLLD       $23, Z2, Z2 \
	VMULPS       Z2, Z3, Z3 \
	VCMPPS       $1, Z17, Z0, K2 \
	VPXORD       Z3, Z3, K2, Z3 \
	VCMPPS       $1, Z0, Z16, K3 \
	VMOVAPS      Z19, K3, Z3 \
	VCMPPS       $3, Z0, Z0, K4 \
	VMOVAPS      Z0, K4, Z3

// TAILMASK sets K1 to the low CX mod 16 lanes and CX to the multiple of 16
// below it. It uses AX and DX.
#define TAILMASK \
	MOVQ  CX, DX \
	ANDQ  $15, DX \
	SUBQ  DX, CX \
	MOVL  $1, AX \
	SHLXL DX, AX, AX \
	DECL  AX \
	KMOVW AX, K1

// func expShift512(dst, src *float32, n int, shift float32)
TEXT ·expShift512(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	LOADCONSTS512
	VBROADCASTSS shift+24(FP), Z20
	TAILMASK
	XORQ         BX, BX

loop:
	CMPQ    BX, CX
	JGE     tail
	VMOVUPS (SI)(BX*4), Z0
	VSUBPS  Z20, Z0, Z0
	EXP16
	VMOVUPS Z3, (DI)(BX*4)
	ADDQ    $16, BX
	JMP     loop

tail:
	KORTESTW K1, K1
	JZ       done
	VMOVUPS.Z (SI)(BX*4), K1, Z0
	VSUBPS    Z20, Z0, Z0
	EXP16
	VMOVUPS   Z3, K1, (DI)(BX*4)

done:
	VZEROUPPER
	RET

// func softmax512(x *float32, n int, m, slack float32) (mx, sum float32)
TEXT ·softmax512(SB), NOSPLIT, $0-32
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	LOADCONSTS512
	TAILMASK
	VBROADCASTSS m+16(FP), Z20
	XORQ         BX, BX

max:
	CMPQ    BX, CX
	JGE     maxtail
	VMAXPS  (SI)(BX*4), Z20, Z20
	ADDQ    $16, BX
	JMP     max

maxtail:
	KORTESTW  K1, K1
	JZ        maxdone
	VMOVAPS   Z20, Z0
	VMOVUPS   (SI)(BX*4), K1, Z0
	VMAXPS    Z0, Z20, Z20

maxdone:
	VMOVAPS       Z20, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VMAXPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VMAXPS        X1, X0, X0
	VMOVSS        m+16(FP), X1
	VADDSS        slack+20(FP), X1, X2
	VUCOMISS      X2, X0
	JA            shift
	VMOVAPS       X1, X0

shift:
	VMOVSS        X0, mx+24(FP)
	VBROADCASTSS  X0, Z20
	VPXORD        Z21, Z21, Z21
	XORQ          BX, BX

exp:
	CMPQ    BX, CX
	JGE     exptail
	VMOVUPS (SI)(BX*4), Z0
	VSUBPS  Z20, Z0, Z0
	EXP16
	VMOVUPS Z3, (SI)(BX*4)
	VADDPS  Z3, Z21, Z21
	ADDQ    $16, BX
	JMP     exp

exptail:
	KORTESTW  K1, K1
	JZ        sum
	VMOVUPS.Z (SI)(BX*4), K1, Z0
	VSUBPS    Z20, Z0, Z0
	EXP16
	VMOVUPS   Z3, K1, (SI)(BX*4)
	VADDPS    Z3, Z21, K1, Z21

sum:
	VMOVAPS       Z21, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS        Y1, Y0, Y0
	VEXTRACTF128  $1, Y0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0x4e, X0, X1
	VADDPS        X1, X0, X0
	VPERMILPS     $0xb1, X0, X1
	VADDPS        X1, X0, X0
	VMOVSS        X0, sum+28(FP)
	VZEROUPPER
	RET

// func convSiLU4AVX2(y, x0, x1, x2, x3, w0, w1, w2, w3 *float32, n int)
TEXT ·convSiLU4AVX2(SB), NOSPLIT, $0-80
	MOVQ y+0(FP), DI
	MOVQ x0+8(FP), SI
	MOVQ x1+16(FP), DX
	MOVQ x2+24(FP), BX
	MOVQ x3+32(FP), R8
	MOVQ w0+40(FP), R9
	MOVQ w1+48(FP), R10
	MOVQ w2+56(FP), R11
	MOVQ w3+64(FP), R12
	MOVQ n+72(FP), CX
	LOADCONSTS
	XORQ AX, AX

loop:
	VXORPS  Y1, Y1, Y1
	VMOVUPS (R9)(AX*4), Y0
	VMULPS  (SI)(AX*4), Y0, Y0
	VADDPS  Y0, Y1, Y1
	VMOVUPS (R10)(AX*4), Y0
	VMULPS  (DX)(AX*4), Y0, Y0
	VADDPS  Y0, Y1, Y1
	VMOVUPS (R11)(AX*4), Y0
	VMULPS  (BX)(AX*4), Y0, Y0
	VADDPS  Y0, Y1, Y1
	VMOVUPS (R12)(AX*4), Y0
	VMULPS  (R8)(AX*4), Y0, Y0
	VADDPS  Y0, Y1, Y1
	VMOVUPS Y1, (DI)(AX*4)
	VMOVAPS Y1, Y0
	ONEPLUSEXPNEG
	VMOVUPS (DI)(AX*4), Y0
	VDIVPS  Y3, Y0, Y3
	VMOVUPS Y3, (DI)(AX*4)
	ADDQ    $8, AX
	CMPQ    AX, CX
	JLT     loop
	VZEROUPPER
	RET
