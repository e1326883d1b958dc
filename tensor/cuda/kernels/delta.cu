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
	KEV_GRID_DEP();
	delta_rec(o, odt, final, qkv, xdt, g, gdt, beta, bdt, s0, sdt, segStart[blockIdx.z], segLen[blockIdx.z], hk, hv,
	          dk, dv);
}

// delta_rule_segs_rec is delta_rule_rec with segment z = blockIdx.z described by desc[z]: initial state desc.a
// (type desc.dt, null: zero), final state desc.b (null: not stored).
extern "C" __global__ void delta_rule_segs_rec(void *o, int odt, const void *qkv, int xdt, const void *g, int gdt,
                                               const void *beta, int bdt, const SegDesc *desc, int hk, int hv,
                                               int dk, int dv) {
	KEV_GRID_DEP();
	const SegDesc sd = desc[blockIdx.z];
	delta_rec(o, odt, (float *)sd.b, qkv, xdt, g, gdt, beta, bdt, sd.a, sd.dt, sd.start, sd.len, hk, hv, dk, dv);
}

// The same recurrence with the state in registers (delta_rule_reg_dkN, d_k = N ∈ {32, 64, 128}). A block of 8
// warps owns 32 value columns of one value head of one segment; lane l of warp w holds column 4w + (l & 3) and
// the state rows 32j + 4(l >> 2) + e (j < RPT/4, e < 4), so the two dot products of a token (Sᵀk̂ and Sᵀq̂) are
// register FMAs plus three shuffles, and the eight row groups of a warp read one 128-byte line of k̂ or q̂ per
// 16-byte load (no bank conflicts; rows (l >> 2)·RPT … would put four groups on the same banks). Tokens go in chunks of DR_TC: the block loads the chunk's q and k rows (16-byte loads
// when the input is bf16 and vec is set), normalises them once into shared memory with v, exp(g) and β, runs the
// chunk and writes the outputs coalesced. With vec, the next chunk's q/k loads are issued before the current chunk
// runs. The cached state S0 is only read (rows continuing one state never write it back); final is written when
// not null. Grid (ceil(dv/32), hv, segments), 256 threads, deltaRegShared(dk) bytes of dynamic shared memory.
#define DR_TC 64
#define DR_NW 8

template <int RPT, bool ONE, bool PF>
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
	float *kq = bs + DR_TC;          // [TC] k̂·q̂ (ONE)
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
		S[r] = (s0 && on) ? ld(s0, sdt, ((size_t)h * DK + 32 * (r >> 2) + 4 * rg + (r & 3)) * dv + col) : 0.f;
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
	if (PF && vec && len > 0) fetch(0);
	for (int c0 = 0; c0 < len; c0 += DR_TC) {
		const int nt = min(DR_TC, len - c0);
		__syncthreads(); // the previous chunk's shared memory is no longer read
		if (!PF && vec) fetch(c0);
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
			float sq = 0.f, sk = 0.f, sqk = 0.f;
			for (int i = lane; i < DK; i += 32) {
				float a = qs[tt * DK + i], b = ks[tt * DK + i];
				sq += a * a;
				sk += b * b;
				sqk += a * b;
			}
			sq = wsum(sq);
			sk = wsum(sk);
			const float rq = qscale / sqrtf(sq + 1e-6f), rk = 1.f / sqrtf(sk + 1e-6f);
			if (ONE) {
				sqk = wsum(sqk);
				if (lane == 0) kq[tt] = sqk * rq * rk;
			}
			for (int i = lane; i < DK; i += 32) {
				qs[tt * DK + i] *= rq;
				ks[tt * DK + i] *= rk;
			}
		}
		__syncthreads();
		if (PF && vec && c0 + DR_TC < len) fetch(c0 + DR_TC);
		if (ONE) {
			// One pass over the state per token: with S' = a·S + k̂δᵀ, o = S'ᵀq̂ = a·(Sᵀq̂) + (k̂·q̂)·δ, so Sᵀk̂ and
			// Sᵀq̂ are both taken from the old state and reduced together, and the output no longer waits for
			// the update (one chain of shuffles per token instead of two).
			// The next token's k̂ and q̂ are read while this one's sums run (software pipelining: each 16-byte
			// shared load would otherwise stall the chain right where it is used).
			float4 kc[RPT / 4], qc[RPT / 4];
#pragma unroll
			for (int r = 0; r < RPT / 4; r++) {
				kc[r] = ((const float4 *)(ks + 4 * rg))[8 * r];
				qc[r] = ((const float4 *)(qs + 4 * rg))[8 * r];
			}
			for (int tt = 0; tt < nt; tt++) {
				const int tn = min(tt + 1, nt - 1);
				float4 kn[RPT / 4], qn[RPT / 4];
#pragma unroll
				for (int r = 0; r < RPT / 4; r++) {
					kn[r] = ((const float4 *)(ks + tn * DK + 4 * rg))[8 * r];
					qn[r] = ((const float4 *)(qs + tn * DK + 4 * rg))[8 * r];
				}
				const float a = as[tt], bt = bs[tt], vv = vs[tt * 32 + cl], kqt = kq[tt];
				float p0 = 0.f, p1 = 0.f, s0 = 0.f, s1 = 0.f;
#pragma unroll
				for (int r = 0; r < RPT / 4; r++) {
					p0 = fmaf(S[4 * r], kc[r].x, p0);
					s0 = fmaf(S[4 * r], qc[r].x, s0);
					p1 = fmaf(S[4 * r + 1], kc[r].y, p1);
					s1 = fmaf(S[4 * r + 1], qc[r].y, s1);
					p0 = fmaf(S[4 * r + 2], kc[r].z, p0);
					s0 = fmaf(S[4 * r + 2], qc[r].z, s0);
					p1 = fmaf(S[4 * r + 3], kc[r].w, p1);
					s1 = fmaf(S[4 * r + 3], qc[r].w, s1);
				}
				float p = p0 + p1, sq = s0 + s1;
				p += __shfl_xor_sync(0xffffffffu, p, 4);
				sq += __shfl_xor_sync(0xffffffffu, sq, 4);
				p += __shfl_xor_sync(0xffffffffu, p, 8);
				sq += __shfl_xor_sync(0xffffffffu, sq, 8);
				p += __shfl_xor_sync(0xffffffffu, p, 16);
				sq += __shfl_xor_sync(0xffffffffu, sq, 16);
				const float d = bt * (vv - a * p);
				if (rg == 0) os[tt * 32 + cl] = fmaf(a, sq, kqt * d);
#pragma unroll
				for (int r = 0; r < RPT / 4; r++) {
					S[4 * r] = fmaf(a, S[4 * r], kc[r].x * d);
					S[4 * r + 1] = fmaf(a, S[4 * r + 1], kc[r].y * d);
					S[4 * r + 2] = fmaf(a, S[4 * r + 2], kc[r].z * d);
					S[4 * r + 3] = fmaf(a, S[4 * r + 3], kc[r].w * d);
					kc[r] = kn[r];
					qc[r] = qn[r];
				}
			}
		} else
		for (int tt = 0; tt < nt; tt++) {
			const float4 *k4 = (const float4 *)(ks + tt * DK + 4 * rg);
			const float4 *q4 = (const float4 *)(qs + tt * DK + 4 * rg);
			float p0 = 0.f, p1 = 0.f;
#pragma unroll
			for (int r = 0; r < RPT / 4; r++) {
				const float4 kv = k4[8 * r];
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
				const float4 kv = k4[8 * r], qv = q4[8 * r];
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
		for (int r = 0; r < RPT; r++) final[((size_t)h * DK + 32 * (r >> 2) + 4 * rg + (r & 3)) * dv + col] = S[r];
	}
}

