// The gated delta rule in its chunked (WY) form on tensor cores, d_k = 128, for every non-empty segment of bf16
// rows. Two launches per call:
//
//   gdn_prep: one block per (64-token chunk, value head), all chunks of all segments at once (gdn_prep_kh: one per
//   (chunk, key head), its two value heads side by side, sharing the loads, norms and products of q and k).
//   From the raw bf16 q and k rows (their normalisations kept as row factors), the cumulative log decay Γ_t within the chunk
//   (γ_t = exp Γ_t) and β:
//     A[t,s] = β_t rk_t rk_s e^{Γ_t−Γ_s} (k_t·k_s)  (s < t),   T = (I + A)⁻¹ (unit lower triangular, fp32),
//     M[t,s] = rq_t rk_s e^{Γ_t−Γ_s} (q_t·k_s)      (s ≤ t),
//   with rk = 1/‖k‖, rq = d_k^−½/‖q‖, and the row factors fa = β γ rk, fb = β, fq = γ rq, fk = e^{Γ_C−Γ_t} rk and
//   the chunk's decay γ_C = e^{Γ_C} (C its last token). T and M go to the workspace in bf16, the factors in fp32.
//
//   gdn_state: one block per (32 value columns, value head, segment) runs the segment's chunks in order with its
//   128×32 fp32 state slice S in the accumulator registers of 8 warps, then the rows that continue the segment's
//   final state (one chunk each, no update); gdn_state_w2 runs 64 columns, two such groups of 8 warps sharing each
//   chunk's loads and barriers, and then the rows two at a time, each group one row on all 64 columns. Per chunk,
//   with K, Q, V the raw rows:
//     X = K S, P = Q S                   (S split into two bf16 parts, hi + lo: the products keep ~16 bits of S)
//     R = fb·V − fa·X,  Δ = T R          (Δ_t = β_t(v_t − γ_t S₀ᵀk̂_t − Σ_{s<t} (γ_t/γ_s)(k̂_s·k̂_t) Δ_s) solved)
//     O = fq·P + M Δ                     (o_t = γ_t S₀ᵀq̂_t + Σ_{s≤t} (γ_t/γ_s)(q̂_t·k̂_s) Δ_s)
//     S ← γ_C S + Kᵀ (fk·Δ)
//   All products are mma.sync m16n8k16 bf16 with fp32 accumulation. No 1/γ is ever formed: only exponentials
//   of non-positive differences. Every quantity of a chunk depends only on its own segment, so results do not
//   depend on the segment's batch-mates.
#include "common.cuh"
#include "gdn.cuh"

// SegDesc: as in delta.cu (segs.cu's layout): rows start … start+len−1, initial state a (type dt, null: zero),
// final state b (fp32, null: not stored).
// For gdn_state, nrows rows continue the segment's final state (entries rows … rows + nrows − 1 of the row table).
struct __align__(8) GdnSeg {
	int32_t start, len, nrows, dt, rows, dtb;
	const void *a;
	void *b;
};

// Fragment addresses (lane l, i = l >> 3, r = l & 7), for a 16×16 A tile at (m0, k0) and B tiles:
//   A stored [m][k]:        ldsm4 at row m0 + (l & 15), column k0 + (l >> 4)·8
//   A stored [k][m] (Aᵀ):   ldsm4t at row k0 + r + (i >> 1)·8, column m0 + (i & 1)·8
//   B stored [n][k]:        ldsm4 at row n0 + r + (i >> 1)·8, column k0 + (i & 1)·8 → b0, b1 of n tiles n0, n0 + 8
//   B stored [k][n]:        ldsm4t at row k0 + r + (i & 1)·8, column n0 + (i >> 1)·8 → the same

