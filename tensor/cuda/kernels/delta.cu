// The gated delta rule in its recurrent form, fp32 state. Column j of a head's state S [d_k, d_v] evolves on its
// own given the token's k̂, q̂, β and decay, so a block (one warp) owns 32 columns of one value head of one segment
// and keeps them in shared memory, with thread j holding column j's updates.
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

// Per token t of the segment (rows segStart[z] … segStart[z]+segLen[z]−1), value head h (key head h/(hv/hk)):
//   q̂ = q/sqrt(Σq² + 1e-6)/sqrt(dk), k̂ = k/sqrt(Σk² + 1e-6), a = exp(g[t, h])
//   r_j = a·Σ_i S[i, j] k̂_i,  δ_j = β[t, h](v_j − r_j),  S[i, j] ← a·S[i, j] + k̂_i δ_j,  o_j = Σ_i S[i, j] q̂_i.
// qkv [N, 2·hk·dk + hv·dv] = [Q | K | V]; g, beta [N, hv]; s0 [hv, dk, dv] (null: zero); o [N, hv·dv];
// final [hv, dk, dv] fp32 (null: not stored). Grid (ceil(dv/32), hv, segments), 32 threads, shared
// (32·dk + 2·dk)·4 bytes.
__device__ __forceinline__ void delta_rec(void *o, int odt, float *final, const void *qkv, int xdt, const void *g,
                                          int gdt, const void *beta, int bdt, const void *s0, int sdt, int t0,
                                          int len, int hk, int hv, int dk, int dv) {
	extern __shared__ float sm[];
	float *S = sm;             // [dk][32]
	float *qs = sm + 32 * dk;  // [dk]
	float *ks = qs + dk;       // [dk]
	const int lane = threadIdx.x;
	const int col = blockIdx.x * 32 + lane;
	const int h = blockIdx.y;
	const int kh = h / (hv / hk);
	const bool on = col < dv;
	const size_t width = 2 * (size_t)hk * dk + (size_t)hv * dv;
	for (int i = 0; i < dk; i++) S[i * 32 + lane] = (s0 && on) ? ld(s0, sdt, ((size_t)h * dk + i) * dv + col) : 0.f;
	const float qscale = rsqrtf((float)dk);
	const int t1 = t0 + len;
	for (int t = t0; t < t1; t++) {
		const size_t row = (size_t)t * width;
		float sq = 0.f, sk = 0.f;
		for (int i = lane; i < dk; i += 32) {
			float a = ld(qkv, xdt, row + (size_t)kh * dk + i);
			float b = ld(qkv, xdt, row + (size_t)hk * dk + (size_t)kh * dk + i);
			qs[i] = a;
			ks[i] = b;
			sq += a * a;
			sk += b * b;
		}
		sq = wsum(sq);
		sk = wsum(sk);
		__syncwarp();
		const float rq = qscale / sqrtf(sq + 1e-6f), rk = 1.f / sqrtf(sk + 1e-6f);
		const float a = expf(ld(g, gdt, (size_t)t * hv + h)), bt = ld(beta, bdt, (size_t)t * hv + h);
		if (on) {
			float r = 0.f;
			for (int i = 0; i < dk; i++) r += S[i * 32 + lane] * ks[i];
			r *= a * rk;
			const float vj = ld(qkv, xdt, row + 2 * (size_t)hk * dk + (size_t)h * dv + col);
			const float dl = bt * (vj - r) * rk; // k̂_i δ = ks[i]·rk·δ
			float acc = 0.f;
			for (int i = 0; i < dk; i++) {
				float s = fmaf(a, S[i * 32 + lane], ks[i] * dl);
				S[i * 32 + lane] = s;
				acc += s * qs[i];
			}
			st(o, odt, (size_t)t * hv * dv + (size_t)h * dv + col, acc * rq);
		}
		__syncwarp();
	}
	if (final && on)
		for (int i = 0; i < dk; i++) final[((size_t)h * dk + i) * dv + col] = S[i * 32 + lane];
}

