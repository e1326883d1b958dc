// Memory-bound kernels around the GEMMs: embedding gather, RMSNorm (optionally fused with the residual add),
// SwiGLU, sigmoid output gate. bf16 in and out, fp32 arithmetic, one rounding per stored value. Rows are
// contiguous; widths are multiples of 8 so every thread moves 16-byte vectors.
#include "common.cuh"
#include "e4m3.cuh"
#include "gemm.cuh"

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// Small uploads as launches: the words travel in the kernel's parameters, so that a table a kernel reads reaches
// the device without a copy between two launches (a copy there ends programmatic dependent launch and, above
// ~1 KiB, waits for the copy engine: 3.4 and 11.5 µs on the H200 against 0.6 µs for a launch). Each thread reads
// its words first, then waits for the grids before it (dst may be memory an earlier kernel still reads) and stores
// them. One block of 256 threads; n ≤ the payload's words.
template <int W> struct KevWords {
	uint32_t w[W];
};
template <int W>
__device__ __forceinline__ void upload_words(uint32_t *dst, int n, const KevWords<W> &p) {
	constexpr int PER = (W + 255) / 256;
	uint32_t v[PER];
#pragma unroll
	for (int k = 0; k < PER; k++) {
		const int i = threadIdx.x + 256 * k;
		v[k] = i < n ? p.w[i] : 0u;
	}
	kev_grid_wait();
	kev_grid_launch();
#pragma unroll
	for (int k = 0; k < PER; k++) {
		const int i = threadIdx.x + 256 * k;
		if (i < n) dst[i] = v[k];
	}
}
extern "C" __global__ void __launch_bounds__(256)
    upload_words_256(uint32_t *dst, int n, const __grid_constant__ KevWords<256> p) {
	KEV_GRID_DEP_DEFERRED();
	upload_words<256>(dst, n, p);
}
extern "C" __global__ void __launch_bounds__(256)
    upload_words_1008(uint32_t *dst, int n, const __grid_constant__ KevWords<1008> p) {
	KEV_GRID_DEP_DEFERRED();
	upload_words<1008>(dst, n, p);
}

// y[t] = table[ids[t]] for t < T; rows are d bf16 wide. An id outside [0, V) yields a zero row.
// Grid: T blocks (x) × ceil(d/8/blockDim) (y).
extern "C" __global__ void embed_bf16(__nv_bfloat16 *__restrict__ y, const __nv_bfloat16 *__restrict__ table,
                                      const int32_t *__restrict__ ids, int T, int d, int V) {
	KEV_GRID_DEP();
	int t = blockIdx.x;
	int c = blockIdx.y * blockDim.x + threadIdx.x;
	if (t >= T || c >= d / 8) return;
	int id = ids[t];
	uint4 v = make_uint4(0, 0, 0, 0);
	if (id >= 0 && id < V) v = ((const uint4 *)(table + (size_t)id * d))[c];
	((uint4 *)(y + (size_t)t * d))[c] = v;
}

// RMSNorm of each row of width n, one block of RMS_THREADS threads per row (a warp per row left most of the GPU
// idle on short passes: 240 rows are 60 blocks):
//   s = x (+ res, rounded to bf16 and stored to sum when res is set)
//   y = bf16( s / sqrt(mean(s²) + eps) · g ),  g = 1 + gain if plusOne else gain (fp32).
// sum may alias res or x, and y may alias x, since each thread rereads only what it wrote itself.
#define RMS_THREADS 128
#define RMS_VEC 4 // 16-byte vectors a thread keeps in registers: rows up to RMS_VEC·RMS_THREADS·8 = 4096 wide