// gdn_prep_heads (gdn_prep, gdn_prep_kh): 256 threads; value heads h0 … h0 + P − 1 of key head kh, side by side. chunks[2c], chunks[2c+1]: first row and length (1…64) of chunk c.
// K Kᵀ and Q Kᵀ (and the norms) depend on the key head only: they are computed once, kept in registers, and the P
// value heads then take their decays and β, their A and M, and their inverses together, every phase between the
// same two barriers for all P heads (the heads' arithmetic is the same whatever P: the same bits).
// qkv bf16 [N, 2·hk·128 + hv·dv]; g, beta [N, hv] of types gdt, bdt; work: GDN_WORK bytes per (c, h).
// Shared memory: q, k [64][KP] bf16, then in their place (and after them when P = 2) A and T [64][AP] fp32 of each
// head; then Γ and β [P][64], rq and rk [64] (gdnPrepShared in gdn.go).
template <int P>
__device__ __forceinline__ void gdn_prep_heads(const __nv_bfloat16 *qkv, const void *g, int gdt, const void *beta,
                                               int bdt, const int32_t *chunks, int hk, int hv, int dv, char *work,
                                               int kh, int h0) {
	extern __shared__ __align__(16) char smg[];
	__nv_bfloat16 *Qs = (__nv_bfloat16 *)smg;              // [64][KP]
	__nv_bfloat16 *Ks = Qs + GC * KP;                      // [64][KP]
	float *AT = (float *)smg;                              // head e: A at AT + 2e·64·AP, T after it
	float *gam = (float *)(smg + P * 2 * GC * AP * 4);     // [P][64] Γ
	float *bs = gam + P * GC;                              // [P][64] β
	float *rq = bs + P * GC;                               // [64]
	float *rk = rq + GC;                                   // [64]
	static_assert(2 * GC * AP * 4 == 2 * GC * KP * 2, "A and T take the place of q and k");
	const int c = blockIdx.x;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
	const int t0 = chunks[2 * c], len = chunks[2 * c + 1];
	const int nb = (len + 15) >> 4; // 16-token tiles holding tokens: the others are padding, their A, T, M rows fixed
	const size_t width = 2 * (size_t)hk * GDK + (size_t)hv * dv;
	{ // 16 pieces of q, then 16 of k, per row: thread tid copies one piece of rows tid / 32 + 8j
		const int tr = tid >> 5, which = (tid >> 4) & 1, d8 = (tid & 15) * 8;
		const __nv_bfloat16 *src = qkv + (size_t)t0 * width + (size_t)which * hk * GDK + (size_t)kh * GDK + d8;
		__nv_bfloat16 *dst = (which ? Ks : Qs) + tr * KP + d8;
#pragma unroll
		for (int j = 0; j < GC / 8; j++) {
			const int t = tr + 8 * j;
			const bool ok = t < len;
			cp16(dst + 8 * j * KP, src + (size_t)(ok ? t : 0) * width, ok);
		}
	}
	cp_commit();
	// the heads' decays and β (warp e: head e, lane l: tokens 2l, 2l + 1; zero past the chunk), loaded while q and k
	// come in
	float gn[2] = {0.f, 0.f}, bn[2] = {0.f, 0.f};
	if (warp < P)
#pragma unroll
		for (int q = 0; q < 2; q++)
			if (2 * lane + q < len) {
				gn[q] = ld(g, gdt, (size_t)(t0 + 2 * lane + q) * hv + h0 + warp);
				bn[q] = ld(beta, bdt, (size_t)(t0 + 2 * lane + q) * hv + h0 + warp);
			}
	cp_wait<0>();
	__syncthreads();
	// K Kᵀ and Q Kᵀ by 16×16 blocks on and below the diagonal of the tiles holding tokens: block b = mi(mi + 1)/2 + nj
	// (nj ≤ mi < nb) on warp b % 8 in its slot b / 8 (every warp's share of the products at most two blocks, one where
	// the chunk has three tiles or fewer); the warp of a diagonal block (nj = mi) takes that block of Q Qᵀ too, for the
	// norms: ‖k_t‖² and ‖q_t‖² are the diagonals of K Kᵀ and Q Qᵀ
	{
		const int nblk = nb * (nb + 1) / 2;
		int bm[2], bj[2];
		bool has[2];
#pragma unroll
		for (int u = 0; u < 2; u++) {
			const int b = warp + 8 * u;
			bm[u] = b < 1 ? 0 : b < 3 ? 1 : b < 6 ? 2 : 3;
			bj[u] = b - bm[u] * (bm[u] + 1) / 2;
			has[u] = b < nblk;
		}
		float ck[2][2][4] = {}, cq[2][2][4] = {}, cd[2][4] = {};
		const int i = lane >> 3, r = lane & 7;
#pragma unroll
		for (int kk = 0; kk < GDK / 16; kk++) {
#pragma unroll
			for (int u = 0; u < 2; u++) {
				if (!has[u]) break;
				uint32_t ak[4], aq[4], b[4];
				ldsm4(ak, Ks + (16 * bm[u] + (lane & 15)) * KP + 16 * kk + (lane >> 4) * 8);
				ldsm4(aq, Qs + (16 * bm[u] + (lane & 15)) * KP + 16 * kk + (lane >> 4) * 8);
				ldsm4(b, Ks + (16 * bj[u] + r + (i >> 1) * 8) * KP + 16 * kk + (i & 1) * 8);
				mma16816(ck[u][0], ak, b[0], b[1]);
				mma16816(ck[u][1], ak, b[2], b[3]);
				mma16816(cq[u][0], aq, b[0], b[1]);
				mma16816(cq[u][1], aq, b[2], b[3]);
				if (bm[u] == bj[u]) { // a diagonal block: Q Qᵀ too
					ldsm4(b, Qs + (16 * bj[u] + r + (i >> 1) * 8) * KP + 16 * kk + (i & 1) * 8);
					mma16816(cd[0], aq, b[0], b[1]);
					mma16816(cd[1], aq, b[2], b[3]);
				}
			}
		}
		const int gq = lane >> 2, qq = lane & 3;
		// the diagonal element (t, t), t = 16mi + gq + 8hf, of a diagonal block is entry 2hf + (gq & 1) of its n tile
		// hf in the lanes with gq / 2 = qq; rows of padding tiles keep no norm (nothing reads one)
#pragma unroll
		for (int u = 0; u < 2; u++)
			if (has[u] && bm[u] == bj[u] && (gq >> 1) == qq)
#pragma unroll
				for (int hf = 0; hf < 2; hf++) {
					const int t = 16 * bm[u] + gq + 8 * hf;
					const bool odd = gq & 1;
					const float k2 = odd ? ck[u][hf][2 * hf + 1] : ck[u][hf][2 * hf];
					const float q2 = odd ? cd[hf][2 * hf + 1] : cd[hf][2 * hf];
					rq[t] = rsqrtf((float)GDK) / sqrtf(q2 + 1e-6f);
					rk[t] = 1.f / sqrtf(k2 + 1e-6f);
				}
		// the thread's head and index among its head's 256/P threads in the substitution and the levels
		const int he = P == 2 ? tid >> 7 : 0, ht = P == 2 ? tid & 127 : tid;
		__syncthreads(); // q and k are read: A and T take their place
		{
			// β, and the cumulative log decay Γ: warp e scans head e's 64 values, two a lane
			if (warp < P) {
				float *ga = gam + warp * GC, *ba = bs + warp * GC;
				ba[2 * lane] = bn[0];
				ba[2 * lane + 1] = bn[1];
				const float a0 = gn[0], a1 = a0 + gn[1];
				float s = a1;
#pragma unroll
				for (int o = 1; o < 32; o <<= 1) {
					const float u = __shfl_up_sync(0xffffffffu, s, o);
					if (lane >= o) s += u;
				}
				float ex = __shfl_up_sync(0xffffffffu, s, 1); // sum of the lanes before
				if (lane == 0) ex = 0.f;
				ga[2 * lane] = ex + a0;
				ga[2 * lane + 1] = ex + a1;
			}
			for (int e = 0; e < P; e++) {
				float4 *Ts = (float4 *)(AT + (2 * e + 1) * GC * AP);
				for (int i = tid; i < 4 * nb * AP; i += 256) Ts[i] = make_float4(0.f, 0.f, 0.f, 0.f);
			}
			__syncthreads();
			// A and M of each block (rows of padding tiles: A, T and M never read), and M's zeros above the blocks
			for (int e = 0; e < P; e++) {
				const float *ga = gam + e * GC, *ba = bs + e * GC;
				float *As = AT + 2 * e * GC * AP;
				__nv_bfloat16 *Mw = (__nv_bfloat16 *)(work + ((size_t)c * hv + h0 + e) * GDN_WORK + GC * GC * 2);
#pragma unroll
				for (int u = 0; u < 2; u++) {
					if (!has[u]) break;
					const int mi = bm[u], nj = bj[u];
					float gt[2], ft[2], rqt[2], gs[4], rks[4];
#pragma unroll
					for (int hf = 0; hf < 2; hf++) {
						const int t = 16 * mi + gq + 8 * hf;
						gt[hf] = ga[t];
						ft[hf] = rk[t] * ba[t];
						rqt[hf] = rq[t];
					}
#pragma unroll
					for (int j = 0; j < 4; j++) {
						const int s = 16 * nj + 8 * (j >> 1) + 2 * qq + (j & 1);
						gs[j] = ga[s];
						rks[j] = rk[s];
					}
#pragma unroll
					for (int nt = 0; nt < 2; nt++)
#pragma unroll
						for (int hf = 0; hf < 2; hf++) {
							const int t = 16 * mi + gq + 8 * hf, s0 = 16 * nj + 8 * nt + 2 * qq;
							float m2[2], a2[2];
#pragma unroll
							for (int q = 0; q < 2; q++) {
								const int s = s0 + q, j = 2 * nt + q;
								const float d = __expf(fminf(gt[hf] - gs[j], 0.f)) * rks[j]; // e^{Γt−Γs} (s ≤ t) · rk_s
								m2[q] = s <= t ? cq[u][nt][2 * hf + q] * d * rqt[hf] : 0.f;
								a2[q] = s < t ? ck[u][nt][2 * hf + q] * d * ft[hf] : 0.f;
							}
							*(float2 *)(As + t * AP + s0) = make_float2(a2[0], a2[1]);
							*(uint32_t *)(Mw + t * GC + s0) = pack2(m2[0], m2[1]);
						}
				}
				for (int p = tid; p < 16 * nb * GC / 2; p += 256) {
					const int t = p >> 5, s0 = (p & 31) * 2;
					if (s0 >= 16 * ((t >> 4) + 1)) *(uint32_t *)(Mw + t * GC + s0) = 0u;
				}
			}
			__syncthreads();
			// T = (I + A)⁻¹: the diagonal 16×16 blocks of tiles holding tokens by forward substitution (one thread per
			// column), then the blocks below the diagonal by levels: T_ij = −T_ii Σ_{k=j}^{i−1} A_ik T_kj. Rows of padding
			// tiles are neither computed nor stored: the state pass reads T and M only in rows of tiles holding tokens.
			const float *As = AT + 2 * he * GC * AP;
			float *Ts = AT + (2 * he + 1) * GC * AP;
			if (ht < 16 * nb && he < P) {
				// column j: x_r = δ_rj − Σ_{p<r} A_rp x_p (x_r = 0 above the diagonal), each x_p taken off every later
				// row as soon as it is known — the same operations in the same order per row as summing row by row,
				// but a chain of 16 steps instead of 120 (the loads do not wait for earlier stores: Ts is written
				// afterwards)
				const int blk = ht >> 4, j = ht & 15, o = 16 * blk;
				float x[16];
#pragma unroll
				for (int r = 0; r < 16; r++) x[r] = r == j ? 1.f : 0.f;
#pragma unroll
				for (int p = 0; p < 16; p++) {
					if (p < j) x[p] = 0.f;
#pragma unroll
					for (int r = p + 1; r < 16; r++) x[r] -= As[(o + r) * AP + o + p] * x[p];
				}
#pragma unroll
				for (int r = 0; r < 16; r++) Ts[(o + r) * AP + o + j] = x[r];
			}
			__syncthreads();
			// Level lv (only those with blocks holding tokens): blocks (lv + b, b), b < 4 − lv; a head's thread ht:
			// block b = ht / (64/P), row r, columns c4 … c4 + 4P − 1 (one broadcast load of A or T_ii and one 16-byte
			// load per four multiply-adds). The sums Y = A·T of a level go to the unused block (0, b + 1) of A.
			for (int lv = 1; lv < nb; lv++) {
				const int b = ht / (64 / P), r = (ht / (4 / P)) & 15, c4 = (ht % (4 / P)) * 4 * P;
				const int bi = lv + b, bj = b;
				const bool on = b < 4 - lv && bi < nb && he < P; // padding rows of A are zero: T_ij stays zero
				float *Ys = (float *)As + 16 * (b + 1);            // [16][AP]: rows 0 … 15 of A above its diagonal
				if (on) {
					float4 y[P];
#pragma unroll
					for (int u = 0; u < P; u++) y[u] = make_float4(0.f, 0.f, 0.f, 0.f);
					for (int k = bj; k < bi; k++)
#pragma unroll
						for (int p = 0; p < 16; p++) {
							const float a = As[(16 * bi + r) * AP + 16 * k + p];
#pragma unroll
							for (int u = 0; u < P; u++) {
								const float4 t = *(const float4 *)(Ts + (16 * k + p) * AP + 16 * bj + c4 + 4 * u);
								y[u].x += a * t.x;
								y[u].y += a * t.y;
								y[u].z += a * t.z;
								y[u].w += a * t.w;
							}
						}
#pragma unroll
					for (int u = 0; u < P; u++) *(float4 *)(Ys + r * AP + c4 + 4 * u) = y[u];
				}
				__syncthreads();
				if (on) {
					float4 y[P];
#pragma unroll
					for (int u = 0; u < P; u++) y[u] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
					for (int p = 0; p < 16; p++) {
						const float a = Ts[(16 * bi + r) * AP + 16 * bi + p];
#pragma unroll
						for (int u = 0; u < P; u++) {
							const float4 t = *(const float4 *)(Ys + p * AP + c4 + 4 * u);
							y[u].x += a * t.x;
							y[u].y += a * t.y;
							y[u].z += a * t.z;
							y[u].w += a * t.w;
						}
					}
#pragma unroll
					for (int u = 0; u < P; u++)
						*(float4 *)(Ts + (16 * bi + r) * AP + 16 * bj + c4 + 4 * u) =
						    make_float4(-y[u].x, -y[u].y, -y[u].z, -y[u].w);
				}
				__syncthreads();
			}
			for (int e = 0; e < P; e++) {
				const float *Te = AT + (2 * e + 1) * GC * AP;
				__nv_bfloat16 *Tw = (__nv_bfloat16 *)(work + ((size_t)c * hv + h0 + e) * GDN_WORK);
				for (int p = tid; p < 16 * nb * GC / 4; p += 256) {
					const int t = p >> 4, s = (p & 15) * 4;
					const float4 v = *(const float4 *)(Te + t * AP + s);
					*(uint2 *)(Tw + t * GC + s) = make_uint2(pack2(v.x, v.y), pack2(v.z, v.w));
				}
			}
			const int le = tid >> 6, lt = tid & 63; // F: thread e·64 + t, head e, token t
			if (tid < P * GC && le < P) {
				const int t = lt;
				const float *ga = gam + le * GC, *ba = bs + le * GC;
				float *F = (float *)(work + ((size_t)c * hv + h0 + le) * GDN_WORK + 2 * GC * GC * 2);
				const bool ok = t < len;
				const float gC = ga[len - 1], gt = expf(ga[t]);
				F[t] = ok ? ba[t] * gt * rk[t] : 0.f;              // fa
				F[GC + t] = ok ? ba[t] : 0.f;                      // fb
				F[2 * GC + t] = ok ? gt * rq[t] : 0.f;             // fq
				F[3 * GC + t] = ok ? expf(gC - ga[t]) * rk[t] : 0.f; // fk
				F[4 * GC + t] = t == 0 ? expf(gC) : 0.f;           // γ_C
			}
		}
	}
}