extern "C" __global__ void delta_rule_rec(void *o, int odt, float *final, const void *qkv, int xdt, const void *g,
                                          int gdt, const void *beta, int bdt, const void *s0, int sdt,
                                          const int32_t *segStart, const int32_t *segLen, int hk, int hv, int dk,
                                          int dv) {
	delta_rec(o, odt, final, qkv, xdt, g, gdt, beta, bdt, s0, sdt, segStart[blockIdx.z], segLen[blockIdx.z], hk, hv,
	          dk, dv);
}

// delta_rule_segs_rec is delta_rule_rec with segment z = blockIdx.z described by desc[z]: initial state desc.a
// (type desc.dt, null: zero), final state desc.b (null: not stored).
extern "C" __global__ void delta_rule_segs_rec(void *o, int odt, const void *qkv, int xdt, const void *g, int gdt,
                                               const void *beta, int bdt, const SegDesc *desc, int hk, int hv,
                                               int dk, int dv) {
	const SegDesc sd = desc[blockIdx.z];
	delta_rec(o, odt, (float *)sd.b, qkv, xdt, g, gdt, beta, bdt, sd.a, sd.dt, sd.start, sd.len, hk, hv, dk, dv);
}

// The same recurrence with the state in registers (delta_rule_reg_dkN, d_k = N ∈ {32, 64, 128}). A block of 8
// warps owns 32 value columns of one value head of one segment; lane l of warp w holds column 4w + (l & 3) and
// state rows 8·RPT-blocks (l >> 2)·RPT … +RPT−1, so the two dot products of a token (Sᵀk̂ and Sᵀq̂) are register
// FMAs plus three shuffles. Tokens go in chunks of DR_TC: the block loads the chunk's q and k rows (16-byte loads
// when the input is bf16 and vec is set), normalises them once into shared memory with v, exp(g) and β, runs the
// chunk and writes the outputs coalesced. With vec, the next chunk's q/k loads are issued before the current chunk
// runs. The cached state S0 is only read (rows continuing one state never write it back); final is written when
// not null. Grid (ceil(dv/32), hv, segments), 256 threads, deltaRegShared(dk) bytes of dynamic shared memory.
#define DR_TC 64
#define DR_NW 8