// rms_rstd returns 1 / sqrt(Σ ss / n + eps) for the block's per-thread sums of squares ss: each warp's sum to
// part (RMS_THREADS / 32 floats of shared memory), then every thread adds them in warp order. NAMED: the block is
// larger and only its first RMS_THREADS threads call this, synchronising on named barrier 1 (the same sums).
template <bool NAMED = false> __device__ __forceinline__ float rms_rstd(float ss, float *part, int n, float eps) {
	const int tid = threadIdx.x;
	ss = warp_sum(ss);
	if ((tid & 31) == 0) part[tid >> 5] = ss;
	if constexpr (NAMED)
		asm volatile("bar.sync 1, %0;\n" ::"n"(RMS_THREADS) : "memory");
	else
		__syncthreads();
	ss = 0.f;
#pragma unroll
	for (int w = 0; w < RMS_THREADS / 32; w++) ss += part[w];
	return 1.f / sqrtf(ss / (float)n + eps);
}

// rms_sumsq is a thread's sum of squares over its vectors v[k] = row vector tid + k·RMS_THREADS (k in order).
__device__ __forceinline__ float rms_sumsq(const uint4 (&v)[RMS_VEC], int tid, int nv) {
	float ss = 0.f;
#pragma unroll
	for (int k = 0; k < RMS_VEC; k++)
		if (tid + k * RMS_THREADS < nv) {
			float f[8];
			unpack8(v[k], f);
#pragma unroll
			for (int i = 0; i < 8; i++) ss += f[i] * f[i];
		}
	return ss;
}

// rms_store stores a thread's vectors of the normalised row yr: bf16(v · rstd · g), g = 1 + gain if plusOne else
// gain, and leaves them in v (rmsnorm_bf16_e4m3 quantizes them from there).
__device__ __forceinline__ void rms_store(__nv_bfloat16 *yrow, uint4 (&v)[RMS_VEC], int tid, int nv, float rstd,
                                          const float *__restrict__ gain, int plusOne) {
	uint4 *yr = (uint4 *)yrow;
#pragma unroll
	for (int k = 0; k < RMS_VEC; k++) {
		const int c = tid + k * RMS_THREADS;
		if (c < nv) {
			float f[8];
			unpack8(v[k], f);
			const float4 g0 = ((const float4 *)gain)[2 * c], g1 = ((const float4 *)gain)[2 * c + 1];
			const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
			for (int i = 0; i < 8; i++) f[i] = f[i] * rstd * (plusOne ? 1.f + g[i] : g[i]);
			v[k] = pack8(f);
			yr[c] = v[k];
		}
	}
}

// rmsnorm_wide is rmsnorm_bf16 for rows wider than RMS_VEC·RMS_THREADS·8: two passes over the row, the second
// rereading what the first stored. Out of line, so that the common kernel stays small.
__device__ __noinline__ void rmsnorm_wide(__nv_bfloat16 *y, __nv_bfloat16 *sum, const __nv_bfloat16 *x,
                                          const __nv_bfloat16 *res, const float *__restrict__ gain, int row, int n,
                                          float eps, int plusOne, float *part) {
	const int tid = threadIdx.x, nv = n / 8;
	const uint4 *xr = (const uint4 *)(x + (size_t)row * n);
	const uint4 *rr = res ? (const uint4 *)(res + (size_t)row * n) : nullptr;
	uint4 *sr = res ? (uint4 *)(sum + (size_t)row * n) : nullptr;
	float ss = 0.f;
#pragma unroll 4
	for (int c = tid; c < nv; c += RMS_THREADS) {
		float f[8];
		uint4 v = xr[c];
		if (rr) {
			float r[8];
			unpack8(v, f);
			unpack8(rr[c], r);
#pragma unroll
			for (int i = 0; i < 8; i++) f[i] += r[i];
			v = pack8(f);
			sr[c] = v;
		}
		unpack8(v, f);
#pragma unroll
		for (int i = 0; i < 8; i++) ss += f[i] * f[i];
	}
	const float rstd = rms_rstd(ss, part, n, eps);
	const uint4 *src = rr ? (const uint4 *)sr : xr;
	uint4 *yr = (uint4 *)(y + (size_t)row * n);
#pragma unroll 4
	for (int c = tid; c < nv; c += RMS_THREADS) {
		float f[8];
		unpack8(src[c], f);
		const float4 g0 = ((const float4 *)gain)[2 * c], g1 = ((const float4 *)gain)[2 * c + 1];
		float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
		for (int i = 0; i < 8; i++) f[i] = f[i] * rstd * (plusOne ? 1.f + g[i] : g[i]);
		yr[c] = pack8(f);
	}
}

