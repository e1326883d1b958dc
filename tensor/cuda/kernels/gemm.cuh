// Epilogue helpers shared by the GEMM kernels (gemm.cu: mma.sync, gemm_sm90a.cu: wgmma).
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#include "pdl.cuh"

// swiglu1 is silu(g)·u for g and u rounded to bf16 first: the operations of ops.cu's swiglu_bf16 on a stored
// [g | u] row, in the same order, so the SwiGLU-fused GEMM epilogues (gemm_sm90a.cu, fp8_sm90a.cu) give its bits.
__device__ __forceinline__ float swiglu1(float g, float u) {
	g = __bfloat162float(__float2bfloat16_rn(g));
	u = __bfloat162float(__float2bfloat16_rn(u));
	return g * (1.f / (1.f + expf(-g))) * u;
}

// gemm_store2 stores two adjacent outputs (col, col+1) of row, adding the residual when R is set.
__device__ __forceinline__ void gemm_store2(void *Y, const void *R, int ldy, int yF32, int row, int col, float v0,
                                            float v1) {
	size_t i = (size_t)row * ldy + col;
	if (yF32) {
		if (R) {
			float2 r = *(const float2 *)((const float *)R + i);
			v0 += r.x;
			v1 += r.y;
		}
		*(float2 *)((float *)Y + i) = make_float2(v0, v1);
	} else {
		if (R) {
			__nv_bfloat162 r = *(const __nv_bfloat162 *)((const __nv_bfloat16 *)R + i);
			v0 += __bfloat162float(r.x);
			v1 += __bfloat162float(r.y);
		}
		*(__nv_bfloat162 *)((__nv_bfloat16 *)Y + i) = __floats2bfloat162_rn(v0, v1);
	}
}

// gemm_bar synchronises the nthreads threads of named barrier id (id 0 with the whole block is __syncthreads).
__device__ __forceinline__ void gemm_bar(int id, int nthreads) {
	asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(nthreads) : "memory");
}

// gemm_split_sum4 adds 4 consecutive fp32 partial sums of splits split planes (plane elements apart, starting at
// p) in split order: the reduction of split-K, the same wherever it runs.
__device__ __forceinline__ float4 gemm_split_sum4(const float *p, size_t plane, int splits) {
	float4 s = __ldcg((const float4 *)p);
	for (int z = 1; z < splits; z++) {
		float4 v = __ldcg((const float4 *)(p + z * plane));
		s.x += v.x;
		s.y += v.y;
		s.z += v.z;
		s.w += v.w;
	}
	return s;
}

// gemm_splitk_finish ends a split-K GEMM in the kernel. Each of the gridDim.z splits of output tile (blockIdx.x,
// blockIdx.y) = rows [m0, m0+BM) × columns [n0, n0+BN) has stored its fp32 partial sums to ws[z][M][N]; the
// nthreads threads (tid in [0, nthreads), named barrier bar) of every split call this. The split that arrives last
// (counted in cnt[tile], which it resets to 0 for the next launch) sums the partials in split order — the result
// does not depend on which split is last —, adds the residual and stores Y.
template <int BM, int BN>
__device__ __forceinline__ void gemm_splitk_finish(void *Y, const void *R, const float *ws, unsigned *cnt, int M,
                                                   int N, int ldy, int yF32, int m0, int n0, int tid,
                                                   int nthreads, int bar) {
	__shared__ unsigned s_last;
	__threadfence();
	gemm_bar(bar, nthreads);
	if (tid == 0) {
		const unsigned tile = blockIdx.y * gridDim.x + blockIdx.x;
		const unsigned prev = atomicAdd(&cnt[tile], 1u);
		s_last = prev == gridDim.z - 1;
		if (s_last) cnt[tile] = 0;
	}
	gemm_bar(bar, nthreads);
	if (!s_last) return;
	__threadfence();
	const size_t plane = (size_t)M * N;
	constexpr int Q = BN / 4;
	for (int i = tid; i < BM * Q; i += nthreads) {
		const int row = m0 + i / Q, col = n0 + (i % Q) * 4;
		if (row >= M || col >= N) continue;
		const float4 s = gemm_split_sum4(ws + (size_t)row * N + col, plane, (int)gridDim.z);
		gemm_store2(Y, R, ldy, yF32, row, col, s.x, s.y);
		gemm_store2(Y, R, ldy, yF32, row, col + 2, s.z, s.w);
	}
}
