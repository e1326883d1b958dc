// bf16 GEMM on tensor cores: Y[M,N] = X[M,K] · W[N,K]ᵀ (+ R[M,N]), fp32 accumulation.
//
// mma.sync m16n8k16 (sm_80 and newer), operands staged through shared memory by cp.async in a STAGES-deep ring,
// read into fragments with ldmatrix. A shared-memory row holds 32 bf16 (64 bytes, four 16-byte chunks); chunk c of
// row r is stored at chunk c ^ ((r >> 1) & 3), which makes every ldmatrix phase touch 8 distinct 16-byte bank groups.
//
// Requirements (checked by the caller): K % 8 == 0, N % 8 == 0, ldx % 8 == 0, ldy % 2 == 0, pointers 16-byte
// aligned. Rows past M, columns past N and k past the split's end are zero-filled on load and skipped on store.
//
// Split-K: blockIdx.z selects k tiles [z·tps, (z+1)·tps). With gridDim.z > 1 each split writes fp32 partial sums to
// ws[z][M][N]; the split that finishes a tile last adds them in split order (deterministic), then the residual, and
// stores Y (gemm_splitk_finish, one tile counter per output tile in cnt).
#include "gemm.cuh"

#define BK 32

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
	return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
	int n = valid ? 16 : 0;
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t *r, uint32_t addr) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(addr));
}

__device__ __forceinline__ void mma_bf16_16816(float *c, const uint32_t *a, const uint32_t *b) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Byte offset of 16-byte chunk c (0..3) of row r in a [rows][BK] bf16 tile.
__device__ __forceinline__ uint32_t swz(int r, int c) { return (uint32_t)(r * 64 + ((c ^ ((r >> 1) & 3)) << 4)); }

