// Definitions shared by the chunked delta-rule kernels (gdn.cu: mma.sync, gdn_sm90a.cu: wgmma rows): the chunk
// and workspace layout of gdn_prep, and the asynchronous copies into shared memory.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

#define GC 64          // tokens per chunk
#define GDK 128        // key dimension
#define GBV 32         // value columns per state block
#define KP (GDK + 8)   // padded smem row of q/k (bf16): 272 bytes, ldmatrix rows on distinct banks
#define TP (GC + 8)    // padded row of T, M (bf16): 144 bytes
#define AP (GC + 4)    // fp32 rows of A and T in gdn_prep (16-byte aligned for the 4-column strips)
#define YP 20          // fp32 rows of the three 16×16 level blocks
#define GDN_WORK 17664 // workspace bytes per (chunk, value head): T, M bf16 [64][64], factors fp32 [5][64]

__device__ __forceinline__ uint32_t sptr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// GdnItem: what gdn_state runs as one step — a chunk of a segment or a row: first row, length, workspace chunk.
struct GdnItem {
	int t0, len, ck;
};

__device__ __forceinline__ void ldsm4(uint32_t r[4], const void *p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(sptr(p)));
}

__device__ __forceinline__ void ldsm4t(uint32_t r[4], const void *p) {
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(sptr(p)));
}

// mma16816: c += a·b, a 16×16 (row), b 16×8 (col), bf16, fp32 accumulators.
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// cp16 copies 16 bytes from global to shared memory asynchronously, or writes 16 zero bytes when !valid.
__device__ __forceinline__ void cp16(void *dst, const void *src, bool valid) {
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sptr(dst)), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ uint32_t pack2(float x, float y) {
	__nv_bfloat162 h = __floats2bfloat162_rn(x, y);
	return *(uint32_t *)&h;
}

// split2 splits (x, y) into bf16 pairs hi = (x, y) rounded and lo = (x, y) − hi: a state's two parts for bf16
// products, together ~16 significant bits.
__device__ __forceinline__ void split2(float x, float y, uint32_t &hi, uint32_t &lo) {
	const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
	const float2 f = __bfloat1622float2(h);
	hi = *(const uint32_t *)&h;
	lo = pack2(x - f.x, y - f.y);
}
