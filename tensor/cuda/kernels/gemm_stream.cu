// Weight-streaming bf16 GEMM for small M: Y[M,N] = X[M,K] · W[N,K]ᵀ (+ R[M,N]), fp32 accumulation, M ≤ 16·MT.
//
// For M ≲ 128 the product is bound by reading W once. A block owns 128 consecutive W rows and a K range
// (blockIdx.z of gridDim.z splits, tps steps of 128 each); each of its 8 warps owns 16 consecutive rows and walks
// its K range in steps of 128, loading every row's 256-byte segment of the step straight into registers with
// 16-byte non-coherent loads that skip L1 and ask L2 for 256-byte pieces (a warp instruction covers 64 contiguous
// bytes of 8 rows; the 4 instructions of a step cover 256 contiguous bytes of each). The next step's W is in flight
// while the current one is multiplied. The X tile of the step (all M rows × 128 k) is copied once per block into
// shared memory (double buffered, cp.async) and reused by all 128 rows.
//
// The tensor-core operands are read without ldmatrix: since the k order inside a product does not matter, thread
// (g = lane/4, t = lane%4) holds the 8 consecutive k of one 16-byte piece, k = 32u + 8t .. +7, and uses them as the
// fragment k indices {2t, 2t+1, 2t+8, 2t+9} of one m16n8k16 mma and the same indices of a second one; the X
// fragments are 16-byte shared loads at the same k, so both operands follow the same permutation.
//
// Split-K as in gemm.cu: with gridDim.z > 1 each split stores fp32 partials to ws[z][M][N] and the split that
// finishes a 128-column tile last sums them in split order (gemm_splitk_finish), so results are deterministic.
// Requirements (checked by the caller): K % 8 == 0, N % 8 == 0, ldx % 8 == 0, ldy % 2 == 0, 16-byte aligned
// pointers, M ≤ 16·MT. Grid: (1, ceil(N/128), splits); 256 threads.
#include "gemm.cuh"

#define SK 128                // k per step
#define XROW (SK * 2 + 64)    // shared bytes per X row: 256 + 64 (≡ 64 mod 128: conflict-free 16-byte loads)
#define SBN 128               // W rows per block

__device__ __forceinline__ uint32_t s_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void s_cp16(uint32_t dst, const void *src, bool valid) {
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

// ldw loads 16 bytes of W that no kernel writes meanwhile: non-coherent, not kept in L1, 256-byte L2 fill.
__device__ __forceinline__ uint4 ldw(const void *p) {
	uint4 v;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
	             : "l"(p));
	return v;
}

__device__ __forceinline__ uint4 lds16(uint32_t addr) {
	uint4 v;
	asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
	return v;
}

