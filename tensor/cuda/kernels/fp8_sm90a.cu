// FP8 (E4M3) products for Hopper (sm_90a): activations quantized per row on the device, weights quantized per output
// channel on the host (internal/fp8), fp32 accumulation, bf16 results.
//
// quant_rows_e4m3 turns an activation matrix X[M, K] (bf16 or fp32) into E4M3 codes Q[M, K] (K contiguous) and one fp32 scale
// per row, S[r] = max|X[r, ·]| / 448 (1 when that is 0), Q = E4M3(X / S) rounded to nearest even with saturation to
// ±448: internal/fp8.QuantizeActivations, bit for bit.
//
// gemm_fp8_wgmma_128xBN computes Y[M, N] = (Xq[M, K] · Wq[N, K]ᵀ) · xs[row] · ws[col] (+ R[M, N]), Y and R bf16 (or
// fp32 when yF32). The
// structure is gemm_sm90a.cu's wave kernel: tiles of 128 rows × BN columns, warpgroup 0 the producer (one thread
// issues TMA copies of the X and W tiles into a STAGES-deep ring of mbarrier-guarded stages), warpgroups 1 and 2 the
// consumers of 64 rows each. A k tile is 128 codes = 128 bytes per row, copied with the 128-byte swizzle, so the
// shared-memory layout and the wgmma descriptors are byte for byte those of the bf16 kernels' 64-element tiles; a
// wgmma k step is 32 codes (32 bytes, as bf16's 16 elements). K must be a multiple of 16 (the tensor maps' row
// stride is K bytes, a multiple of 16); k, rows and columns outside the matrices are zero-filled by the copy engine.
//
// Accumulation: each k tile's four products (m64nBNk32) start from zero in the wgmma accumulators, and the tile's sum
// is then added in fp32 to a second set of registers (from zero), in k order. The tensor cores' FP8 sums keep fewer
// bits than fp32 over long runs of k; adding every 128 codes in fp32 bounds what that loses. Every output element is
// reduced over all of K by one block in the same order whatever M and the tile width are (no split-K; an element's
// products do not depend on the instruction's width, TestGEMMFP8Tiles): a row's bits do not depend on the rows it is
// stacked with. The scales are applied after the sum: y = tot · (xs[row] · ws[col]).
//
// The TMA ring, the register hand-over and the tile order are gemm_sm90a.cu's (tma_ring.cuh).
#include "common.cuh"
#include "e4m3.cuh"
#include "gemm.cuh"
#include "tma_ring.cuh"
#include "wgmma.cuh"

// ---- quantization ----

// quant_rows_e4m3: one block (QUANT_THREADS threads) per row r < M of X (bf16, or fp32 when xF32; row stride ldx
// elements, a multiple of 8): S[r] = the row's scale, Q[r·K …] = its codes. K a multiple of 16; X and Q 16-byte
// aligned. The largest magnitude skips NaN (fmaxf), and the divisions are IEEE (div.rn.f32), as in internal/fp8.
#define QUANT_THREADS 256

// quant_load8 widens elements 8i … 8i+7 of row x (bf16, or fp32 when xF32) to float.
__device__ __forceinline__ void quant_load8(const void *x, int xF32, int i, float *f) {
	if (xF32) {
		const float4 a = ((const float4 *)x)[2 * i], b = ((const float4 *)x)[2 * i + 1];
		f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
	} else {
		unpack8(((const uint4 *)x)[i], f);
	}
}

extern "C" __global__ void __launch_bounds__(QUANT_THREADS) quant_rows_e4m3(const void *X, int xF32, int ldx,
                                                                             uint8_t *Q, float *S, int M, int K) {
	KEV_GRID_DEP();
	__shared__ float red[QUANT_THREADS / 32];
	const int row = blockIdx.x;
	if (row >= M) return;
	const void *x = xF32 ? (const void *)((const float *)X + (size_t)row * ldx)
	                     : (const void *)((const __nv_bfloat16 *)X + (size_t)row * ldx);
	const int n8 = K / 8;
	float m = 0.f;
	for (int i = threadIdx.x; i < n8; i += QUANT_THREADS) {
		float f[8];
		quant_load8(x, xF32, i, f);
		m = absmax8(m, f);
	}
	const float s = e4m3_scale(m, red, QUANT_THREADS / 32);
	if (threadIdx.x == 0) S[row] = s;
	uint2 *q = (uint2 *)(Q + (size_t)row * K);
	for (int i = threadIdx.x; i < n8; i += QUANT_THREADS) {
		float f[8];
		quant_load8(x, xF32, i, f);
		q[i] = e4m3x8(f, s);
	}
}

// ---- FP8 wgmma ----

