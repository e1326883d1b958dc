// Tiled causal grouped-query attention on tensor cores (flash_attn_dN, head dimension N ∈ {64, 128, 256}, bf16 q,
// k, v and prefix): mma.sync m16n8k16 with bf16 operands and fp32 accumulation for S = Q·Kᵀ and O = P·V, an fp32
// online softmax in base 2, and the probabilities rounded to bf16 for P·V (as flash attention does).
//
// A block of 4 warps takes 64 consecutive query rows of one query head (16 rows per warp), or 64/G rows of G heads
// of one group (flash_attn_segs_dN_gG); the key tiles (32 keys) are the P prefix rows, then the new rows from the
// segment start of the block's first row up to its last row, double-buffered through cp.async. Row t sees every
// prefix key and the new keys segStart[t] … t. Query heads of a group read the same K/V tiles, which stay in L2.
//
// Split over keys (blockIdx.z of splits): each split takes a contiguous range of the block's key tiles and, when
// splits > 1, writes its normalised partial output (fp32 [splits, N, H, D]) and (m, l) (fp32 [splits, N, H, 2]);
// attn_combine merges them. Shared memory: (64 + 4·32)·(D + 8)·2 bytes (rows padded by 16 bytes: no bank conflicts).
#include "common.cuh"

// SegDesc describes one segment of a batched call (the layout of segDesc in batched.go): rows start … start+len−1;
// attention: p prefix rows at a (keys, storage type dt) and b (values, type dtb); convolution: history row r is row
// p + r of a (type dt) when r ≥ first, zero otherwise (a null: all zero); delta rule: initial state a (type dt,
// null: zero) and final state b (fp32, null: not stored).
struct __align__(8) SegDesc {
	int32_t start, len, p, dt, first, dtb;
	const void *a;
	void *b;
};

#define FA_BQ 64
#define FA_BK 32

__device__ __forceinline__ void cp_async16(void *dst, const void *src) {
	const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(s));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t *r, const void *p) {
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(s));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
	__nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
	return *(uint32_t *)&v;
}