// rmsnorm_row normalises row `row` of rmsnorm_bf16 (row < M): a thread keeps its vectors c = tid, tid + RMS_THREADS,
// … of the row in registers between the sum of squares and the scaling, summing in the same order as rmsnorm_wide,
// so both give the same bits. It returns true with y's vectors in v, or false when the row is wider than
// RMS_VEC·RMS_THREADS·8 and rmsnorm_wide has normalised it (v unset). part: RMS_THREADS / 32 floats of shared memory.
__device__ __forceinline__ bool rmsnorm_row(uint4 (&v)[RMS_VEC], float *part, __nv_bfloat16 *y, __nv_bfloat16 *sum,
                                            const __nv_bfloat16 *x, const __nv_bfloat16 *res,
                                            const float *__restrict__ gain, int row, int n, float eps, int plusOne) {
	const int tid = threadIdx.x;
	const int nv = n / 8;
	if (nv > RMS_VEC * RMS_THREADS) {
		rmsnorm_wide(y, sum, x, res, gain, row, n, eps, plusOne, part);
		return false;
	}
	const uint4 *xr = (const uint4 *)(x + (size_t)row * n);
#pragma unroll
	for (int k = 0; k < RMS_VEC; k++)
		if (tid + k * RMS_THREADS < nv) v[k] = xr[tid + k * RMS_THREADS];
	if (res) {
		const uint4 *rr = (const uint4 *)(res + (size_t)row * n);
		uint4 rv[RMS_VEC];
#pragma unroll
		for (int k = 0; k < RMS_VEC; k++)
			if (tid + k * RMS_THREADS < nv) rv[k] = rr[tid + k * RMS_THREADS];
		uint4 *sr = (uint4 *)(sum + (size_t)row * n);
#pragma unroll
		for (int k = 0; k < RMS_VEC; k++) {
			const int c = tid + k * RMS_THREADS;
			if (c < nv) {
				float f[8], r[8];
				unpack8(v[k], f);
				unpack8(rv[k], r);
#pragma unroll
				for (int i = 0; i < 8; i++) f[i] += r[i];
				v[k] = pack8(f);
				sr[c] = v[k];
			}
		}
	}
	float ss = rms_sumsq(v, tid, nv);
	const float rstd = rms_rstd(ss, part, n, eps);
	rms_store(y + (size_t)row * n, v, tid, nv, rstd, gain, plusOne);
	return true;
}

// rmsnorm_bf16: one block per row (rmsnorm_row).
extern "C" __global__ void __launch_bounds__(RMS_THREADS) rmsnorm_bf16(__nv_bfloat16 *y, __nv_bfloat16 *sum,
                                                                       const __nv_bfloat16 *x,
                                                                       const __nv_bfloat16 *res,
                                                                       const float *__restrict__ gain, int M, int n,
                                                                       float eps, int plusOne) {
	KEV_GRID_DEP();
	__shared__ float part[RMS_THREADS / 32];
	const int row = blockIdx.x;
	if (row >= M) return;
	uint4 v[RMS_VEC];
	rmsnorm_row(v, part, y, sum, x, res, gain, row, n, eps, plusOne);
}

