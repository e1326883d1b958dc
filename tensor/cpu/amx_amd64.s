#include "textflag.h"

// The Go assembler has no AMX mnemonics: each instruction is spelled in bytes,
// with the instruction in AT&T order (sources, then the destination) beside it.

// func amxBF16x32(cfg *byte, a *uint32, lda int, w *uint32, kt int, c *float32)
//
// Sets the 32×32 float32 block c (row stride 32) to the bf16 products of 32
// rows of x against a 32-column weight panel, in one call that configures
// the tiles, computes and releases them: no Go code runs while tiles are live.
//
// cfg is the 64-byte tile configuration (palette 1, tiles 0–7 of 16 rows ×
// 64 bytes). a is row 0 of x in bf16 pairs, row stride lda bytes; w the panel
// (pairs along K, 32 columns of 32-bit pairs a row, 128 bytes); kt > 0 the
// number of 32-element K steps. Tiles: 0–3 accumulate C (rows 0–15 × columns
// 0–15, 0–15 × 16–31, 16–31 × 0–15, 16–31 × 16–31), 4 and 5 hold the two row
// halves of x, 6 and 7 the two column halves of the panel.
TEXT ·amxBF16x32(SB), NOSPLIT, $0-48
	MOVQ cfg+0(FP), AX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), BX
	MOVQ BX, R8
	SHLQ $4, R8
	ADDQ SI, R8         // R8: row 16 of x
	MOVQ w+24(FP), DI
	LEAQ 64(DI), R9     // R9: columns 16–31 of the panel
	MOVQ kt+32(FP), CX
	MOVQ c+40(FP), R10
	LEAQ 64(R10), R11   // C columns 16–31
	LEAQ 2048(R10), R12 // C rows 16–31
	LEAQ 2112(R10), R13 // C rows 16–31, columns 16–31
	MOVQ $128, DX       // the panel's and C's row stride

	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg (%rax)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc0 // tilezero %tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xc8 // tilezero %tmm1
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd0 // tilezero %tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x49; BYTE $0xd8 // tilezero %tmm3

amxloop:
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x24; BYTE $0x1e // tileloadd (%rsi,%rbx,1),%tmm4
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x2c; BYTE $0x18 // tileloadd (%r8,%rbx,1),%tmm5
	BYTE $0xc4; BYTE $0xe2; BYTE $0x7b; BYTE $0x4b; BYTE $0x34; BYTE $0x17 // tileloadd (%rdi,%rdx,1),%tmm6
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7b; BYTE $0x4b; BYTE $0x3c; BYTE $0x11 // tileloadd (%r9,%rdx,1),%tmm7
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xc4             // tdpbf16ps %tmm6,%tmm4,%tmm0
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xcc             // tdpbf16ps %tmm7,%tmm4,%tmm1
	BYTE $0xc4; BYTE $0xe2; BYTE $0x4a; BYTE $0x5c; BYTE $0xd5             // tdpbf16ps %tmm6,%tmm5,%tmm2
	BYTE $0xc4; BYTE $0xe2; BYTE $0x42; BYTE $0x5c; BYTE $0xdd             // tdpbf16ps %tmm7,%tmm5,%tmm3
	ADDQ $64, SI
	ADDQ $64, R8
	ADDQ $2048, DI
	ADDQ $2048, R9
	DECQ CX
	JNZ  amxloop

	BYTE $0xc4; BYTE $0xc2; BYTE $0x7a; BYTE $0x4b; BYTE $0x04; BYTE $0x12             // tilestored %tmm0,(%r10,%rdx,1)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7a; BYTE $0x4b; BYTE $0x0c; BYTE $0x13             // tilestored %tmm1,(%r11,%rdx,1)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7a; BYTE $0x4b; BYTE $0x14; BYTE $0x14             // tilestored %tmm2,(%r12,%rdx,1)
	BYTE $0xc4; BYTE $0xc2; BYTE $0x7a; BYTE $0x4b; BYTE $0x5c; BYTE $0x15; BYTE $0x00 // tilestored %tmm3,0x0(%r13,%rdx,1)
	BYTE $0xc4; BYTE $0xe2; BYTE $0x78; BYTE $0x49; BYTE $0xc0                         // tilerelease
	RET