__device__ __forceinline__ void mma16816(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};\n"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int MT>
__device__ __forceinline__ void stream_body(void *Y, const void *R, float *__restrict__ ws,
                                            unsigned *cnt, const __nv_bfloat16 *__restrict__ X,
                                            const __nv_bfloat16 *__restrict__ W, int M, int N, int K, int ldx,
                                            int ldy, int yF32, int tps) {
	constexpr int MP = 16 * MT, XBUF = MP * XROW;
	extern __shared__ __align__(128) unsigned char smem[];
	const uint32_t sbase = s_addr(smem);
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
	const int n0 = blockIdx.y * SBN;
	const int kb = blockIdx.z * tps * SK, ke = min(K, kb + tps * SK);
	const int ns = ke > kb ? (ke - kb + SK - 1) / SK : 0;

	// This thread's two W rows (one per n8 tile) and their validity.
	const int r0 = n0 + warp * 16 + g, r1 = r0 + 8;
	const __nv_bfloat16 *w0 = W + (size_t)min(r0, N - 1) * K + t * 8, *w1 = W + (size_t)min(r1, N - 1) * K + t * 8;
	const bool v0 = r0 < N, v1 = r1 < N;

	auto load_x = [&](int s) {
		const int k0 = kb + s * SK;
		const uint32_t b = sbase + (s & 1) * XBUF;
#pragma unroll
		for (int i = tid; i < MP * 16; i += 256) {
			const int row = i >> 4, c = i & 15, k = k0 + c * 8;
			const bool ok = row < M && k < ke;
			s_cp16(b + row * XROW + c * 16, ok ? (const void *)(X + (size_t)row * ldx + k) : (const void *)X, ok);
		}
		asm volatile("cp.async.commit_group;\n" ::);
	};
	auto load_w = [&](int s, uint4 (&w)[2][4]) {
		const int k0 = kb + s * SK;
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const int k = k0 + u * 32 + t * 8;
			const bool ok = k < ke;
			w[0][u] = ok && v0 ? ldw(w0 + k0 + u * 32) : make_uint4(0, 0, 0, 0);
			w[1][u] = ok && v1 ? ldw(w1 + k0 + u * 32) : make_uint4(0, 0, 0, 0);
		}
	};

	float acc[MT][2][4];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int j = 0; j < 2; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

	auto compute = [&](int s, const uint4 (&w)[2][4]) {
		const uint32_t b = sbase + (s & 1) * XBUF + g * XROW + t * 16;
#pragma unroll
		for (int u = 0; u < 4; u++) {
#pragma unroll
			for (int i = 0; i < MT; i++) {
				const uint4 lo = lds16(b + (i * 16) * XROW + u * 64), hi = lds16(b + (i * 16 + 8) * XROW + u * 64);
#pragma unroll
				for (int j = 0; j < 2; j++) {
					mma16816(acc[i][j], lo.x, hi.x, lo.y, hi.y, w[j][u].x, w[j][u].y);
					mma16816(acc[i][j], lo.z, hi.z, lo.w, hi.w, w[j][u].z, w[j][u].w);
				}
			}
		}
	};
	// One step: X of step s+1 and W of step s+1 go out, then step s is multiplied.
	auto step = [&](int s, const uint4 (&cur)[2][4], uint4 (&nxt)[2][4]) {
		__syncthreads(); // everyone is done with the X buffer that step s+1 overwrites
		if (s + 1 < ns) {
			load_x(s + 1);
			load_w(s + 1, nxt);
			asm volatile("cp.async.wait_group 1;\n" ::);
		} else {
			asm volatile("cp.async.wait_group 0;\n" ::);
		}
		__syncthreads();
		compute(s, cur);
	};

	uint4 wa[2][4], wb[2][4];
	if (ns > 0) {
		load_x(0);
		load_w(0, wa);
	}
	for (int s = 0; s < ns; s += 2) {
		step(s, wa, wb);
		if (s + 1 < ns) step(s + 1, wb, wa);
	}

	const bool split = gridDim.z > 1;
	float *part = ws + (size_t)blockIdx.z * M * N;
#pragma unroll
	for (int i = 0; i < MT; i++) {
#pragma unroll
		for (int j = 0; j < 2; j++) {
			const int col = n0 + warp * 16 + j * 8 + t * 2;
			if (col >= N) continue;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int row = i * 16 + g + h * 8;
				if (row >= M) continue;
				const float a = acc[i][j][2 * h], c = acc[i][j][2 * h + 1];
				if (split)
					*(float2 *)(part + (size_t)row * N + col) = make_float2(a, c);
				else
					gemm_store2(Y, R, ldy, yF32, row, col, a, c);
			}
		}
	}
	if (split) gemm_splitk_finish<MP, SBN>(Y, R, ws, cnt, M, N, ldy, yF32, 0, n0, tid, 256, 0);
}

#define STREAM_PARAMS                                                                                            \
	void *Y, const void *R, float *ws, unsigned *cnt, const __nv_bfloat16 *X, const __nv_bfloat16 *W, int M, int N, \
	    int K, int ldx, int ldy, int yF32, int tps
#define STREAM_ARGS Y, R, ws, cnt, X, W, M, N, K, ldx, ldy, yF32, tps

// gemm_stream_mtT: M ≤ 16·T; shared memory 2 · 16·T · 320 bytes.
extern "C" __global__ void __launch_bounds__(256, 2) gemm_stream_mt1(STREAM_PARAMS) {
	KEV_GRID_DEP(); stream_body<1>(STREAM_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 2) gemm_stream_mt2(STREAM_PARAMS) {
	KEV_GRID_DEP(); stream_body<2>(STREAM_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 2) gemm_stream_mt4(STREAM_PARAMS) {
	KEV_GRID_DEP(); stream_body<4>(STREAM_ARGS); }
extern "C" __global__ void __launch_bounds__(256, 1) gemm_stream_mt8(STREAM_PARAMS) {
	KEV_GRID_DEP(); stream_body<8>(STREAM_ARGS); }