// ---- the normalised rows' FP8 codes ----
// rmsnorm_bf16_e4m3 is rmsnorm_bf16 that also quantizes each row of y it stores, as quant_rows_e4m3
// (kernels/fp8_sm90a.cu) quantizes a bf16 row, bit for bit: S[r] = max|y[r, ·]| / 448 (fmaxf over the row's bf16
// values as floats, IEEE division; 1 when that is 0) and Q[r·n …] = E4M3(y / S[r]), nearest even, saturating. The
// largest magnitude does not depend on the order it is taken in, so the block's reduction gives quant_rows_e4m3's.
// The E4M3 conversion needs compute capability 8.9: compiled for less, the kernel does nothing (the backend
// launches it on 9.0 only). n a multiple of 16; Q 16-byte aligned.

extern "C" __global__ void __launch_bounds__(RMS_THREADS)
    rmsnorm_bf16_e4m3(__nv_bfloat16 *y, __nv_bfloat16 *sum, const __nv_bfloat16 *x, const __nv_bfloat16 *res,
                      const float *__restrict__ gain, int M, int n, float eps, int plusOne, uint8_t *Q, float *S) {
	KEV_GRID_DEP();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	__shared__ float part[RMS_THREADS / 32], mpart[RMS_THREADS / 32];
	const int row = blockIdx.x, tid = threadIdx.x, nv = n / 8;
	if (row >= M) return;
	uint2 *q = (uint2 *)(Q + (size_t)row * n);
	uint4 v[RMS_VEC];
	float m = 0.f, s;
	if (rmsnorm_row(v, part, y, sum, x, res, gain, row, n, eps, plusOne)) { // y's vectors in registers
#pragma unroll
		for (int k = 0; k < RMS_VEC; k++)
			if (tid + k * RMS_THREADS < nv) m = q8_absmax(m, v[k]);
		s = e4m3_scale(m, mpart, RMS_THREADS / 32);
#pragma unroll
		for (int k = 0; k < RMS_VEC; k++)
			if (tid + k * RMS_THREADS < nv) q[tid + k * RMS_THREADS] = q8_codes(v[k], s);
	} else { // rmsnorm_wide stored the row: each thread rereads the vectors it stored (c = tid + k·RMS_THREADS)
		const uint4 *yr = (const uint4 *)(y + (size_t)row * n);
		for (int c = tid; c < nv; c += RMS_THREADS) m = q8_absmax(m, yr[c]);
		s = e4m3_scale(m, mpart, RMS_THREADS / 32);
		for (int c = tid; c < nv; c += RMS_THREADS) q[c] = q8_codes(yr[c], s);
	}
	if (tid == 0) S[row] = s;
#endif
}

// splitk_add_rmsnorm_bf16 ends a split-K GEMM Y = X·Wᵀ [M, n] and runs AddRMSNorm on it in one launch: for each row,
// Y's values are the splits' partial sums ws[z][M][n] added in split order and rounded to bf16 (the operations of
// gemm_splitk_reduce without a residual), then sum = bf16(Y + res) and y = RMSNorm(sum) exactly as rmsnorm_bf16
// computes them with x = Y (the same vectors per thread, the same order of every sum): the bits of the GEMM, then
// AddRMSNorm, without storing Y or launching the reduce. One block of SPLIT_THREADS per row (two per multiprocessor),
// n ≤ RMS_VEC·RMS_THREADS·8. All threads add the row's partial sums into shared memory, each 4-column group with up
// to SPLIT_BATCH splits' loads in flight at once (a Kev-4B row: two round trips to L2), while the first RMS_THREADS
// threads' residual vectors load; then those threads normalise the row from there as rmsnorm_bf16 does,
// synchronising on a named barrier of their own.
#define SPLIT_THREADS 512
#define SPLIT_BATCH 6 // partial-sum planes loaded at once (within 64 registers beside the residual vectors)