// flash_attn runs one block: query rows tq0 … min(tq0 + 64/GQ − 1, rowEnd − 1) of GQ query heads h0 … h0 + GQ − 1
// of one group (they read the same K/V tiles; GQ divides H / KV), which see the P rows of kp/vp and their own new
// keys from s0 on. Warp w takes 16 rows, (w / GQ)·16 onwards, of head h0 + w % GQ; a row's products, masks and sums
// are the same whatever GQ, so only the block's key tiles (up to its last row) and their splits depend on it.
// segStart (per row, may be null: s0 for every row) masks the new keys of each row.
template <int D, int GQ>
__device__ __forceinline__ void flash_attn(void *o, int odt, float *opart, float *ml, const __nv_bfloat16 *q,
                                           const __nv_bfloat16 *k, const __nv_bfloat16 *v, const __nv_bfloat16 *kp,
                                           const __nv_bfloat16 *vp, const int32_t *segStart, int tq0, int rowEnd,
                                           int s0, int N, int P, int H, int KV, float scale2, int splits, int h0) {
	static_assert(GQ == 1 || GQ == 2 || GQ == 4, "1, 2 or 4 heads a block");
	constexpr int BQ = FA_BQ / GQ; // query rows of the block
	constexpr int STR = D + 8; // shared row stride in elements
	constexpr int NT = D / 8;  // 8-wide output tiles per row
	extern __shared__ __align__(16) unsigned char fsm[];
	__nv_bfloat16 *Qs = (__nv_bfloat16 *)fsm;  // [BQ][STR]
	__nv_bfloat16 *Ks = Qs + FA_BQ * STR;      // [2][BK][STR]
	__nv_bfloat16 *Vs = Ks + 2 * FA_BK * STR;  // [2][BK][STR]
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
	const int h = h0 + warp % GQ, z = blockIdx.z; // this warp's head
	const int kh = h0 / (H / KV);
	const int tmax = min(tq0 + BQ - 1, rowEnd - 1);
	const int nPre = (P + FA_BK - 1) / FA_BK;
	const int nt = nPre + (tmax - s0) / FA_BK + 1;
	const int per = (nt + splits - 1) / splits;
	const int ta = min(nt, z * per), tb = min(nt, ta + per);
	const size_t qw = (size_t)H * D, kvw = (size_t)KV * D;

	for (int c = tid; c < FA_BQ * D / 8; c += 128) {
		const int r = c / (D / 8), cc = (c % (D / 8)) * 8;
		const int w = r / 16, t = tq0 + (w / GQ) * 16 + r % 16; // Qs row r: warp w's row t of head h0 + w % GQ
		uint4 val = make_uint4(0, 0, 0, 0);
		if (t < rowEnd) val = *(const uint4 *)(q + (size_t)t * qw + (size_t)(h0 + w % GQ) * D + cc);
		*(uint4 *)(Qs + r * STR + cc) = val;
	}
	auto load = [&](int i, int buf) {
		const __nv_bfloat16 *kb = k, *vb = v;
		int base = s0 + (i - nPre) * FA_BK, lim = tmax + 1;
		if (i < nPre) kb = kp, vb = vp, base = i * FA_BK, lim = P;
		for (int c = tid; c < FA_BK * D / 8; c += 128) {
			const int r = c / (D / 8), cc = (c % (D / 8)) * 8;
			const int j = base + r;
			__nv_bfloat16 *kd = Ks + (buf * FA_BK + r) * STR + cc, *vd = Vs + (buf * FA_BK + r) * STR + cc;
			if (j < lim) {
				cp_async16(kd, kb + (size_t)j * kvw + (size_t)kh * D + cc);
				cp_async16(vd, vb + (size_t)j * kvw + (size_t)kh * D + cc);
			} else {
				*(uint4 *)kd = make_uint4(0, 0, 0, 0);
				*(uint4 *)vd = make_uint4(0, 0, 0, 0);
			}
		}
		cp_async_commit();
	};

	// This thread's two rows: warp·16 + g and + 8.
	const int t0 = tq0 + (warp / GQ) * 16 + g, t1 = t0 + 8;
	const int ss0 = t0 < rowEnd ? (segStart ? segStart[t0] : s0) : 0x7fffffff;
	const int ss1 = t1 < rowEnd ? (segStart ? segStart[t1] : s0) : 0x7fffffff;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
	float acc[NT][4];
#pragma unroll
	for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

	if (ta < tb) load(ta, 0);
	for (int i = ta; i < tb; i++) {
		const int buf = (i - ta) & 1;
		if (i + 1 < tb) {
			load(i + 1, buf ^ 1);
			cp_async_wait<1>();
		} else {
			cp_async_wait<0>();
		}
		__syncthreads();
		const __nv_bfloat16 *Kt = Ks + buf * FA_BK * STR, *Vt = Vs + buf * FA_BK * STR;
		float s[4][4];
#pragma unroll
		for (int n = 0; n < 4; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
		// Fragments by ldmatrix (the same elements in the same registers as 32-bit loads would give): Q's 16×16 tile
		// at lane row lane & 15, column half lane >> 4; K's [key][dim] rows as B, matrices (keys n0 + 0…7 | 8…15) ×
		// (dims +0 | +8), so one x4 serves two 8-key tiles.
		const __nv_bfloat16 *qa = Qs + (warp * 16 + (lane & 15)) * STR + (lane >> 4) * 8;
		const __nv_bfloat16 *ka = Kt + ((lane & 7) + (lane >> 4) * 8) * STR + ((lane >> 3) & 1) * 8;
#pragma unroll
		for (int kk = 0; kk < D / 16; kk++) {
			uint32_t a[4], b01[4], b23[4];
			ldsm_x4(a, qa + kk * 16);
			ldsm_x4(b01, ka + kk * 16);
			ldsm_x4(b23, ka + 16 * STR + kk * 16);
			mma16816(s[0], a, b01[0], b01[1]);
			mma16816(s[1], a, b01[2], b01[3]);
			mma16816(s[2], a, b23[0], b23[1]);
			mma16816(s[3], a, b23[2], b23[3]);
		}
		const bool pre = i < nPre;
		const int base = pre ? i * FA_BK : s0 + (i - nPre) * FA_BK;
		float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
		for (int n = 0; n < 4; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int j = base + n * 8 + 2 * tig + (e & 1);
				const bool ok = pre ? j < P : (e < 2 ? (j >= ss0 && j <= t0) : (j >= ss1 && j <= t1));
				s[n][e] = ok ? s[n][e] * scale2 : -INFINITY;
				if (e < 2)
					mx0 = fmaxf(mx0, s[n][e]);
				else
					mx1 = fmaxf(mx1, s[n][e]);
			}
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		// Rows with nothing visible yet keep m = −inf: their probabilities are 0 and nothing is rescaled.
		const float c0 = mn0 == -INFINITY ? 1.f : exp2f(m0 - mn0), c1 = mn1 == -INFINITY ? 1.f : exp2f(m1 - mn1);
		const float b0 = mn0 == -INFINITY ? 0.f : mn0, b1 = mn1 == -INFINITY ? 0.f : mn1;
		float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
		for (int n = 0; n < 4; n++) {
			s[n][0] = exp2f(s[n][0] - b0);
			s[n][1] = exp2f(s[n][1] - b0);
			s[n][2] = exp2f(s[n][2] - b1);
			s[n][3] = exp2f(s[n][3] - b1);
			ps0 += s[n][0] + s[n][1];
			ps1 += s[n][2] + s[n][3];
		}
		l0 = l0 * c0 + ps0;
		l1 = l1 * c1 + ps1;
		m0 = mn0;
		m1 = mn1;
#pragma unroll
		for (int n = 0; n < NT; n++) {
			acc[n][0] *= c0;
			acc[n][1] *= c0;
			acc[n][2] *= c1;
			acc[n][3] *= c1;
		}
#pragma unroll
		for (int kk = 0; kk < 2; kk++) {
			uint32_t a[4];
			a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
			a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
			a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
			a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
			const __nv_bfloat16 *vrow = Vt + (kk * 16 + (lane & 15)) * STR + (lane >> 4) * 8;
#pragma unroll
			for (int dn = 0; dn < D / 16; dn++) {
				uint32_t b[4];
				ldsm_x4_trans(b, vrow + dn * 16);
				mma16816(acc[2 * dn], a, b[0], b[1]);
				mma16816(acc[2 * dn + 1], a, b[2], b[3]);
			}
		}
		__syncthreads(); // every warp is done with buf before the next iteration loads into it
	}
	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
	const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
	if (splits == 1) {
#pragma unroll
		for (int n = 0; n < NT; n++) {
			const int c = n * 8 + 2 * tig;
			if (t0 < rowEnd) {
				const size_t r = (size_t)t0 * qw + (size_t)h * D + c;
				st(o, odt, r, acc[n][0] * i0);
				st(o, odt, r + 1, acc[n][1] * i0);
			}
			if (t1 < rowEnd) {
				const size_t r = (size_t)t1 * qw + (size_t)h * D + c;
				st(o, odt, r, acc[n][2] * i1);
				st(o, odt, r + 1, acc[n][3] * i1);
			}
		}
		return;
	}
	const size_t zoff = (size_t)z * N * qw;
#pragma unroll
	for (int n = 0; n < NT; n++) {
		const int c = n * 8 + 2 * tig;
		if (t0 < rowEnd) *(float2 *)(opart + zoff + (size_t)t0 * qw + (size_t)h * D + c) = make_float2(acc[n][0] * i0, acc[n][1] * i0);
		if (t1 < rowEnd) *(float2 *)(opart + zoff + (size_t)t1 * qw + (size_t)h * D + c) = make_float2(acc[n][2] * i1, acc[n][3] * i1);
	}
	if (tig == 0) {
		const size_t mz = (size_t)z * N * H;
		if (t0 < rowEnd) *(float2 *)(ml + 2 * (mz + (size_t)t0 * H + h)) = make_float2(m0, l0);
		if (t1 < rowEnd) *(float2 *)(ml + 2 * (mz + (size_t)t1 * H + h)) = make_float2(m1, l1);
	}
}

#define FLASH(NAME, D)                                                                                               \
	extern "C" __global__ void __launch_bounds__(128) NAME(                                                      \
	    void *o, int odt, float *opart, float *ml, const __nv_bfloat16 *q, const __nv_bfloat16 *k,                   \
	    const __nv_bfloat16 *v, const __nv_bfloat16 *kp, const __nv_bfloat16 *vp, const int32_t *segStart, int N,   \
	    int P, int H, int KV, float scale2, int splits) {                                                            \
		KEV_GRID_DEP();                                                                                           \
		const int tq0 = blockIdx.x * FA_BQ;                                                                   \
		flash_attn<D, 1>(o, odt, opart, ml, q, k, v, kp, vp, segStart, tq0, N, segStart[tq0], N, P, H, KV,       \
		                 scale2, splits, blockIdx.y);                                                            \
	}
FLASH(flash_attn_d64, 64)
FLASH(flash_attn_d128, 128)
FLASH(flash_attn_d256, 256)

// Segments with their own prefixes (flash_attn_segs_dN, and flash_attn_segs_dN_gG with G query heads a block, 64/G
// rows: G = 4 reads each K/V tile once for 16 rows of the four heads of a group instead of for 64 rows of one head,
// which short segments — question rows of ~40 tokens — do not fill): desc[s] describes segment s (see SegDesc),
// blocks[b] = (segment, 64/G-row tile, key splits of this block, unused) for blockIdx.x = b, heads G·blockIdx.y
// onwards; each block's rows lie in one segment, so they share its prefix (desc.a, desc.b: bf16 [desc.p, KV·D],
// null when desc.p = 0) and its first row. Each block has its own split count (the host chooses it from the
// segment's prefix length alone, so a row's reduction order does not depend on the other segments of the call);
// gridDim.z is the largest, and splits z ≥ the block's count do nothing. A block of one split writes o; the rows of
// the others are merged by attn_combine_rows. When desc is null, the descriptors come from ps (a call of at most
// FA_PSEGS segments uploads none).
#define FA_PSEGS 16
struct FlashSegs {
	SegDesc d[FA_PSEGS];
};
__device__ __forceinline__ SegDesc seg_desc(const SegDesc *desc, const FlashSegs &ps, int i) {
	return desc != nullptr ? desc[i] : ps.d[i]; // ps is __grid_constant__: read in place, not copied per thread
}
#define FLASH_SEGS(NAME, D, GQ)                                                                                      \
	extern "C" __global__ void __launch_bounds__(128) NAME(                                                      \
	    void *o, int odt, float *opart, float *ml, const __nv_bfloat16 *q, const __nv_bfloat16 *k,                   \
	    const __nv_bfloat16 *v, const SegDesc *desc, const int4 *blocks, int N, int H, int KV, float scale2,         \
	    const __grid_constant__ FlashSegs ps) {                                                                      \
		KEV_GRID_DEP();                                                                                           \
		const int4 bl = blocks[blockIdx.x];                                                                   \
		if ((int)blockIdx.z >= bl.z) return;                                                                   \
		const SegDesc sd = seg_desc(desc, ps, bl.x);                                                           \
		flash_attn<D, GQ>(o, odt, opart, ml, q, k, v, (const __nv_bfloat16 *)sd.a, (const __nv_bfloat16 *)sd.b, \
		                  nullptr, sd.start + bl.y * (FA_BQ / GQ), sd.start + sd.len, sd.start, N, sd.p, H, KV,   \
		                  scale2, bl.z, GQ * blockIdx.y);                                                        \
	}
FLASH_SEGS(flash_attn_segs_d64, 64, 1)
FLASH_SEGS(flash_attn_segs_d128, 128, 1)
FLASH_SEGS(flash_attn_segs_d256, 256, 1)
FLASH_SEGS(flash_attn_segs_d64_g2, 64, 2)
FLASH_SEGS(flash_attn_segs_d128_g2, 128, 2)
FLASH_SEGS(flash_attn_segs_d256_g2, 256, 2)
FLASH_SEGS(flash_attn_segs_d64_g4, 64, 4)
FLASH_SEGS(flash_attn_segs_d128_g4, 128, 4)
FLASH_SEGS(flash_attn_segs_d256_g4, 256, 4)

// combine merges the splits' partial outputs of row t, head h: with M = max m_s and w_s = l_s·2^(m_s − M),
// o = Σ w_s·O_s / Σ w_s, summed in split order. opart [*, N, H, D], ml [*, N, H, 2].
__device__ __forceinline__ void combine(void *o, int odt, const float *opart, const float *ml, int t, int h, int N,
                                        int H, int D, int splits) {
	float M = -INFINITY;
	for (int z = 0; z < splits; z++) M = fmaxf(M, ml[2 * (((size_t)z * N + t) * H + h)]);
	float wsum = 0.f;
	for (int z = 0; z < splits; z++) {
		const float *p = ml + 2 * (((size_t)z * N + t) * H + h);
		if (p[1] > 0.f) wsum += p[1] * exp2f(p[0] - M);
	}
	const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
	const size_t qw = (size_t)H * D;
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float acc = 0.f;
		for (int z = 0; z < splits; z++) {
			const float *p = ml + 2 * (((size_t)z * N + t) * H + h);
			if (p[1] > 0.f) acc += p[1] * exp2f(p[0] - M) * opart[(size_t)z * N * qw + (size_t)t * qw + (size_t)h * D + d];
		}
		st(o, odt, (size_t)t * qw + (size_t)h * D + d, acc * inv);
	}
}