template <int RPT>
__device__ __forceinline__ void delta_reg(void *o, int odt, float *final, const void *qkv, int xdt, const void *g,
                                          int gdt, const void *beta, int bdt, const void *s0, int sdt, int t0,
                                          int len, int hk, int hv, int dv, int vec) {
	constexpr int DK = 8 * RPT;
	constexpr int PER = (DR_TC * 2 * DK / 8 + 32 * DR_NW - 1) / (32 * DR_NW); // 16-byte pieces per thread
	extern __shared__ __align__(16) float smd[];
	float *qs = smd;                 // [TC][DK] q̂·dk^−½
	float *ks = qs + DR_TC * DK;     // [TC][DK] k̂
	float *vs = ks + DR_TC * DK;     // [TC][32]
	float *os = vs + DR_TC * 32;     // [TC][32]
	float *as = os + DR_TC * 32;     // [TC] exp(g)
	float *bs = as + DR_TC;          // [TC] β
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int cl = warp * 4 + (lane & 3), rg = lane >> 2;
	const int col = blockIdx.x * 32 + cl;
	const int h = blockIdx.y;
	const int kh = h / (hv / hk);
	const bool on = col < dv;
	const size_t width = 2 * (size_t)hk * DK + (size_t)hv * dv;
	const size_t ow = (size_t)hv * dv;
	float S[RPT];
#pragma unroll
	for (int r = 0; r < RPT; r++)
		S[r] = (s0 && on) ? ld(s0, sdt, ((size_t)h * DK + rg * RPT + r) * dv + col) : 0.f;
	const float qscale = rsqrtf((float)DK);
	uint4 pre[PER];
	// issue loads the raw q/k of the chunk starting at c0 into pre (vec path)
	auto fetch = [&](int c0) {
		const int nt = min(DR_TC, len - c0);
#pragma unroll
		for (int p = 0; p < PER; p++) {
			const int idx = tid + p * 32 * DR_NW; // piece: token idx / (2·DK/8), then q or k, then 8 dims
			const int tt = idx / (2 * DK / 8), rem = idx % (2 * DK / 8);
			const int which = rem / (DK / 8), d8 = (rem % (DK / 8)) * 8;
			pre[p] = make_uint4(0, 0, 0, 0);
			if (tt < nt) {
				const size_t off = (size_t)(t0 + c0 + tt) * width + (size_t)which * hk * DK + (size_t)kh * DK + d8;
				pre[p] = *(const uint4 *)((const __nv_bfloat16 *)qkv + off);
			}
		}
	};
	if (vec && len > 0) fetch(0);
	for (int c0 = 0; c0 < len; c0 += DR_TC) {
		const int nt = min(DR_TC, len - c0);
		__syncthreads(); // the previous chunk's shared memory is no longer read
		if (vec) {
#pragma unroll
			for (int p = 0; p < PER; p++) {
				const int idx = tid + p * 32 * DR_NW;
				const int tt = idx / (2 * DK / 8), rem = idx % (2 * DK / 8);
				const int which = rem / (DK / 8), d8 = (rem % (DK / 8)) * 8;
				if (tt < DR_TC) {
					float *dst = (which ? ks : qs) + tt * DK + d8;
					const __nv_bfloat162 *b2 = (const __nv_bfloat162 *)&pre[p];
#pragma unroll
					for (int e = 0; e < 4; e++) {
						float2 f = __bfloat1622float2(b2[e]);
						dst[2 * e] = f.x;
						dst[2 * e + 1] = f.y;
					}
				}
			}
		} else {
			for (int idx = tid; idx < nt * 2 * DK; idx += 32 * DR_NW) {
				const int tt = idx / (2 * DK), rem = idx % (2 * DK);
				const int which = rem / DK, i = rem % DK;
				const size_t off = (size_t)(t0 + c0 + tt) * width + (size_t)which * hk * DK + (size_t)kh * DK + i;
				(which ? ks : qs)[tt * DK + i] = ld(qkv, xdt, off);
			}
		}
		for (int idx = tid; idx < nt * 32; idx += 32 * DR_NW) {
			const int tt = idx >> 5, c = idx & 31, cg = blockIdx.x * 32 + c;
			vs[idx] = cg < dv ? ld(qkv, xdt, (size_t)(t0 + c0 + tt) * width + 2 * (size_t)hk * DK + (size_t)h * dv + cg) : 0.f;
		}
		if (tid < nt) {
			const size_t gi = (size_t)(t0 + c0 + tid) * hv + h;
			as[tid] = expf(ld(g, gdt, gi));
			bs[tid] = ld(beta, bdt, gi);
		}
		__syncthreads();
		for (int tt = warp; tt < nt; tt += DR_NW) { // normalise q and k
			float sq = 0.f, sk = 0.f;
			for (int i = lane; i < DK; i += 32) {
				float a = qs[tt * DK + i], b = ks[tt * DK + i];
				sq += a * a;
				sk += b * b;
			}
			sq = wsum(sq);
			sk = wsum(sk);
			const float rq = qscale / sqrtf(sq + 1e-6f), rk = 1.f / sqrtf(sk + 1e-6f);
			for (int i = lane; i < DK; i += 32) {
				qs[tt * DK + i] *= rq;
				ks[tt * DK + i] *= rk;
			}
		}
		__syncthreads();
		if (vec && c0 + DR_TC < len) fetch(c0 + DR_TC);
		for (int tt = 0; tt < nt; tt++) {
			const float4 *k4 = (const float4 *)(ks + tt * DK + rg * RPT);
			const float4 *q4 = (const float4 *)(qs + tt * DK + rg * RPT);
			float p0 = 0.f, p1 = 0.f;
#pragma unroll
			for (int r = 0; r < RPT / 4; r++) {
				const float4 kv = k4[r];
				p0 = fmaf(S[4 * r], kv.x, p0);
				p1 = fmaf(S[4 * r + 1], kv.y, p1);
				p0 = fmaf(S[4 * r + 2], kv.z, p0);
				p1 = fmaf(S[4 * r + 3], kv.w, p1);
			}
			float p = p0 + p1;
			p += __shfl_xor_sync(0xffffffffu, p, 4);
			p += __shfl_xor_sync(0xffffffffu, p, 8);
			p += __shfl_xor_sync(0xffffffffu, p, 16);
			const float a = as[tt];
			const float d = bs[tt] * (vs[tt * 32 + cl] - a * p);
			float o0 = 0.f, o1 = 0.f;
#pragma unroll
			for (int r = 0; r < RPT / 4; r++) {
				const float4 kv = k4[r], qv = q4[r];
				S[4 * r] = fmaf(a, S[4 * r], kv.x * d);
				S[4 * r + 1] = fmaf(a, S[4 * r + 1], kv.y * d);
				S[4 * r + 2] = fmaf(a, S[4 * r + 2], kv.z * d);
				S[4 * r + 3] = fmaf(a, S[4 * r + 3], kv.w * d);
				o0 = fmaf(S[4 * r], qv.x, o0);
				o1 = fmaf(S[4 * r + 1], qv.y, o1);
				o0 = fmaf(S[4 * r + 2], qv.z, o0);
				o1 = fmaf(S[4 * r + 3], qv.w, o1);
			}
			float ov = o0 + o1;
			ov += __shfl_xor_sync(0xffffffffu, ov, 4);
			ov += __shfl_xor_sync(0xffffffffu, ov, 8);
			ov += __shfl_xor_sync(0xffffffffu, ov, 16);
			if (rg == 0) os[tt * 32 + cl] = ov;
		}
		__syncthreads();
		for (int idx = tid; idx < nt * 32; idx += 32 * DR_NW) {
			const int tt = idx >> 5, c = idx & 31, cg = blockIdx.x * 32 + c;
			if (cg < dv) st(o, odt, (size_t)(t0 + c0 + tt) * ow + (size_t)h * dv + cg, os[idx]);
		}
	}
	if (final && on) {
#pragma unroll
		for (int r = 0; r < RPT; r++) final[((size_t)h * DK + rg * RPT + r) * dv + col] = S[r];
	}
}