#define DELTA_REG(NAME, RPT, ONE, MINB, PF)                                                                          \
	extern "C" __global__ void __launch_bounds__(256, MINB) NAME(                                                \
	    void *o, int odt, float *final, const void *qkv, int xdt, const void *g, int gdt, const void *beta, int bdt, \
	    const void *s0, int sdt, const int32_t *segStart, const int32_t *segLen, int hk, int hv, int dv, int vec) {  \
		KEV_GRID_DEP();                                                                                           \
		delta_reg<RPT, ONE, PF>(o, odt, final, qkv, xdt, g, gdt, beta, bdt, s0, sdt, segStart[blockIdx.z],      \
		                    segLen[blockIdx.z], hk, hv, dv, vec);                                                \
	}
DELTA_REG(delta_rule_reg_dk32, 4, false, 1, true)
DELTA_REG(delta_rule_reg_dk64, 8, false, 1, true)
DELTA_REG(delta_rule_reg_dk128, 16, false, 1, true)
DELTA_REG(delta_rule_one_dk32, 4, true, 2, false)
DELTA_REG(delta_rule_long_dk32, 4, true, 1, true)
DELTA_REG(delta_rule_one_dk64, 8, true, 2, false)
DELTA_REG(delta_rule_long_dk64, 8, true, 1, true)
DELTA_REG(delta_rule_one_dk128, 16, true, 2, false)
DELTA_REG(delta_rule_long_dk128, 16, true, 1, true)

// delta_rule_segs_{reg,one}_dkN: the register-state kernels with segment z = blockIdx.z described by desc[z]
// (initial state desc.a of type desc.dt, null: zero; final state desc.b, null: not stored). The states are read
// in place.
#define DELTA_SEGS_REG(NAME, RPT, ONE, MINB, PF)                                                                     \
	extern "C" __global__ void __launch_bounds__(256, MINB) NAME(void *o, int odt, const void *qkv, int xdt,     \
	                                                             const void *g, int gdt, const void *beta, int bdt, \
	                                                             const SegDesc *desc, int hk, int hv, int dv, int vec) { \
		KEV_GRID_DEP();                                                                                               \
		const SegDesc sd = desc[blockIdx.z];                                                                   \
		delta_reg<RPT, ONE, PF>(o, odt, (float *)sd.b, qkv, xdt, g, gdt, beta, bdt, sd.a, sd.dt, sd.start, sd.len, hk, \
		                    hv, dv, vec);                                                                        \
	}
DELTA_SEGS_REG(delta_rule_segs_reg_dk32, 4, false, 1, true)
DELTA_SEGS_REG(delta_rule_segs_reg_dk64, 8, false, 1, true)
DELTA_SEGS_REG(delta_rule_segs_reg_dk128, 16, false, 1, true)
DELTA_SEGS_REG(delta_rule_segs_one_dk32, 4, true, 2, false)
DELTA_SEGS_REG(delta_rule_segs_long_dk32, 4, true, 1, true)
DELTA_SEGS_REG(delta_rule_segs_one_dk64, 8, true, 2, false)
DELTA_SEGS_REG(delta_rule_segs_long_dk64, 8, true, 1, true)
DELTA_SEGS_REG(delta_rule_segs_one_dk128, 16, true, 2, false)
DELTA_SEGS_REG(delta_rule_segs_long_dk128, 16, true, 1, true)