// Block tile BM×BN, warps arranged WARPS_M×WARPS_N, each warp computing (BM/WARPS_M)×(BN/WARPS_N).
template <int BM, int BN, int WARPS_M, int WARPS_N, int STAGES>
__device__ __forceinline__ void gemm_body(void *__restrict__ Y, const void *__restrict__ R, float *__restrict__ ws,
                                          unsigned *cnt, const __nv_bfloat16 *__restrict__ X, const __nv_bfloat16 *__restrict__ W,
                                          int M, int N, int K, int ldx, int ldy, int yF32, int tps) {
	constexpr int NT = WARPS_M * WARPS_N * 32;
	constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
	constexpr int MT = WM / 16, NT8 = WN / 8; // mma tiles per warp
	static_assert(WN % 16 == 0 && WM % 16 == 0, "warp tile");
	constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;

	extern __shared__ __align__(128) unsigned char smem[];
	const uint32_t sbase = smem_addr(smem);

	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int warp_m = warp / WARPS_N, warp_n = warp % WARPS_N;
	const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
	const int kb = blockIdx.z * tps * BK;
	const int ke = min(K, kb + tps * BK);
	const int nk = ke > kb ? (ke - kb + BK - 1) / BK : 0;

	auto load_tile = [&](int stage, int kt) {
		const int k0 = kb + kt * BK;
		const uint32_t sa = sbase + stage * STAGE_BYTES, sb = sa + A_BYTES;
#pragma unroll
		for (int i = tid; i < BM * 4; i += NT) {
			int r = i >> 2, c = i & 3, gm = m0 + r, gk = k0 + c * 8;
			bool ok = gm < M && gk < ke;
			cp_async16(sa + swz(r, c), ok ? (const void *)(X + (size_t)gm * ldx + gk) : (const void *)X, ok);
		}
#pragma unroll
		for (int i = tid; i < BN * 4; i += NT) {
			int r = i >> 2, c = i & 3, gn = n0 + r, gk = k0 + c * 8;
			bool ok = gn < N && gk < ke;
			cp_async16(sb + swz(r, c), ok ? (const void *)(W + (size_t)gn * K + gk) : (const void *)W, ok);
		}
	};

	float acc[MT][NT8][4];
#pragma unroll
	for (int i = 0; i < MT; i++)
#pragma unroll
		for (int j = 0; j < NT8; j++)
#pragma unroll
			for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

#pragma unroll
	for (int s = 0; s < STAGES - 1; s++) {
		if (s < nk) load_tile(s, s);
		cp_async_commit();
	}

	for (int kt = 0; kt < nk; kt++) {
		cp_async_wait<STAGES - 2>();
		__syncthreads();
		{
			int pf = kt + STAGES - 1;
			if (pf < nk) load_tile(pf % STAGES, pf);
			cp_async_commit();
		}
		const uint32_t sa = sbase + (kt % STAGES) * STAGE_BYTES, sb = sa + A_BYTES;
#pragma unroll
		for (int kk = 0; kk < 2; kk++) {
			uint32_t af[MT][4], bf[NT8][2];
#pragma unroll
			for (int i = 0; i < MT; i++) {
				int r = warp_m * WM + i * 16 + (lane & 15);
				ldmatrix_x4(af[i], sa + swz(r, kk * 2 + (lane >> 4)));
			}
#pragma unroll
			for (int j = 0; j < NT8; j += 2) {
				int r = warp_n * WN + j * 8 + ((lane >> 4) << 3) + (lane & 7);
				uint32_t t[4];
				ldmatrix_x4(t, sb + swz(r, kk * 2 + ((lane >> 3) & 1)));
				bf[j][0] = t[0];
				bf[j][1] = t[1];
				bf[j + 1][0] = t[2];
				bf[j + 1][1] = t[3];
			}
#pragma unroll
			for (int i = 0; i < MT; i++)
#pragma unroll
				for (int j = 0; j < NT8; j++) mma_bf16_16816(acc[i][j], af[i], bf[j]);
		}
	}
	cp_async_wait<0>();

	const int g = lane >> 2, tig = lane & 3;
	const bool split = gridDim.z > 1;
	float *part = ws + (size_t)blockIdx.z * M * N;
#pragma unroll
	for (int i = 0; i < MT; i++) {
#pragma unroll
		for (int j = 0; j < NT8; j++) {
			int col = n0 + warp_n * WN + j * 8 + tig * 2;
			if (col >= N) continue;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int row = m0 + warp_m * WM + i * 16 + g + h * 8;
				if (row >= M) continue;
				float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
				if (split)
					*(float2 *)(part + (size_t)row * N + col) = make_float2(v0, v1);
				else
					gemm_store2(Y, R, ldy, yF32, row, col, v0, v1);
			}
		}
	}
	if (split) gemm_splitk_finish<BM, BN>(Y, R, ws, cnt, M, N, ldy, yF32, m0, n0, tid, NT, 0);
}

#define GEMM_PARAMS                                                                                              \
	void *Y, const void *R, float *ws, unsigned *cnt, const __nv_bfloat16 *X, const __nv_bfloat16 *W, int M, int N, \
	    int K, int ldx, int ldy, int yF32, int tps
#define GEMM_ARGS Y, R, ws, cnt, X, W, M, N, K, ldx, ldy, yF32, tps

// 128×128 tiles, 8 warps (2×4, 64×32 each), 4 stages: 64 KiB of dynamic shared memory. For M ≳ 512.
extern "C" __global__ void __launch_bounds__(256) gemm_bf16_128x128(GEMM_PARAMS) {
	KEV_GRID_DEP();
	gemm_body<128, 128, 2, 4, 4>(GEMM_ARGS);
}

// 64×64 tiles, 4 warps (2×2, 32×32 each), 4 stages: 32 KiB.
extern "C" __global__ void __launch_bounds__(128) gemm_bf16_64x64(GEMM_PARAMS) {
	KEV_GRID_DEP();
	gemm_body<64, 64, 2, 2, 4>(GEMM_ARGS);
}