#define DELTA_REG(NAME, RPT)                                                                                          \
	extern "C" __global__ void __launch_bounds__(256) NAME(                                                      \
	    void *o, int odt, float *final, const void *qkv, int xdt, const void *g, int gdt, const void *beta, int bdt, \
	    const void *s0, int sdt, const int32_t *segStart, const int32_t *segLen, int hk, int hv, int dv, int vec) {    \
		delta_reg<RPT>(o, odt, final, qkv, xdt, g, gdt, beta, bdt, s0, sdt, segStart[blockIdx.z],               \
		               segLen[blockIdx.z], hk, hv, dv, vec);                                                     \
	}
DELTA_REG(delta_rule_reg_dk32, 4)
DELTA_REG(delta_rule_reg_dk64, 8)
DELTA_REG(delta_rule_reg_dk128, 16)

// delta_rule_segs_reg_dkN: the register-state kernel with segment z = blockIdx.z described by desc[z] (initial
// state desc.a of type desc.dt, null: zero; final state desc.b, null: not stored). The states are read in place.
#define DELTA_SEGS_REG(NAME, RPT)                                                                                     \
	extern "C" __global__ void __launch_bounds__(256) NAME(void *o, int odt, const void *qkv, int xdt, const void *g, \
	                                                       int gdt, const void *beta, int bdt, const SegDesc *desc,  \
	                                                       int hk, int hv, int dv, int vec) {                        \
		const SegDesc sd = desc[blockIdx.z];                                                                   \
		delta_reg<RPT>(o, odt, (float *)sd.b, qkv, xdt, g, gdt, beta, bdt, sd.a, sd.dt, sd.start, sd.len, hk, hv,   \
		               dv, vec);                                                                                 \
	}
