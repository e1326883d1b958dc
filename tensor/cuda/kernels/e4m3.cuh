// E4M3 (FP8) codes of activations, shared by the kernels that quantize them: quant_rows_e4m3 (fp8_sm90a.cu) and the
// normalisations that write their output's codes (rmsnorm_bf16_e4m3 in ops.cu, gated_rmsnorm_bf16_e4m3 in nn.cu).
// All of them give internal/fp8.QuantizeActivations' bits. The conversion needs compute capability 8.9: compiled for
// less, these helpers do not exist, and the kernels that use them are empty there.
#pragma once
#include "common.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// e4m3x2 rounds lo and hi to E4M3 (nearest even, saturating to ±448, NaN kept) and packs them, lo in the low byte.
__device__ __forceinline__ uint32_t e4m3x2(float lo, float hi) {
	unsigned short r;
	asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo)); // the first source fills the high byte
	return r;
}

// e4m3x8 returns the codes of f[0 … 7] divided by s (IEEE division), f[0] in the low byte.
__device__ __forceinline__ uint2 e4m3x8(const float *f, float s) {
	uint2 q;
	q.x = e4m3x2(__fdiv_rn(f[0], s), __fdiv_rn(f[1], s)) | e4m3x2(__fdiv_rn(f[2], s), __fdiv_rn(f[3], s)) << 16;
	q.y = e4m3x2(__fdiv_rn(f[4], s), __fdiv_rn(f[5], s)) | e4m3x2(__fdiv_rn(f[6], s), __fdiv_rn(f[7], s)) << 16;
	return q;
}

// absmax8 returns fmaxf(m, |f[i]|) over f[0 … 7] (NaN skipped, as fmaxf does).
__device__ __forceinline__ float absmax8(float m, const float *f) {
#pragma unroll
	for (int e = 0; e < 8; e++) m = fmaxf(m, fabsf(f[e]));
	return m;
}

// q8_absmax returns absmax8 over the 8 values of bf16 vector v.
__device__ __forceinline__ float q8_absmax(float m, const uint4 &v) {
	float f[8];
	unpack8(v, f);
	return absmax8(m, f);
}

// e4m3_scale returns a row's scale from each thread's largest magnitude m, the row's threads being the block's
// nwarps warps: the block's largest / 448 (IEEE division), 1 when that is 0. mpart: nwarps floats of shared memory;
// the call synchronises the block. The largest does not depend on the order it is taken in.
__device__ __forceinline__ float e4m3_scale(float m, float *mpart, int nwarps) {
	m = wmax(m);
	if ((threadIdx.x & 31) == 0) mpart[threadIdx.x >> 5] = m;
	__syncthreads();
	m = mpart[0];
	for (int w = 1; w < nwarps; w++) m = fmaxf(m, mpart[w]);
	const float s = __fdiv_rn(m, 448.f);
	return s == 0.f ? 1.f : s;
}

// q8_codes returns the codes of bf16 vector v's 8 values divided by s (e4m3x8).
__device__ __forceinline__ uint2 q8_codes(const uint4 &v, float s) {
	float f[8];
	unpack8(v, f);
	return e4m3x8(f, s);
}
#endif