// wgmma_fp8_m64nN: d[64×N] = A[64×32] · B[N×32]ᵀ (+ d when acc ≠ 0), both E4M3 K-major in shared memory
// (descriptors), fp32 d, one wrapper per tile width N of the kernels below and per width FP8_HALVES needs (8, 16,
// 72). (FP8 wgmma has no transpose operands: both must be K-major.)
__device__ __forceinline__ void wgmma_fp8_m64n8(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0,%1,%2,%3}, %4, %5, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n16(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n24(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %14, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n24k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, %12, %13, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n32(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n40(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %22, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n40k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19}, %20, %21, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n48(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %26, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n48k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, %24, %25, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n64(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n72(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n72k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35}, %36, %37, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n80(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n80k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, %40, %41, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n96(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n128(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n144(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n144k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71}, %72, %73, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
	             : "l"(da), "l"(db), "r"(acc));
}

__device__ __forceinline__ void wgmma_fp8_m64n192(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
	             : "l"(da), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wgmma_fp8_m64n256(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
	             : "l"(da), "l"(db), "r"(acc));
}
// wgmma_fp8_tile is the wrapper of the tile width BN.
template <int BN> __device__ __forceinline__ void wgmma_fp8_tile(float *d, uint64_t da, uint64_t db, int acc) {
	if constexpr (BN == 8) {
		wgmma_fp8_m64n8(d, da, db, acc);
	} else if constexpr (BN == 16) {
		wgmma_fp8_m64n16(d, da, db, acc);
	} else if constexpr (BN == 24) {
		wgmma_fp8_m64n24(d, da, db, acc);
	} else if constexpr (BN == 32) {
		wgmma_fp8_m64n32(d, da, db, acc);
	} else if constexpr (BN == 40) {
		wgmma_fp8_m64n40(d, da, db, acc);
	} else if constexpr (BN == 48) {
		wgmma_fp8_m64n48(d, da, db, acc);
	} else if constexpr (BN == 64) {
		wgmma_fp8_m64n64(d, da, db, acc);
	} else if constexpr (BN == 72) {
		wgmma_fp8_m64n72(d, da, db, acc);
	} else if constexpr (BN == 80) {
		wgmma_fp8_m64n80(d, da, db, acc);
	} else if constexpr (BN == 96) {
		wgmma_fp8_m64n96(d, da, db, acc);
	} else if constexpr (BN == 128) {
		wgmma_fp8_m64n128(d, da, db, acc);
	} else if constexpr (BN == 144) {
		wgmma_fp8_m64n144(d, da, db, acc);
	} else if constexpr (BN == 192) {
		wgmma_fp8_m64n192(d, da, db, acc);
	} else if constexpr (BN == 256) {
		wgmma_fp8_m64n256(d, da, db, acc);
	} else {
		static_assert(BN == 0, "no FP8 wgmma wrapper for this tile width");
	}
}

// fp8_promote adds a group's sum d, once its products are done, to the fp32 total tot (which starts at zero: adding
// into it always, rather than copying the first group's sum, lets ptxas keep tot and d in registers of their own,
// with no copies of the total before each group's products).
template <int BN> __device__ __forceinline__ void fp8_promote(float *d, float *tot) {
	regs_after<BN / 2>(d);
#pragma unroll
	for (int i = 0; i < BN / 2; i++) tot[i] += d[i];
}

// ---- clusters of two (MC kernels) ----
// The MC kernels run in clusters of two blocks along the grid's x (row tiles m and m + 128 of the same columns):
// each block copies its own X tile and half of the W tile, multicast into both blocks' shared memory, so that the
// pair reads each W tile from L2 once instead of twice. A stage is then free only when the consumers of both blocks
// have read it: every consumer warp arrives on the empty barrier of each block of the cluster. A block leaves only
// after its producer has seen every stage released by both blocks' consumers (the producer's tail, as in CUTLASS):
// then no copy into it and no arrival on its barriers is still on its way, and its consumers have waited for every
// byte copied into it.

// cluster_rank is the block's rank in its cluster (%cluster_ctarank).
__device__ __forceinline__ uint32_t cluster_rank() {
	uint32_t r;
	asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
	return r;
}

// cluster_sync is a barrier of every thread of every block of the cluster. Its arrival is relaxed (a release
// compiles to a fence of the whole GPU): the one thing ordered across it, the barriers' initialisation, is released
// by fence.mbarrier_init.release.cluster, as CUTLASS's kernels do it.
__device__ __forceinline__ void cluster_sync() {
	asm volatile("barrier.cluster.arrive.relaxed.aligned;\nbarrier.cluster.wait.aligned;\n" ::: "memory");
}

// mbar_arrive_at arrives on the barrier at shared address bar in block cta of the cluster. The arrival releases at
// the scope of the block (the default, as CUTLASS's ClusterBarrier arrives): what it orders are the warp's wgmma
// reads of its own block's stage. Release at the cluster's scope compiles to a fence of the whole GPU (MEMBAR.ALL.GPU)
// before every arrival, which made every k tile 0.6–0.8 µs slower.
__device__ __forceinline__ void mbar_arrive_at(uint32_t bar, uint32_t cta) {
	asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
	             "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
	             "r"(cta)
	             : "memory");
}

// tma_load2d_mc is tma_load2d into the same shared address of every block in mask, completing on the barrier at
// the same address in each.
__device__ __forceinline__ void tma_load2d_mc(uint32_t dst, const TensorMap *map, int c0, int c1, uint32_t bar,
                                              uint16_t mask) {
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
	             " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
	             "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
	             : "memory");
}

// fp8_tile_rows sets thread t's two rows of consumer warpgroup c's 64 rows of the tile at row m0 (accumulator
// layout, per warp w of the warpgroup and lane l: tot[4j + 2h + e] is row 16w + l/4 + 8h, column 8j + 2(l%4) + e of
// the warpgroup's 64×BN tile) and their scales (0 past M).
__device__ __forceinline__ void fp8_tile_rows(int m0, int c, int t, int M, const float *xs, int *rows, float *sx) {
	const int w = (t >> 5) & 3, l = t & 31;
#pragma unroll
	for (int h = 0; h < 2; h++) {
		rows[h] = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h;
		sx[h] = rows[h] < M ? xs[rows[h]] : 0.f;
	}
}

// gemm_fp8_store is gemm_fp8's epilogue: consumer warpgroup c's (thread t's) sums tot of the tile at (m0, n0),
// scaled, rounded and stored (with GATED, SwiGLU of the gate and up sums). Every global load it needs — the column
// scales and the residual — is issued first, into registers that the k loop's products have left free, and only
// then used: loaded beside their use, each load's latency was paid once per 8 columns, in turn (~0.1–0.2 µs each, a
// few µs a tile). CH: the 8-column groups loaded at once (all of the tile's by default; fewer where the sums leave
// too few registers for all: the wide FAST tiles), the groups taken CH after CH.
template <int BN, bool GATED, int CH = (GATED ? BN / 2 : BN) / 8>
__device__ __forceinline__ void gemm_fp8_store(const float *tot, void *Y, const void *R, const float *xs,
                                               const float *ws, int M, int N, int ldy, int yF32, int m0, int n0,
                                               int c, int t) {
	constexpr int TN = GATED ? BN / 2 : BN;
	constexpr int J = TN / 8; // 8-column groups of the tile
	const int F = N / 2;

	const int l = t & 31;
	int rows[2];
	float sx[2];
	fp8_tile_rows(m0, c, t, M, xs, rows, sx);
#pragma unroll
	for (int j0 = 0; j0 < J; j0 += CH) {
		constexpr int U = 4 * J; // GATED: the up sums of the same columns
		if constexpr (GATED) {
			float2 sg[CH], su[CH];
#pragma unroll
			for (int j = j0; j < j0 + CH && j < J; j++) { // F a multiple of 8: a column past F reads F - 2's, unused
				const int col = min(n0 + 8 * j + 2 * (l & 3), F - 2);
				sg[j - j0] = *(const float2 *)(ws + col);
				su[j - j0] = *(const float2 *)(ws + F + col);
			}
#pragma unroll
			for (int j = j0; j < j0 + CH && j < J; j++) {
				const int col = n0 + 8 * j + 2 * (l & 3);
				if (col >= F) continue; // F a multiple of 8: col + 1 < F too
#pragma unroll
				for (int h = 0; h < 2; h++) {
					if (rows[h] >= M) continue;
					const float2 g = sg[j - j0], u = su[j - j0];
					const float v0 = swiglu1(__fmul_rn(tot[4 * j + 2 * h], __fmul_rn(sx[h], g.x)),
					                         __fmul_rn(tot[U + 4 * j + 2 * h], __fmul_rn(sx[h], u.x)));
					const float v1 = swiglu1(__fmul_rn(tot[4 * j + 2 * h + 1], __fmul_rn(sx[h], g.y)),
					                         __fmul_rn(tot[U + 4 * j + 2 * h + 1], __fmul_rn(sx[h], u.y)));
					*(__nv_bfloat162 *)((__nv_bfloat16 *)Y + (size_t)rows[h] * ldy + col) =
					    __floats2bfloat162_rn(v0, v1);
				}
			}
		} else {
			float2 sw[CH];
#pragma unroll
			for (int j = j0; j < j0 + CH && j < J; j++) // N even: a column past N reads N - 2's scales, unused
				sw[j - j0] = *(const float2 *)(ws + min(n0 + 8 * j + 2 * (l & 3), N - 2));
			if (R != nullptr && !yF32) { // the bf16 residual of each (row, column pair), 0 where there is none
				uint32_t rr[CH][2];
#pragma unroll
				for (int j = j0; j < j0 + CH && j < J; j++) {
					const int col = n0 + 8 * j + 2 * (l & 3);
#pragma unroll
					for (int h = 0; h < 2; h++)
						rr[j - j0][h] = col < N && rows[h] < M ? *(const uint32_t *)((const __nv_bfloat16 *)R +
						                                                             (size_t)rows[h] * ldy + col)
						                                       : 0u;
				}
#pragma unroll
				for (int j = j0; j < j0 + CH && j < J; j++) {
					const int col = n0 + 8 * j + 2 * (l & 3);
					if (col >= N) continue;
#pragma unroll
					for (int h = 0; h < 2; h++) {
						if (rows[h] >= M) continue;
						// as gemm_store2: the product of the scales, each product rounded, then the residual added
						float v0 = __fmul_rn(tot[4 * j + 2 * h], __fmul_rn(sx[h], sw[j - j0].x));
						float v1 = __fmul_rn(tot[4 * j + 2 * h + 1], __fmul_rn(sx[h], sw[j - j0].y));
						v0 += __uint_as_float(rr[j - j0][h] << 16);
						v1 += __uint_as_float(rr[j - j0][h] & 0xffff0000u);
						*(__nv_bfloat162 *)((__nv_bfloat16 *)Y + (size_t)rows[h] * ldy + col) =
						    __floats2bfloat162_rn(v0, v1);
					}
				}
			} else {
#pragma unroll
				for (int j = j0; j < j0 + CH && j < J; j++) {
					const int col = n0 + 8 * j + 2 * (l & 3);
					if (col >= N) continue; // N even: col + 1 < N too
#pragma unroll
					for (int h = 0; h < 2; h++) {
						if (rows[h] >= M) continue;
						// the sum times the product of the scales, each product rounded (no fused add with the residual)
						const float v0 = __fmul_rn(tot[4 * j + 2 * h], __fmul_rn(sx[h], sw[j - j0].x));
						const float v1 = __fmul_rn(tot[4 * j + 2 * h + 1], __fmul_rn(sx[h], sw[j - j0].y));
						gemm_store2(Y, R, ldy, yF32, rows[h], col, v0, v1);
					}
				}
			}
		}
	}
}

// The kernels' flags: bits FP8_PROMO_SHIFT … +7 hold P − 1, where P is the number of k tiles whose products the
// tensor cores sum before the consumer adds them to its fp32 total (the promotion interval; 0, P = 1, is every k
// tile; the host's default is all of K). With P > 1 a consumer waits for its products only at the end of each P k
// tiles: in between it hands back the stage of the k tile before once the products of the one after are issued
// (wgmma.wait_group 1), as a kernel without fp32 promotion does. The tensor cores' FP8 sums keep fewer bits than
// fp32 over long runs of k, so P changes the results' low bits (by at most what fp8Check allows for P k tiles); for
// each P every width and kernel gives the same bits. fp8.go keeps the same value.
#define FP8_PROMO_SHIFT 8
// FP8_PIPE (bit 0): with all of K in the tensor cores (the FAST kernels, or P ≥ the k tiles), run the k loop that
// keeps one k tile's products in flight across iterations (gemm_fp8); else the interval loop, which waits for every
// k tile's products. The same bits either way.
#define FP8_PIPE 1

// gemm_fp8: the block (blockIdx.x, blockIdx.y) of a gridDim.x × gridDim.y grid computes the output tile tile_at
// places it at (gn n-tiles to a group). wpre: W holds weights uploaded from the host (no kernel writes them), so the
// producer loads the W tiles of the first STAGES k steps before it waits for the kernel before this one.
// flags: the promotion interval (FP8_PROMO_SHIFT above).
//
// GATED (the MLP's gate and up projections, W = [Wg; Wu] with N = 2F rows): a tile's W is BN/2 rows of Wg and the
// same BN/2 rows of Wu, loaded side by side, so each thread holds the gate and up sums of the same output columns
// (accumulator groups j and j + BN/16); the epilogue stores Y[M, F] (row stride ldy, bf16) = silu(g)·u with g and u
// scaled and rounded as the plain kernel stores them, then as swiglu_bf16 computes it: the bits of the two
// operations, without writing [g | u].
//
// PERSIST: a grid of at most one block per multiprocessor, block b computing tiles b, b + gridDim.x, … of the mT × nT
// tiles in tile_at's order (one linear index, as the one-tile grid numbers its blocks). The ring runs on across
// tiles, so the producer copies a tile's first k tiles while the consumers finish the one before and store it; the
// fill of the ring at each tile's start (about 3 µs: a third of a 20-k-tile product's time at 2,392 rows) is
// hidden. Each tile is summed and stored as by the one-tile kernel: the same bits.
//
// HALF (the h kernels, for M ≤ 64: every tile has at most 64 rows, which only consumer 0 would work on): each tile is
// split by columns instead, each consumer computing the tile's 64 rows × half its output columns (with GATED, half
// the gate rows and the same half of the up rows) with products half as wide (two a quarter as wide with GATED).
// Every width sums an element's products in the same order (TestGEMMFP8Tiles), so the halves give the whole tile's
// bits. (A separate kernel rather than a form chosen per tile: with both paths in one kernel ptxas serialises
// every product, C7511.)
//
// XC (the x kernels, one tile a block): blocks in clusters of two along the grid's x, which runs over column tiles
// (gridDim.x even, gridDim.y the row tiles), on column tiles 2q and 2q + 1 of the same rows. Each block copies half
// of the X tile's rows (64, rank 0 the first) with one multicast copy into the shared memory of both, and its own W
// tile: per block and k tile the bytes from L2 go from (128 + BN)·128 to (64 + BN)·128, for the narrow products of
// a question pass (N = 2,560 at a few hundred rows), where each X tile is read once for every column tile. A
// second block past N copies its X half for the first and W rows the copy engine fills with zeros, and stores
// nothing. The stages are handed back to both blocks as MC does it. The products, their order and the epilogue are
// the one-block kernel's: the same bits.
template <int BN, int STAGES, bool GATED = false, bool MC = false, bool PERSIST = false, bool HALF = false,
          bool FAST = false, bool XC = false>
__device__ __forceinline__ void gemm_fp8(const TensorMap *tmX, const TensorMap *tmW, void *Y, const void *R,
                                         const float *xs, const float *ws, int M, int N, int K, int ldy, int yF32,
                                         int gn, int wpre, int flags) {
	constexpr int BM = 128, BK = 128; // BK: codes (bytes) per k tile
	constexpr int A_BYTES = BM * BK, B_BYTES = BN * BK, STAGE_BYTES = A_BYTES + B_BYTES;
	extern __shared__ unsigned char smem_raw[];
	const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
	const uint32_t bars = base + STAGES * STAGE_BYTES; // full[STAGES], then empty[STAGES]

	static_assert(!GATED || BN % 16 == 0, "a gated tile holds BN/2 gate and BN/2 up rows, whole 8-row swizzle atoms");
	static_assert(!MC || BN % 16 == 0, "a cluster's block copies BN/2 W rows, whole 8-row swizzle atoms");
	static_assert(!XC || !(MC || PERSIST || HALF), "the X-sharing clusters are one-tile kernels of their own");
	constexpr bool CL = MC || XC; // clusters of two blocks, each stage filled by both
	constexpr int TN = GATED ? BN / 2 : BN; // output columns of a tile
	const int F = N / 2;                     // GATED: the up rows' offset, and the output columns

	const int wg = threadIdx.x >> 7;
	int m0, n0;
	uint32_t rank = 0;
	if constexpr (CL) rank = cluster_rank();
	if constexpr (MC && !PERSIST) { // the cluster's two blocks: row tiles 2p and 2p + 1 of the same columns
		tile_at((blockIdx.y * gridDim.x + blockIdx.x) >> 1, gridDim.x >> 1, gridDim.y, max(gn, 1), 2 * BM, TN, m0, n0);
		m0 += (int)rank * BM;
	} else if constexpr (XC) { // the cluster's two blocks: column tiles 2q and 2q + 1 of the same rows
		tile_at((blockIdx.y * gridDim.x + blockIdx.x) >> 1, gridDim.y, gridDim.x >> 1, max(gn, 1), BM, 2 * TN, m0, n0);
		n0 += (int)rank * TN;
	} else if constexpr (!PERSIST) {
		tile_at(blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y, max(gn, 1), BM, TN, m0, n0);
	}
	const int nk = (K + BK - 1) / BK;
	// The tiles this block computes: first, first + stride, … < T (the one-tile kernels: one, placed above). A
	// persistent cluster takes pairs of row tiles (2p and 2p + 1 of the same columns, as the one-pair grid places
	// them), both of its blocks the same pairs in the same order.
	int first = 0, stride = 1, T = 1, mT = 0, nT = 0;
	if constexpr (PERSIST) {
		constexpr int per = MC ? 2 : 1; // blocks to a cluster
		mT = (M + per * BM - 1) / (per * BM), nT = ((GATED ? F : N) + TN - 1) / TN;
		first = blockIdx.x / per, stride = gridDim.x / per, T = mT * nT;
	}
	auto place = [&](int tile) {
		if constexpr (PERSIST && MC) {
			tile_at(tile, mT, nT, max(gn, 1), 2 * BM, TN, m0, n0);
			m0 += (int)rank * BM;
		} else if constexpr (PERSIST) {
			tile_at(tile, mT, nT, max(gn, 1), BM, TN, m0, n0);
		}
	};
	// loadW copies the W rows of k tile kt into the stage's B region at sb: BN rows from n0, or with GATED TN gate
	// rows from n0 and the same TN up rows (F on), one after the other. MC: this block copies half of them (the
	// first BN/2 rows at rank 0 — with GATED the gate rows — the rest at rank 1) into both blocks of the cluster.
	auto loadW = [&](uint32_t sb, int kt, uint32_t full) {
		if constexpr (MC) {
			const int row = GATED ? (rank ? F + n0 : n0) : n0 + (int)rank * (BN / 2);
			tma_load2d_mc(sb + rank * (BN / 2) * BK, tmW, kt * BK, row, full, 3);
		} else if constexpr (GATED) {
			tma_load2d(sb, tmW, kt * BK, n0, full);
			tma_load2d(sb + TN * BK, tmW, kt * BK, F + n0, full);
		} else {
			tma_load2d(sb, tmW, kt * BK, n0, full);
		}
	};
	// A block of an MC cluster whose rows all lie past M (the second of an odd number of row tiles) copies no X: its
	// stages then expect only the W bytes. (A persistent block's tiles differ in this: it asks at each tile.)
	auto xrows = [&] { return !MC || m0 < M; };
	auto stageBytes = [&] { return xrows() ? (uint32_t)STAGE_BYTES : (uint32_t)B_BYTES; };
	// loadX copies the X rows of k tile kt into the stage at sa: the tile's 128, or with XC this block's half of them
	// into both blocks of the cluster.
	auto loadX = [&](uint32_t sa, int kt, uint32_t full) {
		if constexpr (XC)
			tma_load2d_mc(sa + rank * (BM / 2) * BK, tmX, kt * BK, m0 + (int)rank * (BM / 2), full, 3);
		else if (xrows())
			tma_load2d(sa, tmX, kt * BK, m0, full);
	};

	if constexpr (CL) { // empty: one arrival per consumer warp of each of the two blocks
		if (threadIdx.x == 0) {
			for (int s = 0; s < STAGES; s++) {
				mbar_init(bars + 8 * s, 1);
				mbar_init(bars + 8 * (STAGES + s), 2 * 8);
			}
			asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		}
		cluster_sync(); // both blocks' barriers exist before either copies into the other
	} else { // empty: one arrival per consumer thread
		if (threadIdx.x == 0) {
			for (int s = 0; s < STAGES; s++) {
				mbar_init(bars + 8 * s, 1);
				mbar_init(bars + 8 * (STAGES + s), 2 * 128);
			}
			asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
		}
		__syncthreads();
	}

	if (wg == 0) {
		producer_regs();
		if (threadIdx.x == 0) {
			place(first); // the host launches no more blocks than tiles
			const int pre = wpre ? min(STAGES, nk) : 0;
			for (int kt = 0; kt < pre; kt++) {
				mbar_expect_tx(bars + 8 * kt, stageBytes());
				loadW(base + kt * STAGE_BYTES + A_BYTES, kt, bars + 8 * kt);
			}
			kev_grid_wait();
			kev_grid_launch();
			int it = 0; // the ring's steps, over the block's tiles
			for (int tile = first; tile < T; tile += stride) {
				place(tile);
				for (int kt = 0; kt < nk; kt++, it++) {
					if (it < pre) {
						loadX(base + it * STAGE_BYTES, kt, bars + 8 * it);
						continue;
					}
					const int s = it % STAGES;
					if (it >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ((it / STAGES) + 1) & 1);
					const uint32_t full = bars + 8 * s, sa = base + s * STAGE_BYTES;
					mbar_expect_tx(full, stageBytes());
					loadX(sa, kt, full);
					loadW(sa + A_BYTES, kt, full);
				}
			}
			if constexpr (CL) // the block stays until every consumer of the cluster has released every stage:
				for (int k = max(it, STAGES); k < it + STAGES; k++) // no arrival is then still on its way to
					mbar_wait(bars + 8 * (STAGES + k % STAGES), ((k / STAGES) + 1) & 1); // this block
		} else {
			kev_grid_wait();
			kev_grid_launch();
		}
		return;
	}
	kev_grid_wait();
	kev_grid_launch();
	consumer_regs<128>();
	const int c = wg - 1, t = threadIdx.x - 128;
	// release hands stage s back to the producers: each thread; each warp on both blocks (MC).
	auto release = [&](int s) {
		if constexpr (CL) {
			__syncwarp();
			if ((t & 31) < 2) mbar_arrive_at(bars + 8 * (STAGES + s), t & 31);
		} else {
			mbar_arrive(bars + 8 * (STAGES + s));
		}
	};
	// HALF: a half (a quarter with GATED: half the gate rows and half the up rows) must be a whole number of
	// 8-column products and 8-row swizzle atoms.
	static_assert(!HALF || (!MC && (GATED ? BN % 32 == 0 : BN % 16 == 0)), "no half-column form of this tile");
	constexpr int SUMS = HALF ? BN / 4 : BN / 2; // a consumer thread's sums
	// k tiles a promotion; FAST: none, the tensor cores sum all of K in d (no fp32 total: wider tiles fit)
	const int promo = FAST ? 0x7fffffff : ((flags >> FP8_PROMO_SHIFT) & 255) + 1;
	float d[SUMS], tot[FAST ? 1 : SUMS];
	int it = 0;
	for (int tile = first; tile < T; tile += stride) {
	place(tile);
	const bool live = HALF || m0 + 64 * c < M; // rows of this consumer exist
#pragma unroll
	for (int i = 0; i < SUMS; i++) d[i] = 0.f;
	// issue enqueues this consumer's products of the k tile in stage s into dd, the first of them adding to dd's
	// sums (acc) or starting from zero.
	auto issue = [&](float *dd, int s, bool acc) {
		const uint32_t sa = base + s * STAGE_BYTES + c * (64 * BK), sb = base + s * STAGE_BYTES + A_BYTES;
		wgmma_fence();
		if constexpr (HALF) { // rows 0–63 of the stage's X; the W rows of half c
			const uint32_t sa0 = base + s * STAGE_BYTES;
			if constexpr (GATED) { // gate rows c·BN/4 …, up rows BN/2 + c·BN/4 …: sums d[0, BN/8), d[BN/8, BN/4)
				const uint32_t sg = sb + c * (BN / 4) * BK, su = sb + (BN / 2 + c * (BN / 4)) * BK;
#pragma unroll
				for (int kk = 0; kk < BK / 32; kk++) {
					wgmma_fp8_tile<BN / 4>(dd, desc_sw128(sa0 + 32 * kk), desc_sw128(sg + 32 * kk), kk > 0 || acc);
					wgmma_fp8_tile<BN / 4>(dd + BN / 8, desc_sw128(sa0 + 32 * kk), desc_sw128(su + 32 * kk), kk > 0 || acc);
				}
			} else {
				const uint32_t sh = sb + c * (BN / 2) * BK;
#pragma unroll
				for (int kk = 0; kk < BK / 32; kk++)
					wgmma_fp8_tile<BN / 2>(dd, desc_sw128(sa0 + 32 * kk), desc_sw128(sh + 32 * kk), kk > 0 || acc);
			}
		} else {
#pragma unroll
			for (int kk = 0; kk < BK / 32; kk++) // scale-d = 0 on the first product of a sum from zero
				wgmma_fp8_tile<BN>(dd, desc_sw128(sa + 32 * kk), desc_sw128(sb + 32 * kk), kk > 0 || acc);
		}
		wgmma_commit();
	};
	if ((FAST || promo >= nk) && (flags & FP8_PIPE)) {
		// All of K in the tensor cores, FP8_PIPE: a live consumer keeps one k tile's products in flight across
		// iterations, handing back the stage before once the next one's are issued. No branch on the products' state
		// inside this loop: with one (the loop below), ptxas waits for every product at the loop's end.
		if (live) {
			int held = -1;
			for (int kt = 0; kt < nk; kt++, it++) {
				const int s = it % STAGES;
				mbar_wait(bars + 8 * s, (it / STAGES) & 1);
				issue(d, s, kt > 0);
				wgmma_wait1();
				if (held >= 0) release(held);
				held = s;
			}
			wgmma_wait0();
			if (held >= 0) release(held);
			regs_after<SUMS>(d); // read after the wait
			if constexpr (!FAST) // 0 + d: the loop below's fp32 total at P ≥ nk, bit for bit (−0 included)
#pragma unroll
				for (int i = 0; i < SUMS; i++) tot[i] = __fadd_rn(0.f, d[i]);
		} else {
			for (int kt = 0; kt < nk; kt++, it++) {
				const int s = it % STAGES;
				mbar_wait(bars + 8 * s, (it / STAGES) & 1);
				release(s);
			}
		}
	} else {
		if constexpr (!FAST)
#pragma unroll
			for (int i = 0; i < SUMS; i++) tot[i] = 0.f;
		int g = 0, held = -1; // k tiles summed since the last promotion; the stage whose products may still run
		for (int kt = 0; kt < nk; kt++, it++) {
			const int s = it % STAGES;
			const int fresh = g == 0; // this k tile's products start from zero
			mbar_wait(bars + 8 * s, (it / STAGES) & 1);
			if (live) issue(d, s, !fresh);
			if (!live) {
				release(s);
			} else if (++g == promo || kt == nk - 1) {
				wgmma_wait0();
				if (held >= 0) release(held);
				release(s); // the stage is read: the producer may refill it during the adds
				if constexpr (FAST)
					regs_after<SUMS>(d); // the epilogue reads d after the wait
				else
					fp8_promote<2 * SUMS>(d, tot);
				g = 0, held = -1;
			} else { // the k tile before's products are done: its stage goes back; this one's run on
				wgmma_wait1();
				if (held >= 0) release(held);
				held = s;
			}
		}
	}
	if (live) {
		// HALF: consumer c's rows are the tile's 64 (warpgroup 0's place), its columns half c's
		constexpr int SBN = HALF ? BN / 2 : BN, TN2 = GATED ? BN / 4 : BN / 2;
		const int sn0 = HALF ? n0 + c * TN2 : n0, sc = HALF ? 0 : c;
		float *acc = tot; // FAST: the sums are d's, which leave registers for 4 (256 columns) or 8 groups' loads
		if constexpr (FAST) { // 0 + d, as every other kernel's fp32 total at P ≥ nk (−0 included)
			acc = d;
#pragma unroll
			for (int i = 0; i < SUMS; i++) d[i] = __fadd_rn(0.f, d[i]);
		}
		constexpr int J = (GATED ? SBN / 2 : SBN) / 8; // 8-column groups; 18 (144 plain columns) load in halves
		constexpr int CH = FAST ? (BN > 192 ? 4 : 8) : (J >= 18 ? J / 2 : J);
		gemm_fp8_store<SBN, GATED, CH>(acc, Y, R, xs, ws, M, N, ldy, yF32, m0, sn0, sc, t);
	}
	}
}

#define FP8_PARAMS                                                                                                \
	const __grid_constant__ TensorMap tmX, const __grid_constant__ TensorMap tmW, void *Y, const void *R,      \
	    const float *xs, const float *ws, int M, int N, int K, int ldy, int yF32, int gn, int wpre, int flags

// The FP8 tile kernels, 128 rows × BN columns, 384 threads; dynamic shared memory STAGES · (128 + BN) · 128 + 1024
// (alignment) + 16 · STAGES (barriers), within the 227 KiB a block may have. The host plans the width per product
// (fp8Plan in fp8_plan.go, which keeps this table); every width sums each output over k in the same order, so all
// of them give the same bits and the width may follow M.
// FP8_KERNEL defines kernel NAME: gemm_fp8<BN, STAGES, GATED, MC, PERSIST>, with ATTR before its launch bounds
// (the cluster kernels' __cluster_dims__). The lines below name each kind of kernel with a macro of its own, which
// fp8_plan_test.go reads against the host's tables of widths.
#define FP8_KERNEL_X(NAME, BN, STAGES, GATED, MC, PERSIST, ATTR, HALF, FAST, XC)                               \
	extern "C" __global__ void ATTR __launch_bounds__(384, 1) NAME(FP8_PARAMS) {                                \
		KEV_GRID_DEP_DEFERRED();                                                                              \
		gemm_fp8<BN, STAGES, GATED, MC, PERSIST, HALF, FAST, XC>(&tmX, &tmW, Y, R, xs, ws, M, N, K, ldy, yF32,  \
		                                                         gn, wpre, flags);                             \
	}
#define FP8_KERNEL_F(NAME, BN, STAGES, GATED, MC, PERSIST, ATTR, HALF, FAST)                                   \
	FP8_KERNEL_X(NAME, BN, STAGES, GATED, MC, PERSIST, ATTR, HALF, FAST, false)
#define FP8_KERNEL(NAME, BN, STAGES, GATED, MC, PERSIST, ATTR, HALF)                                             \
	FP8_KERNEL_F(NAME, BN, STAGES, GATED, MC, PERSIST, ATTR, HALF, false)
#define FP8_TILE(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, false, false, false, , false)
// FP8_GATED is the SwiGLU-fused twin of FP8_TILE (R and yF32 unused; N = 2F, Y [M, F]).
#define FP8_GATED(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, true, false, false, , false)
FP8_TILE(gemm_fp8_wgmma_128x24, 24, 10)
FP8_TILE(gemm_fp8_wgmma_128x32, 32, 10)
FP8_TILE(gemm_fp8_wgmma_128x40, 40, 10)
FP8_TILE(gemm_fp8_wgmma_128x48, 48, 10)
FP8_TILE(gemm_fp8_wgmma_128x64, 64, 8)
FP8_TILE(gemm_fp8_wgmma_128x80, 80, 8)
FP8_TILE(gemm_fp8_wgmma_128x96, 96, 8)
FP8_TILE(gemm_fp8_wgmma_128x128, 128, 6)
FP8_TILE(gemm_fp8_wgmma_128x144, 144, 6)
FP8_GATED(gemm_fp8_wgmma_g128x32, 32, 10)
FP8_GATED(gemm_fp8_wgmma_g128x48, 48, 10)
FP8_GATED(gemm_fp8_wgmma_g128x64, 64, 8)
FP8_GATED(gemm_fp8_wgmma_g128x80, 80, 8)
FP8_GATED(gemm_fp8_wgmma_g128x96, 96, 8)
FP8_GATED(gemm_fp8_wgmma_g128x128, 128, 6)
FP8_GATED(gemm_fp8_wgmma_g128x144, 144, 6)
// FP8_MC and FP8_MC_GATED are FP8_TILE and FP8_GATED in clusters of two blocks along x (gridDim.x even: row tiles
// 2p and 2p + 1 of the same columns), each W tile read once from L2 for both (the W tensor map's box is BN/2 rows).
// The same products in the same order: the bits of the single-block kernels.
#define FP8_MC(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, false, true, false, __cluster_dims__(2, 1, 1), false)
#define FP8_MC_GATED(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, true, true, false, __cluster_dims__(2, 1, 1), false)
FP8_MC(gemm_fp8_wgmma_m128x32, 32, 10)
FP8_MC(gemm_fp8_wgmma_m128x48, 48, 10)
FP8_MC(gemm_fp8_wgmma_m128x64, 64, 8)
FP8_MC(gemm_fp8_wgmma_m128x80, 80, 8)
FP8_MC(gemm_fp8_wgmma_m128x96, 96, 8)
FP8_MC(gemm_fp8_wgmma_m128x128, 128, 6)
FP8_MC(gemm_fp8_wgmma_m128x144, 144, 6)
FP8_MC_GATED(gemm_fp8_wgmma_mg128x32, 32, 10)
FP8_MC_GATED(gemm_fp8_wgmma_mg128x48, 48, 10)
FP8_MC_GATED(gemm_fp8_wgmma_mg128x64, 64, 8)
FP8_MC_GATED(gemm_fp8_wgmma_mg128x80, 80, 8)
FP8_MC_GATED(gemm_fp8_wgmma_mg128x96, 96, 8)
FP8_MC_GATED(gemm_fp8_wgmma_mg128x128, 128, 6)
FP8_MC_GATED(gemm_fp8_wgmma_mg128x144, 144, 6)
// FP8_PERSIST and FP8_PERSIST_GATED are FP8_TILE and FP8_GATED as persistent kernels (PERSIST: gridDim.x ≤ the
// tiles, gridDim.y = 1), for products of more tiles than multiprocessors. The same bits.
#define FP8_PERSIST(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, false, false, true, , false)
#define FP8_PERSIST_GATED(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, true, false, true, , false)
FP8_PERSIST(gemm_fp8_wgmma_p128x96, 96, 8)
FP8_PERSIST(gemm_fp8_wgmma_p128x128, 128, 6)
FP8_PERSIST(gemm_fp8_wgmma_p128x144, 144, 6)
FP8_PERSIST_GATED(gemm_fp8_wgmma_pg128x96, 96, 8)
FP8_PERSIST_GATED(gemm_fp8_wgmma_pg128x128, 128, 6)
FP8_PERSIST_GATED(gemm_fp8_wgmma_pg128x144, 144, 6)
// FP8_PERSIST_MC and FP8_PERSIST_MC_GATED are FP8_MC and FP8_MC_GATED as persistent kernels: clusters of two blocks
// (gridDim.x even, at most the clusters that fit at once, gridDim.y = 1), each cluster taking pair after pair of row
// tiles. The same bits.
#define FP8_PERSIST_MC(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, false, true, true, __cluster_dims__(2, 1, 1), false)
#define FP8_PERSIST_MC_GATED(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, true, true, true, __cluster_dims__(2, 1, 1), false)
FP8_PERSIST_MC(gemm_fp8_wgmma_pm128x96, 96, 8)
FP8_PERSIST_MC(gemm_fp8_wgmma_pm128x128, 128, 6)
FP8_PERSIST_MC(gemm_fp8_wgmma_pm128x144, 144, 6)
FP8_PERSIST_MC_GATED(gemm_fp8_wgmma_pmg128x96, 96, 8)
FP8_PERSIST_MC_GATED(gemm_fp8_wgmma_pmg128x128, 128, 6)
FP8_PERSIST_MC_GATED(gemm_fp8_wgmma_pmg128x144, 144, 6)
// FP8_HALF and FP8_HALF_GATED are FP8_TILE and FP8_GATED for products of at most 64 rows, each tile's columns split
// between the two consumers (HALF). The same bits.
#define FP8_HALF(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, false, false, false, , true)
#define FP8_HALF_GATED(NAME, BN, STAGES) FP8_KERNEL(NAME, BN, STAGES, true, false, false, , true)
FP8_HALF(gemm_fp8_wgmma_h128x32, 32, 10)
FP8_HALF(gemm_fp8_wgmma_h128x48, 48, 10)
FP8_HALF(gemm_fp8_wgmma_h128x64, 64, 8)
FP8_HALF(gemm_fp8_wgmma_h128x80, 80, 8)
FP8_HALF(gemm_fp8_wgmma_h128x96, 96, 8)
FP8_HALF(gemm_fp8_wgmma_h128x128, 128, 6)
FP8_HALF(gemm_fp8_wgmma_h128x144, 144, 6)
FP8_HALF_GATED(gemm_fp8_wgmma_hg128x32, 32, 10)
FP8_HALF_GATED(gemm_fp8_wgmma_hg128x64, 64, 8)
FP8_HALF_GATED(gemm_fp8_wgmma_hg128x96, 96, 8)
FP8_HALF_GATED(gemm_fp8_wgmma_hg128x128, 128, 6)
// FP8_FAST and FP8_FAST_GATED are wide FP8_TILE and FP8_GATED tiles without fp32 promotion (FAST: the tensor cores
// sum all of K, as KEV_CUDA_FP8_PROMOTE=all has every kernel do; the same bits), whose registers then hold 192 or
// 256 columns; FP8_FAST_PERSIST and FP8_FAST_PERSIST_GATED their persistent twins.
#define FP8_FAST(NAME, BN, STAGES) FP8_KERNEL_F(NAME, BN, STAGES, false, false, false, , false, true)
#define FP8_FAST_GATED(NAME, BN, STAGES) FP8_KERNEL_F(NAME, BN, STAGES, true, false, false, , false, true)
#define FP8_FAST_PERSIST(NAME, BN, STAGES) FP8_KERNEL_F(NAME, BN, STAGES, false, false, true, , false, true)
#define FP8_FAST_PERSIST_GATED(NAME, BN, STAGES) FP8_KERNEL_F(NAME, BN, STAGES, true, false, true, , false, true)
FP8_FAST(gemm_fp8_wgmma_f128x192, 192, 5)
FP8_FAST(gemm_fp8_wgmma_f128x256, 256, 4)
FP8_FAST_GATED(gemm_fp8_wgmma_fg128x192, 192, 5)
FP8_FAST_GATED(gemm_fp8_wgmma_fg128x256, 256, 4)
FP8_FAST_PERSIST(gemm_fp8_wgmma_pf128x192, 192, 5)
FP8_FAST_PERSIST(gemm_fp8_wgmma_pf128x256, 256, 4)
FP8_FAST_PERSIST_GATED(gemm_fp8_wgmma_pfg128x192, 192, 5)
FP8_FAST_PERSIST_GATED(gemm_fp8_wgmma_pfg128x256, 256, 4)
// FP8_XC and FP8_XC_GATED are FP8_TILE and FP8_GATED in clusters of two blocks along x on column tiles 2q and 2q + 1
// of the same rows, sharing each X tile (XC; gridDim.x even, the column tiles; gridDim.y the row tiles). The same
// bits.
#define FP8_XC(NAME, BN, STAGES) FP8_KERNEL_X(NAME, BN, STAGES, false, false, false, __cluster_dims__(2, 1, 1), false, false, true)
#define FP8_XC_GATED(NAME, BN, STAGES) FP8_KERNEL_X(NAME, BN, STAGES, true, false, false, __cluster_dims__(2, 1, 1), false, false, true)
FP8_XC(gemm_fp8_wgmma_x128x24, 24, 10)
FP8_XC(gemm_fp8_wgmma_x128x32, 32, 10)
FP8_XC(gemm_fp8_wgmma_x128x40, 40, 10)
FP8_XC(gemm_fp8_wgmma_x128x48, 48, 10)
FP8_XC(gemm_fp8_wgmma_x128x64, 64, 8)
FP8_XC(gemm_fp8_wgmma_x128x80, 80, 8)
FP8_XC(gemm_fp8_wgmma_x128x96, 96, 8)
FP8_XC(gemm_fp8_wgmma_x128x128, 128, 6)
FP8_XC(gemm_fp8_wgmma_x128x144, 144, 6)
FP8_XC_GATED(gemm_fp8_wgmma_xg128x32, 32, 10)
FP8_XC_GATED(gemm_fp8_wgmma_xg128x48, 48, 10)
FP8_XC_GATED(gemm_fp8_wgmma_xg128x64, 64, 8)
FP8_XC_GATED(gemm_fp8_wgmma_xg128x80, 80, 8)
FP8_XC_GATED(gemm_fp8_wgmma_xg128x96, 96, 8)
FP8_XC_GATED(gemm_fp8_wgmma_xg128x128, 128, 6)
FP8_XC_GATED(gemm_fp8_wgmma_xg128x144, 144, 6)