DELTA_SEGS_REG(delta_rule_segs_reg_dk32, 4)
DELTA_SEGS_REG(delta_rule_segs_reg_dk64, 8)
DELTA_SEGS_REG(delta_rule_segs_reg_dk128, 16)

// The chunked (WY/UT) form of the same recurrence (delta_rule_chunk_dkN, d_k = N ∈ {32, 64, 128}). A block of 8
// warps owns 32 value columns of one value head of one segment and keeps the state in registers as
// delta_rule_reg_dk* does (lane l of warp w: column 4w + (l & 3), rows (l >> 2)·RPT … +RPT−1). Tokens go in chunks
// of up to DC_TC; within a chunk of T tokens with γ_t = Π_{s≤t} a_s (cumulative log decay, exp of differences
// only, so nothing overflows):
//   A[t, s] = β_t (k̂_t·k̂_s) γ_t/γ_s (s < t),   B[t, s] = (q̂_t·k̂_s) γ_t/γ_s (s ≤ t)
//   (I + A) U = diag(β) (V − diag(γ) K̂ S)        (forward substitution, blocks of 8 rows)
//   O = diag(γ) Q̂ S + B U,   S ← γ_T S + K̂ᵀ diag(γ_T/γ_s) U   (the update only when another chunk or final follows)
// so the T-step serial chain becomes a few small dense products in fp32. Shared memory: q̂ and k̂ [TC][N+4], U and
// O [TC][32], A and B in one [TC][TC+1] array (A below the diagonal, B transposed above it), 3·TC scalars; grid
// (ceil(dv/32), hv, segments), 256 threads, deltaChunkShared(dk) bytes, 2 blocks per SM.
#define DC_TC 64
#define DC_AB (DC_TC + 1)