extern "C" __global__ void __launch_bounds__(SPLIT_THREADS, 2)
    splitk_add_rmsnorm_bf16(__nv_bfloat16 *y, __nv_bfloat16 *sum, const float *ws, const __nv_bfloat16 *res,
                            const float *__restrict__ gain, int M, int n, int splits, float eps, int plusOne) {
	KEV_GRID_DEP();
	__shared__ float part[RMS_THREADS / 32];
	__shared__ __align__(16) __nv_bfloat16 yrow[RMS_VEC * RMS_THREADS * 8];
	const int row = blockIdx.x, tid = threadIdx.x;
	if (row >= M) return;
	const int nv = n / 8, nq = n / 4;
	// the norm threads' residual vectors, on their way while the partial sums load
	uint4 rv[RMS_VEC];
	if (tid < RMS_THREADS) {
		const uint4 *rr = (const uint4 *)(res + (size_t)row * n);
#pragma unroll
		for (int k = 0; k < RMS_VEC; k++)
			if (tid + k * RMS_THREADS < nv) rv[k] = rr[tid + k * RMS_THREADS];
	}
	const size_t plane = (size_t)M * n;
	const float *wr = ws + (size_t)row * n;
	for (int q = tid; q < nq; q += SPLIT_THREADS) {
		float4 acc = __ldcg((const float4 *)(wr + 4 * q));
		for (int z0 = 1; z0 < splits; z0 += SPLIT_BATCH) { // the next SPLIT_BATCH planes' loads in flight together
			float4 v[SPLIT_BATCH];
#pragma unroll
			for (int z = 0; z < SPLIT_BATCH; z++)
				if (z0 + z < splits) v[z] = __ldcg((const float4 *)(wr + (z0 + z) * plane + 4 * q));
#pragma unroll
			for (int z = 0; z < SPLIT_BATCH; z++)
				if (z0 + z < splits) {
					acc.x += v[z].x;
					acc.y += v[z].y;
					acc.z += v[z].z;
					acc.w += v[z].w;
				}
		}
		__nv_bfloat162 *d = (__nv_bfloat162 *)(yrow + 4 * q);
		d[0] = __floats2bfloat162_rn(acc.x, acc.y);
		d[1] = __floats2bfloat162_rn(acc.z, acc.w);
	}
	__syncthreads();
	if (tid >= RMS_THREADS) return;
	const uint4 *xr = (const uint4 *)yrow;
	uint4 *sr = (uint4 *)(sum + (size_t)row * n);
	uint4 v[RMS_VEC];
#pragma unroll
	for (int k = 0; k < RMS_VEC; k++) {
		const int c = tid + k * RMS_THREADS;
		if (c < nv) {
			float f[8], r[8];
			unpack8(xr[c], f);
			unpack8(rv[k], r);
#pragma unroll
			for (int i = 0; i < 8; i++) f[i] += r[i];
			v[k] = pack8(f);
			sr[c] = v[k];
		}
	}
	float ss = rms_sumsq(v, tid, nv);
	const float rstd = rms_rstd<true>(ss, part, n, eps);
	rms_store(y + (size_t)row * n, v, tid, nv, rstd, gain, plusOne);
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }

// y[m, f] = silu(x[m, f]) · x[m, F + f] for x [M, 2F] = [gate | up], y [M, F].
extern "C" __global__ void swiglu_bf16(__nv_bfloat16 *__restrict__ y, const __nv_bfloat16 *__restrict__ x, int M,
                                       int F) {
	KEV_GRID_DEP();
	const int q = F / 8;
	const size_t total = (size_t)M * q;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
		size_t m = i / q;
		int c = (int)(i % q);
		const uint4 *row = (const uint4 *)(x + m * 2 * F);
		float g[8], u[8];
		unpack8(row[c], g);
		unpack8(row[q + c], u);
#pragma unroll
		for (int k = 0; k < 8; k++) g[k] = g[k] * sigmoidf_(g[k]) * u[k];
		((uint4 *)(y + m * F))[c] = pack8(g);
	}
}