// gdn_prep: one value head per block, grid (chunks, hv).
extern "C" __global__ void __launch_bounds__(256, 4) gdn_prep(const __nv_bfloat16 *qkv, const void *g, int gdt,
                                                          const void *beta, int bdt, const int32_t *chunks, int hk,
                                                          int hv, int dv, char *work) {
	KEV_GRID_DEP();
	const int h = blockIdx.y;
	gdn_prep_heads<1>(qkv, g, gdt, beta, bdt, chunks, hk, hv, dv, work, h / (hv / hk), h);
}

// gdn_prep_kh: both value heads of a key head per block (hv = 2·hk, Qwen3.5's layers), side by side, grid (chunks,
// hk); the same bits as gdn_prep.
extern "C" __global__ void __launch_bounds__(256, 3) gdn_prep_kh(const __nv_bfloat16 *qkv, const void *g, int gdt,
                                                             const void *beta, int bdt, const int32_t *chunks,
                                                             int hk, int hv, int dv, char *work) {
	KEV_GRID_DEP();
	const int kh = blockIdx.y;
	gdn_prep_heads<2>(qkv, g, gdt, beta, bdt, chunks, hk, hv, dv, work, kh, 2 * kh);
}

// gdn_state: grid (dv/(32·CG), hv, segments), 256·CG threads: CG groups of 8 warps, group g on the block's value
// columns 32g … 32g + 31, each group computing what a block of one group (CG = 1) computes for its columns, in the
// same order (the same bits); the groups share the chunk's q, k, T, M and factors, loaded once. desc[z]: the
// segment (length ≥ 0); base[z]: its first chunk in the workspace (chunk i of the segment is base[z] + i, rows
// start + 64i …); rows [R][3]: rows that continue a
// segment's final state without keeping their own (first row, length 1…64, workspace chunk), run after the
// segment's chunks by the same block from the state in its registers — the state slice is loaded or computed once
// for all of them. A row's outputs are computed by the same code as a chunk of a segment (only the state update is
// left out), so its bits do not depend on which rows share its block. o [N, hv·dv] of type odt.
// Warp v of a group holds the state rows 16v … 16v + 15 (the group's 32 columns) and works on tokens 16(v & 3) …
// and columns 16(v >> 2) … of every product of a chunk: X = K S, P = Q S and R; then Δ = T R; then the outputs
// O = fq·P + M Δ, while all warps update their state rows. So every warp has the same share of each phase between
// two barriers. NS = 2 loads the next chunk while this one runs (one block per multiprocessor), NS = 1 does not
// (two blocks per multiprocessor). All compute the same bits.
template <int NS, int CG>
__device__ __forceinline__ void gdn_state(void *o, int odt, const __nv_bfloat16 *qkv, const GdnSeg *desc,
                                          const int32_t *base, const int32_t *rows, int hk, int hv, int dv,
                                          const char *work, int pairs) {
	extern __shared__ __align__(16) char sms[];
	constexpr int BV = GBV * CG, VW = BV + 8; // the block's value columns; padded rows of V, R, Δ, S (bf16)
	constexpr int STAGE = 2 * GC * KP * 2 + GC * VW * 2 + 2 * GC * TP * 2 + 5 * GC * 4;
	__nv_bfloat16 *Sh = (__nv_bfloat16 *)(sms + NS * STAGE); // [128][VW] S, high part
	__nv_bfloat16 *Sl = Sh + GDK * VW;                       // [128][VW] S − high
	__nv_bfloat16 *Rs = Sl + GDK * VW;                       // [64][VW] R
	__nv_bfloat16 *Ds = Rs + GC * VW;                        // [64][VW] Δ
	__nv_bfloat16 *Dk = Ds + GC * VW;                        // [64][VW] fk·Δ
	__nv_bfloat16 *D2 = Dk + GC * VW;                        // [64][VW] CG = 2: the second group's Δ of a row
	const GdnSeg sd = desc[blockIdx.z];
	const int tid = threadIdx.x, lane = tid & 31, warp = CG == 1 ? tid >> 5 : (tid >> 5) & 7; // within its group
	const int cc = CG == 1 ? 0 : GBV * (tid >> 8); // the group's first column in shared rows
	const int h = blockIdx.y, kh = h / (hv / hk), cb0 = blockIdx.x * BV, c0 = cb0 + cc;
	const int gq = lane >> 2, qq = lane & 3, li = lane >> 3, lr = lane & 7;
	const int mw = warp & 3;     // token tile of X, P, R, Δ and O
	const int dh = warp >> 2;    // their columns 16dh … 16dh + 15
	const size_t width = 2 * (size_t)hk * GDK + (size_t)hv * dv;
	const int nch = (sd.len + GC - 1) / GC, cb = base[blockIdx.z], nit = nch + sd.nrows;
	// item i: chunk i of the segment (i < nch), else row i − nch: first row, length, workspace chunk. A row's comes
	// from the row table in global memory: the loop reads item i + 2's while item i runs, so no item waits for it.
	auto item = [&](int i) -> GdnItem {
		if (i >= nit) return GdnItem{0, 0, 0};
		if (i < nch) return GdnItem{sd.start + GC * i, min(GC, sd.len - GC * i), cb + i};
		const int32_t *rw = rows + 3 * (sd.rows + i - nch);
		return GdnItem{rw[0], rw[1], rw[2]};
	};
	float S[4][4]; // rows 16·warp + gq (+8), columns 8nt + 2qq (+1)
#pragma unroll
	for (int nt = 0; nt < 4; nt++)
#pragma unroll
		for (int e = 0; e < 4; e++) {
			const int row = 16 * warp + gq + 8 * (e >> 1), col = c0 + 8 * nt + 2 * qq + (e & 1);
			S[nt][e] = sd.a ? ld(sd.a, sd.dt, ((size_t)h * GDK + row) * dv + col) : 0.f;
		}
	// split_state writes this warp's rows of S as bf16 hi and lo = S − hi, [dim][col], for the products with S
	auto split_state = [&]() {
#pragma unroll
		for (int nt = 0; nt < 4; nt++)
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				const int sr = 16 * warp + gq + 8 * hf, col = 8 * nt + 2 * qq;
				split2(S[nt][2 * hf], S[nt][2 * hf + 1], *(uint32_t *)(Sh + sr * VW + cc + col),
				       *(uint32_t *)(Sl + sr * VW + cc + col));
			}
	};
	// products adds X = K S and P = Q S for the token tile mw and the 16 columns from cs (in the shared rows of S)
	// to X and P: per k step the high part, then the low part of S
	auto products = [&](const __nv_bfloat16 *Ks, const __nv_bfloat16 *Qs, int cs, float (&X)[2][4], float (&P)[2][4]) {
#pragma unroll
		for (int kk = 0; kk < GDK / 16; kk++) {
			uint32_t ak[4], aq[4], bh[4], bl[4];
			ldsm4(ak, Ks + (16 * mw + (lane & 15)) * KP + 16 * kk + (lane >> 4) * 8);
			ldsm4(aq, Qs + (16 * mw + (lane & 15)) * KP + 16 * kk + (lane >> 4) * 8);
			const int off = (16 * kk + lr + (li & 1) * 8) * VW + cs + (li >> 1) * 8;
			ldsm4t(bh, Sh + off);
			ldsm4t(bl, Sl + off);
			mma16816(X[0], ak, bh[0], bh[1]);
			mma16816(X[1], ak, bh[2], bh[3]);
			mma16816(P[0], aq, bh[0], bh[1]);
			mma16816(P[1], aq, bh[2], bh[3]);
			mma16816(X[0], ak, bl[0], bl[1]);
			mma16816(X[1], ak, bl[2], bl[3]);
			mma16816(P[0], aq, bl[0], bl[1]);
			mma16816(P[1], aq, bl[2], bl[3]);
		}
	};
	// outputs computes O = fq·P + M Δ for the token tile mw and the 16 columns from cs (in the shared rows of Δ, Db;
	// in the block's columns, cb0 + cs) of the item whose rows start at t0, and stores its rows below len
	auto outputs = [&](const __nv_bfloat16 *Ms, const __nv_bfloat16 *Db, int cs, float (&P)[2][4], float fq0, float fq1,
	                   int t0, int len) {
		const int ta = 16 * mw + gq, tb = ta + 8;
#pragma unroll
		for (int n = 0; n < 2; n++) {
			P[n][0] *= fq0;
			P[n][1] *= fq0;
			P[n][2] *= fq1;
			P[n][3] *= fq1;
		}
		for (int kk = 0; kk <= mw; kk++) {
			uint32_t a[4], b[4];
			ldsm4(a, Ms + (16 * mw + (lane & 15)) * TP + 16 * kk + (lane >> 4) * 8);
			ldsm4t(b, Db + (16 * kk + lr + (li & 1) * 8) * VW + cs + (li >> 1) * 8);
			mma16816(P[0], a, b[0], b[1]);
			mma16816(P[1], a, b[2], b[3]);
		}
		const size_t ow = (size_t)hv * dv;
#pragma unroll
		for (int n = 0; n < 2; n++) {
			const size_t col = (size_t)h * dv + cb0 + cs + 8 * n + 2 * qq;
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				const int t = hf ? tb : ta;
				if (t >= len) continue;
				const size_t at = (size_t)(t0 + t) * ow + col;
				if (odt == DT_BF16)
					*(uint32_t *)((__nv_bfloat16 *)o + at) = pack2(P[n][2 * hf], P[n][2 * hf + 1]);
				else {
					st(o, odt, at, P[n][2 * hf]);
					st(o, odt, at + 1, P[n][2 * hf + 1]);
				}
			}
		}
	};
	// issue(i, it, qk, rest) loads item i (it) — its q and k rows (qk), its v rows, T, M and factors (rest) — as
	// one group
	auto issue = [&](int i, const GdnItem &it, bool qk, bool rest) {
		char *sb = sms + (NS == 2 ? (i & 1) : 0) * STAGE;
		__nv_bfloat16 *Qs = (__nv_bfloat16 *)sb, *Ks = Qs + GC * KP, *Vs = Ks + GC * KP;
		__nv_bfloat16 *Tm = Vs + GC * VW; // T then M, [64][TP] each
		float *F = (float *)(Tm + 2 * GC * TP);
		const int len = it.len;
		const int nr = 16 * ((len + 15) >> 4); // rows of T and M that hold tokens (the others are never read)
		// Each thread copies fixed 16-byte pieces of rows tid / 32 + 8CG·j (q, k), tid / (4CG) (v) and tid / 8 + 32CG·j
		// (T, M): the row pointers step by constants, so a piece costs a copy and an add.
		const __nv_bfloat16 *row0 = qkv + (size_t)it.t0 * width; // the item's first row
		if (qk) { // per row: 16 pieces of q, then 16 of k
			const int tr = tid >> 5, which = (tid >> 4) & 1, d8 = (tid & 15) * 8;
			const __nv_bfloat16 *src = row0 + (size_t)which * hk * GDK + (size_t)kh * GDK + d8, *p = src + (size_t)tr * width;
			__nv_bfloat16 *dst = (which ? Ks : Qs) + tr * KP + d8;
#pragma unroll
			for (int j = 0; j < GC / (8 * CG); j++, p += 8 * CG * width) {
				const bool ok = tr + 8 * CG * j < len;
				cp16(dst + 8 * CG * j * KP, ok ? p : src, ok);
			}
		}
		if (!rest) {
			cp_commit();
			return;
		}
		{ // per row: 4CG pieces of v
			const int t = tid / (4 * CG), d8 = (tid % (4 * CG)) * 8;
			const bool ok = t < len;
			cp16(Vs + t * VW + d8, row0 + (size_t)(ok ? t : 0) * width + 2 * (size_t)hk * GDK + (size_t)h * dv + cb0 + d8, ok);
		}
		const char *wp = work + ((size_t)it.ck * hv + h) * GDN_WORK;
		{ // T and M rows: 8 pieces each
			const int tr = tid >> 3, d8 = (tid & 7) * 8;
#pragma unroll
			for (int j = 0; j < 4 / CG; j++) {
				const int m = j / (2 / CG), t = tr + 32 * CG * (j % (2 / CG));
				if (t < nr) cp16(Tm + m * GC * TP + t * TP + d8, wp + (size_t)m * GC * GC * 2 + (t * GC + d8) * 2, true);
			}
		}
		if (tid < 5 * GC / 4) cp16(F + 4 * tid, wp + 2 * GC * GC * 2 + 16 * tid, true);
		cp_commit();
	};
	// CG = 2 with pairs runs the segment's chunks here and its rows two at a time afterwards (below); otherwise all
	// items run here
	const bool paired = CG == 2 && pairs;
	const int nmain = paired ? nch : nit;
	GdnItem cur = item(0), nxt = item(1), nn; // items i, i + 1, i + 2
	if (NS == 2 && nmain > 0) issue(0, cur, true, true);
	bool qkin = false; // NS = 1: this item's q and k are on their way already (issued during the previous row)
	for (int i = 0; i < nmain; i++, cur = nxt, nxt = nn) {
		nn = item(i + 2);
		__syncthreads(); // the previous chunk's shared memory is no longer read
		char *sb = sms + (NS == 2 ? (i & 1) : 0) * STAGE;
		const __nv_bfloat16 *Qs = (const __nv_bfloat16 *)sb, *Ks = Qs + GC * KP, *Vs = Ks + GC * KP;
		const __nv_bfloat16 *Ts = Vs + GC * VW, *Ms = Ts + GC * TP;
		const float *F = (const float *)(Ms + GC * TP);
		const int t0 = cur.t0, len = cur.len;
		const int nb = (len + 15) >> 4; // 16-token tiles holding tokens; warps of later tiles skip X, P, R, Δ, O
		const bool live = mw < nb;
		const bool row = i >= nch;      // a row: outputs only, the state stays
		if (NS == 1) { // q and k first: X and P wait for them only
			if (!qkin) issue(i, cur, true, false);
			issue(i, cur, false, true);
		}
		// S → bf16 hi/lo, [dim][col] (the rows after the first find it there already)
		if (i <= nch) split_state();
		if (NS == 2 && i + 1 < nmain) {
			issue(i + 1, nxt, true, true);
			cp_wait<1>();
		} else if (NS == 2)
			cp_wait<0>();
		else
			cp_wait<1>();
		__syncthreads();
		// X = K S and P = Q S (tokens 16mw …, columns 16dh …)
		float X[2][4] = {}, P[2][4] = {};
		if (live) products(Ks, Qs, cc + 16 * dh, X, P);
		if (NS == 1) {
			// v, T, M and the factors have arrived; after a row, q and k are read no more: the next item's load
			cp_wait<0>();
			__syncthreads();
			qkin = row && i + 1 < nit;
			if (qkin) issue(i + 1, nxt, true, false);
		}
		const int ta = 16 * mw + gq, tb = ta + 8;
		if (live) { // R = fb·V − fa·X
			const float fa0 = F[ta], fa1 = F[tb], fb0 = F[GC + ta], fb1 = F[GC + tb];
#pragma unroll
			for (int n = 0; n < 2; n++) {
				const int col = cc + 16 * dh + 8 * n + 2 * qq;
				const float2 v0 = __bfloat1622float2(*(const __nv_bfloat162 *)(Vs + ta * VW + col));
				const float2 v1 = __bfloat1622float2(*(const __nv_bfloat162 *)(Vs + tb * VW + col));
				*(uint32_t *)(Rs + ta * VW + col) = pack2(fb0 * v0.x - fa0 * X[n][0], fb0 * v0.y - fa0 * X[n][1]);
				*(uint32_t *)(Rs + tb * VW + col) = pack2(fb1 * v1.x - fa1 * X[n][2], fb1 * v1.y - fa1 * X[n][3]);
			}
		}
		__syncthreads();
		// Δ = T R (T lower triangular: k tiles 0 … mw), columns 16dh …
		if (live) {
			float D[2][4] = {};
			for (int kk = 0; kk <= mw; kk++) {
				uint32_t a[4], b[4];
				ldsm4(a, Ts + (16 * mw + (lane & 15)) * TP + 16 * kk + (lane >> 4) * 8);
				ldsm4t(b, Rs + (16 * kk + lr + (li & 1) * 8) * VW + cc + 16 * dh + (li >> 1) * 8);
				mma16816(D[0], a, b[0], b[1]);
				mma16816(D[1], a, b[2], b[3]);
			}
			const float fk0 = F[3 * GC + ta], fk1 = F[3 * GC + tb];
#pragma unroll
			for (int n = 0; n < 2; n++) {
				const int col = cc + 16 * dh + 8 * n + 2 * qq;
				*(uint32_t *)(Ds + ta * VW + col) = pack2(D[n][0], D[n][1]);
				*(uint32_t *)(Ds + tb * VW + col) = pack2(D[n][2], D[n][3]);
				if (row) continue;
				*(uint32_t *)(Dk + ta * VW + col) = pack2(fk0 * D[n][0], fk0 * D[n][1]);
				*(uint32_t *)(Dk + tb * VW + col) = pack2(fk1 * D[n][2], fk1 * D[n][3]);
			}
		}
		__syncthreads();
		if (live) outputs(Ms, Ds, cc + 16 * dh, P, F[2 * GC + ta], F[2 * GC + tb], t0, len);
		if (row || (i + 1 == nch && !sd.b && nit == nch)) continue; // rows keep the state; a last one not wanted
		// S ← γ_C S + Kᵀ (fk·Δ): rows 16·warp …, tokens in k tiles of 16
		const float gC = F[4 * GC];
#pragma unroll
		for (int nt = 0; nt < 4; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++) S[nt][e] *= gC;
#pragma unroll
		for (int kk = 0; kk < GC / 16; kk++) {
			if (kk >= nb) break; // padding tokens add nothing
			uint32_t a[4], b[2][4];
			ldsm4t(a, Ks + (16 * kk + lr + (li >> 1) * 8) * KP + 16 * warp + (li & 1) * 8);
#pragma unroll
			for (int np = 0; np < 2; np++) {
				ldsm4t(b[np], Dk + (16 * kk + lr + (li & 1) * 8) * VW + cc + 16 * np + (li >> 1) * 8);
				mma16816(S[2 * np], a, b[np][0], b[np][1]);
				mma16816(S[2 * np + 1], a, b[np][2], b[np][3]);
			}
		}
	}
	if (sd.b) {
		float *fin = (float *)sd.b;
#pragma unroll
		for (int nt = 0; nt < 4; nt++)
#pragma unroll
			for (int hf = 0; hf < 2; hf++) {
				const int row = 16 * warp + gq + 8 * hf, col = c0 + 8 * nt + 2 * qq;
				*(float2 *)(fin + ((size_t)h * GDK + row) * dv + col) = make_float2(S[nt][2 * hf], S[nt][2 * hf + 1]);
			}
	}
	if constexpr (CG == 2) {
		if (!paired || sd.nrows == 0) return;
		// The rows, two at a time: group g (warps 8g … 8g + 7) runs rows g, g + 2, … on all 64 columns, from stage
		// g, its R in Rs (g = 0) or Dk (g = 1) and its Δ in Ds or D2, meeting only its own warps at named barrier
		// 1 + g, so one group's products run while the other waits at a barrier or for its loads. A warp computes
		// for its token tile and columns 16dh + 32hh (hh = 0, 1) what a warp of one group computes for its columns
		// in the loop above: the same bits.
		__syncthreads(); // the last chunk's inputs are read (the stages are the rows' now)
		split_state();
		__syncthreads();
		const int g = tid >> 8, gt = tid & 255;
		char *sb = sms + g * STAGE;
		__nv_bfloat16 *Qs = (__nv_bfloat16 *)sb, *Ks = Qs + GC * KP, *Vs = Ks + GC * KP;
		__nv_bfloat16 *Ts = Vs + GC * VW, *Ms = Ts + GC * TP;
		float *F = (float *)(Ms + GC * TP);
		__nv_bfloat16 *Rg = g ? Dk : Rs, *Dg = g ? D2 : Ds;
		auto gbar = [&]() { asm volatile("bar.sync %0, 256;\n" ::"r"(1 + g) : "memory"); };
		// The group's 256 threads load a row into stage g as two copy groups: loadA its q, k, 64 columns of v and
		// factors (issued once the row before has read its own: after its R), loadB its T and M (issued when the
		// row before is done), so that a row's loads run under the products of the row before.
		auto loadA = [&](const GdnItem &it) {
			const __nv_bfloat16 *row0 = qkv + (size_t)it.t0 * width;
			{ // q and k: 32 pieces a row, rows gt / 32 + 8j
				const int tr = gt >> 5, which = (gt >> 4) & 1, d8 = (gt & 15) * 8;
				const __nv_bfloat16 *src = row0 + (size_t)which * hk * GDK + (size_t)kh * GDK + d8, *q = src + (size_t)tr * width;
				__nv_bfloat16 *dst = (which ? Ks : Qs) + tr * KP + d8;
#pragma unroll
				for (int j = 0; j < GC / 8; j++, q += 8 * width) {
					const bool ok = tr + 8 * j < it.len;
					cp16(dst + 8 * j * KP, ok ? q : src, ok);
				}
			}
			{ // v: 8 pieces a row, rows gt / 8 + 32j
				const int tr = gt >> 3, d8 = (gt & 7) * 8;
				const __nv_bfloat16 *src = row0 + 2 * (size_t)hk * GDK + (size_t)h * dv + cb0 + d8;
#pragma unroll
				for (int j = 0; j < 2; j++) {
					const int t = tr + 32 * j;
					const bool ok = t < it.len;
					cp16(Vs + t * VW + d8, ok ? src + (size_t)t * width : src, ok);
				}
			}
			const char *wp = work + ((size_t)it.ck * hv + h) * GDN_WORK;
			if (gt < 5 * GC / 4) cp16(F + 4 * gt, wp + 2 * GC * GC * 2 + 16 * gt, true);
			cp_commit();
		};
		auto loadB = [&](const GdnItem &it) {
			const char *wp = work + ((size_t)it.ck * hv + h) * GDN_WORK;
			const int nr = 16 * ((it.len + 15) >> 4);
			{ // T and M: 8 pieces a row
				const int tr = gt >> 3, d8 = (gt & 7) * 8;
#pragma unroll
				for (int j = 0; j < 4; j++) {
					const int m = j >> 1, t = tr + 32 * (j & 1);
					if (t < nr) cp16(Ts + m * GC * TP + t * TP + d8, wp + (size_t)m * GC * GC * 2 + (t * GC + d8) * 2, true);
				}
			}
			cp_commit();
		};
		GdnItem it = item(nch + g), nx = item(nch + g + 2);
		if (g < sd.nrows) {
			loadA(it);
			loadB(it);
		}
		for (int r = g; r < sd.nrows; r += 2, it = nx, nx = item(nch + r + 2)) {
			cp_wait<1>(); // this row's q, k, v and factors (its T and M may still be on their way)
			gbar();
			const int t0 = it.t0, len = it.len, nb = (len + 15) >> 4;
			const bool live = mw < nb;
			const int ta = 16 * mw + gq, tb = ta + 8;
			const float fq0 = F[2 * GC + ta], fq1 = F[2 * GC + tb]; // read now: the next row's factors come after R
			float P[2][2][4] = {}; // [hh][n][e]
			if (live) {
				const float fa0 = F[ta], fa1 = F[tb], fb0 = F[GC + ta], fb1 = F[GC + tb];
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					const int cs = 32 * hh + 16 * dh; // this warp's 16 columns in the block's 64
					float X[2][4] = {};
					products(Ks, Qs, cs, X, P[hh]);
#pragma unroll
					for (int n = 0; n < 2; n++) { // R = fb·V − fa·X
						const int col = cs + 8 * n + 2 * qq;
						const float2 v0 = __bfloat1622float2(*(const __nv_bfloat162 *)(Vs + ta * VW + col));
						const float2 v1 = __bfloat1622float2(*(const __nv_bfloat162 *)(Vs + tb * VW + col));
						*(uint32_t *)(Rg + ta * VW + col) = pack2(fb0 * v0.x - fa0 * X[n][0], fb0 * v0.y - fa0 * X[n][1]);
						*(uint32_t *)(Rg + tb * VW + col) = pack2(fb1 * v1.x - fa1 * X[n][2], fb1 * v1.y - fa1 * X[n][3]);
					}
				}
			}
			cp_wait<0>(); // T and M
			gbar();
			if (r + 2 < sd.nrows) loadA(nx); // q, k, v and the factors of this row are read
			if (live) { // Δ = T R
#pragma unroll
				for (int hh = 0; hh < 2; hh++) {
					const int cs = 32 * hh + 16 * dh;
					float D[2][4] = {};
					for (int kk = 0; kk <= mw; kk++) {
						uint32_t a[4], b[4];
						ldsm4(a, Ts + (16 * mw + (lane & 15)) * TP + 16 * kk + (lane >> 4) * 8);
						ldsm4t(b, Rg + (16 * kk + lr + (li & 1) * 8) * VW + cs + (li >> 1) * 8);
						mma16816(D[0], a, b[0], b[1]);
						mma16816(D[1], a, b[2], b[3]);
					}
#pragma unroll
					for (int n = 0; n < 2; n++) {
						const int col = cs + 8 * n + 2 * qq;
						*(uint32_t *)(Dg + ta * VW + col) = pack2(D[n][0], D[n][1]);
						*(uint32_t *)(Dg + tb * VW + col) = pack2(D[n][2], D[n][3]);
					}
				}
			}
			gbar();
			if (live) { // O = fq·P + M Δ
#pragma unroll
				for (int hh = 0; hh < 2; hh++) outputs(Ms, Dg, 32 * hh + 16 * dh, P[hh], fq0, fq1, t0, len);
			}
			gbar(); // T, M and the group's buffers are free for its next row
			if (r + 2 < sd.nrows) loadB(nx);
		}
	}
}