template <int RPT>
__device__ __forceinline__ void delta_chunk(void *o, int odt, float *final, const void *qkv, int xdt, const void *g,
                                            int gdt, const void *beta, int bdt, const void *s0, int sdt, int t0,
                                            int len, int hk, int hv, int dv, int vec) {
	constexpr int DK = 8 * RPT;
	constexpr int DP = DK + 4; // padded row: 8 consecutive rows cover all banks with 16-byte loads
	extern __shared__ __align__(16) float smc[];
	float *qs = smc;               // [TC][DP] q̂·dk^−½
	float *ks = qs + DC_TC * DP;   // [TC][DP] k̂
	float *us = ks + DC_TC * DP;   // [TC][32] v, then the right-hand side, then U
	float *os = us + DC_TC * 32;   // [TC][32] γ·Q̂S
	float *ab = os + DC_TC * 32;   // [TC][TC+1] A (t, s < t) at t·(TC+1) + s; B (t, s ≤ t) at s·(TC+1) + t + 1
	float *gc = ab + DC_TC * DC_AB; // [TC] raw g, then the cumulative log decay
	float *bs = gc + DC_TC;         // [TC] β
	float *dc = bs + DC_TC;         // [TC] γ_T/γ_s
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int cl = warp * 4 + (lane & 3), rg = lane >> 2;
	const int col = blockIdx.x * 32 + cl;
	const int h = blockIdx.y;
	const int kh = h / (hv / hk);
	const bool on = col < dv;
	const bool hi = lane & 16;
	const size_t width = 2 * (size_t)hk * DK + (size_t)hv * dv;
	const size_t ow = (size_t)hv * dv;
	float S[RPT];
#pragma unroll
	for (int r = 0; r < RPT; r++)
		S[r] = (s0 && on) ? ld(s0, sdt, ((size_t)h * DK + rg * RPT + r) * dv + col) : 0.f;
	const float qscale = rsqrtf((float)DK);
	for (int c0 = 0; c0 < len; c0 += DC_TC) {
		const int nt = min(DC_TC, len - c0);
		const size_t r0 = (size_t)(t0 + c0);
		__syncthreads(); // the previous chunk's shared memory is no longer read
		if (vec) {
			for (int idx = tid; idx < nt * 2 * DK / 8; idx += 256) {
				const int tt = idx / (2 * DK / 8), rem = idx % (2 * DK / 8);
				const int which = rem / (DK / 8), d8 = (rem % (DK / 8)) * 8;
				const uint4 raw = *(const uint4 *)((const __nv_bfloat16 *)qkv + (r0 + tt) * width +
				                                   (size_t)which * hk * DK + (size_t)kh * DK + d8);
				float *dst = (which ? ks : qs) + tt * DP + d8;
				const __nv_bfloat162 *b2 = (const __nv_bfloat162 *)&raw;
				const float2 f0 = __bfloat1622float2(b2[0]), f1 = __bfloat1622float2(b2[1]);
				const float2 f2 = __bfloat1622float2(b2[2]), f3 = __bfloat1622float2(b2[3]);
				*(float4 *)dst = make_float4(f0.x, f0.y, f1.x, f1.y);
				*(float4 *)(dst + 4) = make_float4(f2.x, f2.y, f3.x, f3.y);
			}
		} else {
			for (int idx = tid; idx < nt * 2 * DK; idx += 256) {
				const int tt = idx / (2 * DK), rem = idx % (2 * DK);
				const int which = rem / DK, i = rem % DK;
				(which ? ks : qs)[tt * DP + i] = ld(qkv, xdt, (r0 + tt) * width + (size_t)which * hk * DK + (size_t)kh * DK + i);
			}
		}
		for (int idx = tid; idx < nt * 32; idx += 256) {
			const int tt = idx >> 5, c = idx & 31, cg = blockIdx.x * 32 + c;
			us[idx] = cg < dv ? ld(qkv, xdt, (r0 + tt) * width + 2 * (size_t)hk * DK + (size_t)h * dv + cg) : 0.f;
		}
		if (tid < nt) {
			const size_t gi = (r0 + tid) * hv + h;
			gc[tid] = ld(g, gdt, gi);
			bs[tid] = ld(beta, bdt, gi);
		}
		__syncthreads();
		for (int tt = warp; tt < nt; tt += 8) { // normalise q and k
			float sq = 0.f, sk = 0.f;
			for (int i = lane; i < DK; i += 32) {
				const float a = qs[tt * DP + i], b = ks[tt * DP + i];
				sq += a * a;
				sk += b * b;
			}
			sq = wsum(sq);
			sk = wsum(sk);
			const float rq = qscale / sqrtf(sq + 1e-6f), rk = 1.f / sqrtf(sk + 1e-6f);
			for (int i = lane; i < DK; i += 32) {
				qs[tt * DP + i] *= rq;
				ks[tt * DP + i] *= rk;
			}
		}
		if (warp == 7) { // cumulative log decay: inclusive scan of two halves of 32
			float x0 = lane < nt ? gc[lane] : 0.f, x1 = lane + 32 < nt ? gc[lane + 32] : 0.f;
#pragma unroll
			for (int d = 1; d < 32; d <<= 1) {
				const float y0 = __shfl_up_sync(0xffffffffu, x0, d), y1 = __shfl_up_sync(0xffffffffu, x1, d);
				if (lane >= d) {
					x0 += y0;
					x1 += y1;
				}
			}
			x1 += __shfl_sync(0xffffffffu, x0, 31);
			const float last = nt > 32 ? __shfl_sync(0xffffffffu, x1, nt - 33) : __shfl_sync(0xffffffffu, x0, nt - 1);
			if (lane < nt) {
				gc[lane] = x0;
				dc[lane] = expf(last - x0);
			}
			if (lane + 32 < nt) {
				gc[lane + 32] = x1;
				dc[lane + 32] = expf(last - x1);
			}
		}
		__syncthreads();
		// A and B: one (t, s ≤ t) pair per thread at a time, both dot products from the same k̂_s loads
		const int np = nt * (nt + 1) / 2;
		for (int p = tid; p < np; p += 256) {
			int t = (int)((sqrtf(8.f * p + 1.f) - 1.f) * 0.5f);
			if ((t + 1) * (t + 2) / 2 <= p) t++;
			if (t * (t + 1) / 2 > p) t--;
			const int s = p - t * (t + 1) / 2;
			const float4 *q4 = (const float4 *)(qs + t * DP), *k4 = (const float4 *)(ks + t * DP);
			const float4 *s4 = (const float4 *)(ks + s * DP);
			float b0 = 0.f, b1 = 0.f, a0 = 0.f, a1 = 0.f;
#pragma unroll 8
			for (int i = 0; i < DK / 4; i++) {
				const float4 x = s4[i], qv = q4[i], kv = k4[i];
				b0 = fmaf(qv.x, x.x, b0);
				b1 = fmaf(qv.y, x.y, b1);
				b0 = fmaf(qv.z, x.z, b0);
				b1 = fmaf(qv.w, x.w, b1);
				a0 = fmaf(kv.x, x.x, a0);
				a1 = fmaf(kv.y, x.y, a1);
				a0 = fmaf(kv.z, x.z, a0);
				a1 = fmaf(kv.w, x.w, a1);
			}
			const float f = expf(gc[t] - gc[s]);
			ab[s * DC_AB + t + 1] = (b0 + b1) * f;
			if (s < t) ab[t * DC_AB + s] = bs[t] * (a0 + a1) * f;
		}
		// K̂S and Q̂S from the register state: 16 FMAs per lane, the k and q sums share three shuffles
		for (int tt = 0; tt < nt; tt++) {
			const float4 *k4 = (const float4 *)(ks + tt * DP + rg * RPT);
			const float4 *q4 = (const float4 *)(qs + tt * DP + rg * RPT);
			float pk0 = 0.f, pk1 = 0.f, pq0 = 0.f, pq1 = 0.f;
#pragma unroll
			for (int r = 0; r < RPT / 4; r++) {
				const float4 kv = k4[r], qv = q4[r];
				pk0 = fmaf(S[4 * r], kv.x, pk0);
				pk1 = fmaf(S[4 * r + 1], kv.y, pk1);
				pk0 = fmaf(S[4 * r + 2], kv.z, pk0);
				pk1 = fmaf(S[4 * r + 3], kv.w, pk1);
				pq0 = fmaf(S[4 * r], qv.x, pq0);
				pq1 = fmaf(S[4 * r + 1], qv.y, pq1);
				pq0 = fmaf(S[4 * r + 2], qv.z, pq0);
				pq1 = fmaf(S[4 * r + 3], qv.w, pq1);
			}
			const float pk = pk0 + pk1, pq = pq0 + pq1;
			float m = hi ? pq : pk;
			m += __shfl_xor_sync(0xffffffffu, hi ? pk : pq, 16);
			m += __shfl_xor_sync(0xffffffffu, m, 8);
			m += __shfl_xor_sync(0xffffffffu, m, 4);
			const float gm = expf(gc[tt]);
			if (lane < 4) us[tt * 32 + cl] = bs[tt] * (us[tt * 32 + cl] - gm * m);
			else if (lane >= 16 && lane < 20) os[tt * 32 + cl] = gm * m;
		}
		__syncthreads();
		// (I + A) U = rhs by blocks of 8 rows: all threads fold in the finished rows, warp 0 solves the 8×8 block
		for (int b0 = 0; b0 < nt; b0 += 8) {
			if (b0 > 0) {
				const int t = b0 + warp, c = lane;
				if (t < nt) {
					float x0 = us[t * 32 + c], x1 = 0.f;
					int s = 0;
					for (; s + 1 < b0; s += 2) {
						x0 = fmaf(-ab[t * DC_AB + s], us[s * 32 + c], x0);
						x1 = fmaf(-ab[t * DC_AB + s + 1], us[(s + 1) * 32 + c], x1);
					}
					us[t * 32 + c] = x0 + x1;
				}
				__syncthreads();
			}
			if (warp == 0) {
				float u[8];
#pragma unroll
				for (int j = 0; j < 8; j++) {
					const int t = b0 + j;
					if (t < nt) {
						float x = us[t * 32 + lane];
#pragma unroll
						for (int i = 0; i < j; i++) x = fmaf(-ab[t * DC_AB + b0 + i], u[i], x);
						u[j] = x;
						us[t * 32 + lane] = x;
					}
				}
			}
			__syncthreads();
		}
		// O = γ·Q̂S + B U, written coalesced
		for (int t = warp; t < nt; t += 8) {
			const int c = lane, cg = blockIdx.x * 32 + c;
			float x0 = os[t * 32 + c], x1 = 0.f;
			int s = 0;
			for (; s + 1 <= t; s += 2) {
				x0 = fmaf(ab[s * DC_AB + t + 1], us[s * 32 + c], x0);
				x1 = fmaf(ab[(s + 1) * DC_AB + t + 1], us[(s + 1) * 32 + c], x1);
			}
			if (s == t) x0 = fmaf(ab[s * DC_AB + t + 1], us[s * 32 + c], x0);
			if (cg < dv) st(o, odt, (r0 + t) * ow + (size_t)h * dv + cg, x0 + x1);
		}
		if (c0 + nt < len || final) { // S ← γ_T S + K̂ᵀ diag(γ_T/γ_s) U
			const float gT = expf(gc[nt - 1]);
#pragma unroll
			for (int r = 0; r < RPT; r++) S[r] *= gT;
			for (int s = 0; s < nt; s++) {
				const float d = dc[s] * us[s * 32 + cl];
				const float4 *k4 = (const float4 *)(ks + s * DP + rg * RPT);
#pragma unroll
				for (int r = 0; r < RPT / 4; r++) {
					const float4 kv = k4[r];
					S[4 * r] = fmaf(kv.x, d, S[4 * r]);
					S[4 * r + 1] = fmaf(kv.y, d, S[4 * r + 1]);
					S[4 * r + 2] = fmaf(kv.z, d, S[4 * r + 2]);
					S[4 * r + 3] = fmaf(kv.w, d, S[4 * r + 3]);
				}
			}
		}
	}
	if (final && on) {
#pragma unroll
		for (int r = 0; r < RPT; r++) final[((size_t)h * DK + rg * RPT + r) * dv + col] = S[r];
	}
}