// attn_combine merges every row's splits. One block of 64 threads per (row, head).
extern "C" __global__ void attn_combine(void *o, int odt, const float *opart, const float *ml, int N, int H, int D,
                                        int splits) {
	KEV_GRID_DEP();
	combine(o, odt, opart, ml, blockIdx.x, blockIdx.y, N, H, D, splits);
}

// attn_combine_rows merges the splits of the listed rows: rows[i] = (row, its split count ≤ 32), i < nrows. One
// warp per (listed row, head), eight a block, its lanes over d: lane z < splits loads split z's (m, l) and its weight
// 2^(m − M), so a merge takes two round trips to memory (the (m, l) pairs, then the partial outputs of every split
// at once) instead of one per split; the sums are combine's, in the same order and with the same roundings (fused
// multiply-adds where the compiler contracts combine's), so the bits are attn_combine's.
extern "C" __global__ void __launch_bounds__(256) attn_combine_rows(void *o, int odt, const float *opart,
                                                                    const float *ml, const int2 *rows, int nrows,
                                                                    int N, int H, int D) {
	KEV_GRID_DEP();
	const int lane = threadIdx.x & 31, p = blockIdx.x * 8 + (threadIdx.x >> 5);
	if (p >= nrows * H) return;
	const int2 r = rows[p / H];
	const int t = r.x, h = p % H, splits = r.y;
	float m = -INFINITY, l = 0.f;
	if (lane < splits) {
		const float2 v = *(const float2 *)(ml + 2 * (((size_t)lane * N + t) * H + h));
		m = v.x, l = v.y;
	}
	float M = m;
#pragma unroll
	for (int s = 16; s > 0; s >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, s));
	const float e = lane < splits ? exp2f(m - M) : 0.f;
	const float w = __fmul_rn(l, e); // combine's p[1]·2^(p[0] − M), rounded before it multiplies the partial
	float wsum = 0.f;
	for (int z = 0; z < splits; z++) {
		const float lz = __shfl_sync(0xffffffffu, l, z), ez = __shfl_sync(0xffffffffu, e, z);
		if (lz > 0.f) wsum = __fmaf_rn(lz, ez, wsum);
	}
	const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
	const size_t qw = (size_t)H * D;
	const float *op = opart + (size_t)t * qw + (size_t)h * D + lane;
	float acc[8];
#pragma unroll
	for (int i = 0; i < 8; i++) acc[i] = 0.f;
#pragma unroll 4
	for (int z = 0; z < splits; z++) {
		const float lz = __shfl_sync(0xffffffffu, l, z), wz = __shfl_sync(0xffffffffu, w, z);
		if (!(lz > 0.f)) continue;
		float v[8];
#pragma unroll
		for (int i = 0; i < 8; i++) v[i] = lane + 32 * i < D ? op[(size_t)z * N * qw + 32 * i] : 0.f;
#pragma unroll
		for (int i = 0; i < 8; i++) acc[i] = __fmaf_rn(wz, v[i], acc[i]);
	}
#pragma unroll
	for (int i = 0; i < 8; i++)
		if (lane + 32 * i < D) st(o, odt, (size_t)t * qw + (size_t)h * D + lane + 32 * i, acc[i] * inv);
}