// y = x ⊙ sigmoid(gate), elementwise over n values (n % 8 == 0). y may alias x.
extern "C" __global__ void sigmoid_gate_bf16(__nv_bfloat16 *y, const __nv_bfloat16 *x,
                                             const __nv_bfloat16 *__restrict__ gate, size_t n) {
	KEV_GRID_DEP();
	const size_t q = n / 8;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < q; i += (size_t)gridDim.x * blockDim.x) {
		float a[8], b[8];
		unpack8(((const uint4 *)x)[i], a);
		unpack8(((const uint4 *)gate)[i], b);
#pragma unroll
		for (int k = 0; k < 8; k++) a[k] *= sigmoidf_(b[k]);
		((uint4 *)y)[i] = pack8(a);
	}
}

// sigmoid_gate_bf16_e4m3 is sigmoid_gate_bf16 over the rows of y, x, gate [M, n] that also quantizes each row of y
// as quant_rows_e4m3 (kernels/fp8_sm90a.cu) quantizes a bf16 row, bit for bit: S[r] = max|y[r, ·]| / 448 (fmaxf,
// IEEE division; 1 when that is 0), Q[r·n …] = E4M3(y / S[r]). One block of RMS_THREADS per row, the row's
// vectors in registers (n ≤ RMS_VEC·RMS_THREADS·8 = 4096, a multiple of 16); y may not alias x here. Each value is
// sigmoid_gate_bf16's (the same product, rounded the same way). Empty below compute capability 8.9 (the backend
// launches it on 9.0 only).
extern "C" __global__ void __launch_bounds__(RMS_THREADS)
    sigmoid_gate_bf16_e4m3(__nv_bfloat16 *y, const __nv_bfloat16 *x, const __nv_bfloat16 *__restrict__ gate, int M,
                           int n, uint8_t *Q, float *S) {
	KEV_GRID_DEP();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	__shared__ float mpart[RMS_THREADS / 32];
	const int row = blockIdx.x, tid = threadIdx.x, nv = n / 8;
	if (row >= M) return;
	const size_t o = (size_t)row * nv; // the row's first vector
	uint4 v[RMS_VEC];
	float m = 0.f;
#pragma unroll
	for (int k = 0; k < RMS_VEC; k++) {
		const int c = tid + k * RMS_THREADS;
		if (c >= nv) continue;
		float a[8], b[8];
		unpack8(((const uint4 *)x)[o + c], a);
		unpack8(((const uint4 *)gate)[o + c], b);
#pragma unroll
		for (int e = 0; e < 8; e++) a[e] *= sigmoidf_(b[e]);
		v[k] = pack8(a);
		((uint4 *)y)[o + c] = v[k];
		m = q8_absmax(m, v[k]);
	}
	const float s = e4m3_scale(m, mpart, RMS_THREADS / 32);
	uint2 *q = (uint2 *)(Q + (size_t)row * n);
#pragma unroll
	for (int k = 0; k < RMS_VEC; k++)
		if (tid + k * RMS_THREADS < nv) q[tid + k * RMS_THREADS] = q8_codes(v[k], s);
	if (tid == 0) S[row] = s;
#endif
}

// Fills p[0..n) with bf16 values uniform in [-scale, scale) from a counter hash of (seed, index): fresh,
// reproducible, never all zero. For tests and benchmarks.
extern "C" __global__ void fill_uniform_bf16(__nv_bfloat16 *p, size_t n, uint32_t seed, float scale) {
	KEV_GRID_DEP();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		uint32_t h = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)(i >> 32) * 0x85EBCA77u ^ seed * 0xC2B2AE3Du;
		h ^= h >> 15;
		h *= 0x2C1B3C6Du;
		h ^= h >> 12;
		h *= 0x297A2D39u;
		h ^= h >> 15;
		float u = (float)(h >> 8) * (1.f / 16777216.f); // [0, 1)
		p[i] = __float2bfloat16_rn((2.f * u - 1.f) * scale);
	}
}