extern "C" __global__ void __launch_bounds__(256, 1) gdn_state_ns2(void *o, int odt, const __nv_bfloat16 *qkv,
                                                                   const GdnSeg *desc, const int32_t *base,
                                                                   const int32_t *rows, int hk, int hv, int dv,
                                                                   const char *work) {
	KEV_GRID_DEP();
	gdn_state<2, 1>(o, odt, qkv, desc, base, rows, hk, hv, dv, work, 0);
}

extern "C" __global__ void __launch_bounds__(256, 2) gdn_state_ns1(void *o, int odt, const __nv_bfloat16 *qkv,
                                                                   const GdnSeg *desc, const int32_t *base,
                                                                   const int32_t *rows, int hk, int hv, int dv,
                                                                   const char *work) {
	KEV_GRID_DEP();
	gdn_state<1, 1>(o, odt, qkv, desc, base, rows, hk, hv, dv, work, 0);
}

// gdn_state_w2: grid (dv/64, hv, segments), 512 threads: two groups of 8 warps on 64 value columns, sharing each
// chunk's loads and barriers, the next chunk loaded while one runs (one block per multiprocessor); with pairs set,
// then the rows two at a time, one a group on all 64 columns (else one at a time as the chunks); the same bits as
// gdn_state_ns{1,2} either way.
extern "C" __global__ void __launch_bounds__(512, 1) gdn_state_w2(void *o, int odt, const __nv_bfloat16 *qkv,
                                                                  const GdnSeg *desc, const int32_t *base,
                                                                  const int32_t *rows, int hk, int hv, int dv,
                                                                  const char *work, int pairs) {
	KEV_GRID_DEP();
	gdn_state<2, 2>(o, odt, qkv, desc, base, rows, hk, hv, dv, work, pairs);
}