#define DELTA_CHUNK(NAME, RPT)                                                                                        \
	extern "C" __global__ void __launch_bounds__(256, 2) NAME(                                                   \
	    void *o, int odt, float *final, const void *qkv, int xdt, const void *g, int gdt, const void *beta, int bdt, \
	    const void *s0, int sdt, const int32_t *segStart, const int32_t *segLen, int hk, int hv, int dv, int vec) {    \
		delta_chunk<RPT>(o, odt, final, qkv, xdt, g, gdt, beta, bdt, s0, sdt, segStart[blockIdx.z],             \
		                 segLen[blockIdx.z], hk, hv, dv, vec);                                                   \
	}
DELTA_CHUNK(delta_rule_chunk_dk32, 4)
DELTA_CHUNK(delta_rule_chunk_dk64, 8)
DELTA_CHUNK(delta_rule_chunk_dk128, 16)

// delta_rule_segs_chunk_dkN: the chunked kernel with segment z = blockIdx.z described by desc[z] (initial state
// desc.a of type desc.dt, null: zero; final state desc.b, null: not stored). The states are read in place.
#define DELTA_SEGS_CHUNK(NAME, RPT)                                                                                   \
	extern "C" __global__ void __launch_bounds__(256, 2) NAME(void *o, int odt, const void *qkv, int xdt,        \
	                                                          const void *g, int gdt, const void *beta, int bdt, \
	                                                          const SegDesc *desc, int hk, int hv, int dv, int vec) { \
		const SegDesc sd = desc[blockIdx.z];                                                                   \
		delta_chunk<RPT>(o, odt, (float *)sd.b, qkv, xdt, g, gdt, beta, bdt, sd.a, sd.dt, sd.start, sd.len, hk,   \
		                 hv, dv, vec);                                                                           \
	}
DELTA_SEGS_CHUNK(delta_rule_segs_chunk_dk32, 4)
DELTA_SEGS_CHUNK(delta_rule_segs_chunk_dk64, 8)
DELTA_SEGS_CHUNK(delta_rule_segs_chunk_dk128, 16)
