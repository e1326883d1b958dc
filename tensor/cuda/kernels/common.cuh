// Helpers shared by the backend kernels: element loads and stores by runtime storage type, warp and block sums.
// Storage type codes follow tensor.DType: 0 F32, 1 BF16, 2 F16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "pdl.cuh"

#define DT_F32 0
#define DT_BF16 1
#define DT_F16 2

// ld returns element i of p, stored as dt, widened to float (exactly).
__device__ __forceinline__ float ld(const void *p, int dt, size_t i) {
	if (dt == DT_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	if (dt == DT_F16) return __half2float(((const __half *)p)[i]);
	return ((const float *)p)[i];
}

// st stores v as element i of p, rounding to nearest even for the 16-bit types.
__device__ __forceinline__ void st(void *p, int dt, size_t i, float v) {
	if (dt == DT_BF16)
		((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
	else if (dt == DT_F16)
		((__half *)p)[i] = __float2half_rn(v);
	else
		((float *)p)[i] = v;
}

// rnd returns v rounded to the precision of dt.
__device__ __forceinline__ float rnd(float v, int dt) {
	if (dt == DT_BF16) return __bfloat162float(__float2bfloat16_rn(v));
	if (dt == DT_F16) return __half2float(__float2half_rn(v));
	return v;
}

__device__ __forceinline__ float wsum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float wmax(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// bsum returns the sum of v over the block (blockDim.x a multiple of 32, at most 1024) to every thread.
// scratch holds 32 floats; the call synchronises the block twice.
__device__ __forceinline__ float bsum(float v, float *scratch) {
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = wsum(v);
	__syncthreads();
	if (lane == 0) scratch[w] = v;
	__syncthreads();
	float t = lane < nw ? scratch[lane] : 0.f;
	return wsum(t);
}

__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + expf(-x)); }

// silu_fast is x·σ(x) = x / (1 + e^−x) with the hardware exponential and division (__expf, __fdividef): a few
// units in the last place of fp32, far below the bf16 rounding of every value it feeds. For x < −87 the divisor
// overflows and the result is −0 (the true value is below 1e−36). The convolution and the gated norm use it, every
// variant of each the same, so their variants still agree bit for bit.
__device__ __forceinline__ float silu_fast(float x) { return __fdividef(x, 1.f + __expf(-x)); }

// unpack8 widens 8 bf16 (one 16-byte vector) to float; pack8 rounds 8 floats to bf16 (nearest even) into one.
__device__ __forceinline__ void unpack8(const uint4 &v, float *f) {
	const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		float2 t = __bfloat1622float2(h[i]);
		f[2 * i] = t.x;
		f[2 * i + 1] = t.y;
	}
}

__device__ __forceinline__ uint4 pack8(const float *f) {
	uint4 v;
	__nv_bfloat162 *h = (__nv_bfloat162 *)&v;
#pragma unroll
	for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
	return v;
}
