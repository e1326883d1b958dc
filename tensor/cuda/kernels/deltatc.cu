// The gated delta rule in its chunked (WY/UT) form on tensor cores: mma.sync m16n8k8 with TF32 operands and fp32
// accumulation, the state S and every sum in fp32.
//
// Per segment, value head h (key head h/(hv/hk)) and chunk of C ≤ 64 tokens, with lg_t = Σ_{s≤t} g_s inside the
// chunk (γ_t = exp(lg_t); ratios γ_t/γ_s are always exp(lg_t − lg_s), never a division):
//   A[t,s] = β_t (k̂_t·k̂_s) γ_t/γ_s (s < t),  T = (I + A)⁻¹,  R = diag(β)(V − diag(γ) K̂ S),  U = T R,
//   O = diag(γ) Q̂ S + M U with M[t,s] = (q̂_t·k̂_s) γ_t/γ_s (s ≤ t),  S ← γ_C S + K̂ᵀ diag(γ_C/γ_s) U.
// T comes from a blocked forward substitution in fp32 on the CUDA cores: the four 16×16 diagonal blocks by
// columns (one lane per column), then block rows 1, 2, 3 as T_ij = −T_ii Σ_{k=j}^{i−1} A_ik T_kj.
//
// A block of 8 warps owns CW value columns (blockIdx.x) of one value head (blockIdx.y) of one segment
// (blockIdx.z) and runs its chunks in order, the CW columns of the state in shared memory. The intra-chunk
// products (K̂K̂ᵀ, Q̂K̂ᵀ, T) are recomputed by each column slice. Rows continuing a cached state only read it; the
// final state is written when the descriptor's b is not null.
#include "common.cuh"

// SegDesc describes one segment of a batched call (the layout of segDesc in batched.go): rows start … start+len−1;
// delta rule: initial state a (type dt, null: zero) and final state b (fp32, null: not stored).
struct __align__(8) SegDesc {
	int32_t start, len, p, dt, first, dtb;
	const void *a;
	void *b;
};

#define TC_C 64   // tokens per chunk
#define TC_SA 68  // row stride of the 64×64 matrices A, T, M (≡ 4 mod 32: conflict-free A fragments)
#define TC_SX 52  // row stride of the 16×48 scratch of the block solve

// tf32 rounds x to TF32 (round to nearest, ties away), as the tensor cores read it.
__device__ __forceinline__ uint32_t tf32(float x) {
	uint32_t r;
	asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
	return r;
}
__device__ __forceinline__ float tf32f(float x) { return __uint_as_float(tf32(x)); }
__device__ __forceinline__ uint32_t bits(float x) { return __float_as_uint(x); }

// mma8 accumulates c[16×8] += a[16×8]·b[8×8] (TF32 in, fp32 accumulate). Fragments (g = lane/4, t = lane%4):
// a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k t, n g), b1 (k t+4, n g); c0,c1 (g, 2t, 2t+1),
// c2,c3 (g+8, 2t, 2t+1).
__device__ __forceinline__ void mma8(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
	asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	             "{%0,%1,%2,%3};\n"
	             : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// deltaTCShared is the dynamic shared memory of deltatc<DK, CW> in bytes (mirrored by deltaTCShared in deltatc.go).
template <int DK, int CW> constexpr int deltaTCShared() {
	return 4 * (2 * TC_C * (DK + 4) + TC_C * (CW + 8) + (CW + 8 <= DK + 4 ? 0 : TC_C * (CW + 8)) + 3 * TC_C * TC_SA +
	            16 * TC_SX + DK * (CW + 8) + 4 * TC_C);
}

template <int DK, int CW>
__device__ __forceinline__ void deltatc(void *o, int odt, const void *qkv, int xdt, const void *g, int gdt,
                                        const void *beta, int bdt, const SegDesc &sd, int hk, int hv, int dv) {
	constexpr int SK = DK + 4;             // row stride of q̂, k̂ (≡ 4 mod 32)
	constexpr int SV = CW + 8;             // row stride of R, U and S (≡ 8 mod 32: conflict-free B fragments)
	constexpr int NW = 8;                  // warps
	constexpr int NH = CW / 16;            // n tiles per warp in the [C × CW] products (two warps per m tile)
	constexpr int MT = DK / 16;            // m tiles of the state update
	constexpr int NS = (CW / 8) / (NW / MT); // n tiles per warp in the state update
	extern __shared__ __align__(16) float smt[];
	float *Qs = smt;                       // [C][SK] q̂ (TF32)
	float *Ks = Qs + TC_C * SK;            // [C][SK] k̂ (TF32)
	float *Vs = Ks + TC_C * SK;            // [C][SV] v, then R (TF32)
	float *Us = (SV <= SK) ? Qs : Vs + TC_C * SV; // [C][SV] U (TF32), over q̂ when it fits
	float *As = Vs + TC_C * SV + (SV <= SK ? 0 : TC_C * SV); // [C][SA] A (fp32)
	float *Ms = As + TC_C * TC_SA;         // [C][SA] M (TF32)
	float *Ts = Ms + TC_C * TC_SA;         // [C][SA] T (fp32)
	float *Xs = Ts + TC_C * TC_SA;         // [16][SX] solve scratch
	float *Ss = Xs + 16 * TC_SX;           // [DK][SV] state columns (fp32)
	float *lg = Ss + DK * SV;              // [C] cumulative log decay
	float *bt = lg + TC_C;                 // [C] β
	float *gm = bt + TC_C;                 // [C] γ_t
	float *df = gm + TC_C;                 // [C] γ_C/γ_t

	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
	const int c0 = blockIdx.x * CW;
	const int h = blockIdx.y;
	const int kh = h / (hv / hk);
	const size_t width = 2 * (size_t)hk * DK + (size_t)hv * dv;
	const size_t ow = (size_t)hv * dv;
	const int len = sd.len;
	float *final = (float *)sd.b;
	const float qscale = rsqrtf((float)DK);

	for (int idx = tid; idx < DK * CW; idx += 32 * NW) {
		const int i = idx / CW, c = idx % CW;
		Ss[i * SV + c] = sd.a ? ld(sd.a, sd.dt, ((size_t)h * DK + i) * dv + c0 + c) : 0.f;
	}
	for (int ch = 0; ch < len; ch += TC_C) {
		const int nt = min(TC_C, len - ch);
		const int np = (nt + 15) & ~15; // rows in m tiles
		const size_t r0 = (size_t)sd.start + ch;
		const bool upd = ch + TC_C < len || final; // the state is needed after this chunk
		__syncthreads();                           // the previous chunk's shared memory is no longer read
		for (int idx = tid; idx < np * DK; idx += 32 * NW) {
			const int t = idx / DK, i = idx % DK;
			float a = 0.f, b = 0.f;
			if (t < nt) {
				const size_t off = (r0 + t) * width + (size_t)kh * DK + i;
				a = ld(qkv, xdt, off);
				b = ld(qkv, xdt, off + (size_t)hk * DK);
			}
			Qs[t * SK + i] = a;
			Ks[t * SK + i] = b;
		}
		for (int idx = tid; idx < np * CW; idx += 32 * NW) {
			const int t = idx / CW, c = idx % CW;
			Vs[t * SV + c] = t < nt ? ld(qkv, xdt, (r0 + t) * width + 2 * (size_t)hk * DK + (size_t)h * dv + c0 + c) : 0.f;
		}
		if (warp == 0) { // cumulative log decay: inclusive scan of g over the chunk (pads: g = 0, β = 0)
			float x0 = lane < nt ? ld(g, gdt, (r0 + lane) * hv + h) : 0.f;
			float x1 = lane + 32 < nt ? ld(g, gdt, (r0 + lane + 32) * hv + h) : 0.f;
			bt[lane] = lane < nt ? ld(beta, bdt, (r0 + lane) * hv + h) : 0.f;
			bt[lane + 32] = lane + 32 < nt ? ld(beta, bdt, (r0 + lane + 32) * hv + h) : 0.f;
#pragma unroll
			for (int d = 1; d < 32; d <<= 1) {
				const float y0 = __shfl_up_sync(0xffffffffu, x0, d), y1 = __shfl_up_sync(0xffffffffu, x1, d);
				if (lane >= d) x0 += y0, x1 += y1;
			}
			x1 += __shfl_sync(0xffffffffu, x0, 31);
			const float last = __shfl_sync(0xffffffffu, x1, 31); // pads add 0: lg of the chunk's last token
			lg[lane] = x0;
			lg[lane + 32] = x1;
			gm[lane] = expf(x0);
			gm[lane + 32] = expf(x1);
			df[lane] = expf(last - x0);
			df[lane + 32] = expf(last - x1);
		}
		__syncthreads();
		for (int t = warp; t < nt; t += NW) { // normalise q and k, round to TF32
			float sq = 0.f, sk = 0.f;
			for (int i = lane; i < DK; i += 32) {
				const float a = Qs[t * SK + i], b = Ks[t * SK + i];
				sq += a * a;
				sk += b * b;
			}
			sq = wsum(sq);
			sk = wsum(sk);
			const float rq = qscale / sqrtf(sq + 1e-6f), rk = 1.f / sqrtf(sk + 1e-6f);
			for (int i = lane; i < DK; i += 32) {
				Qs[t * SK + i] = tf32f(Qs[t * SK + i] * rq);
				Ks[t * SK + i] = tf32f(Ks[t * SK + i] * rk);
			}
		}
		__syncthreads();

		// (a) A (warps 0–3) and M (warps 4–7): the 20 lower 16×8 tiles (m tile i, n tile j ≤ 2i+1) of K̂K̂ᵀ and
		// Q̂K̂ᵀ, five per warp.
		{
			const int q = warp & 3;
			const float *Xa = warp < 4 ? Ks : Qs;
			for (int e = 5 * q; e < 5 * q + 5; e++) {
				const int mt = e < 2 ? 0 : e < 6 ? 1 : e < 12 ? 2 : 3;
				const int nj = e - (mt == 0 ? 0 : mt == 1 ? 2 : mt == 2 ? 6 : 12);
				if (16 * mt >= nt) continue;
				float acc[4] = {0.f, 0.f, 0.f, 0.f};
				const float *pa = Xa + (16 * mt + gq) * SK + tq;
				const float *pb = Ks + (8 * nj + gq) * SK + tq;
#pragma unroll 4
				for (int kk = 0; kk < DK / 8; kk++) {
					const uint32_t a[4] = {bits(pa[8 * kk]), bits(pa[8 * SK + 8 * kk]), bits(pa[8 * kk + 4]),
					                       bits(pa[8 * SK + 8 * kk + 4])};
					mma8(acc, a, bits(pb[8 * kk]), bits(pb[8 * kk + 4]));
				}
#pragma unroll
				for (int x = 0; x < 4; x++) {
					const int r = 16 * mt + gq + 8 * (x >> 1), s = 8 * nj + 2 * tq + (x & 1);
					if (warp < 4)
						As[r * TC_SA + s] = s < r ? bt[r] * acc[x] * expf(lg[r] - lg[s]) : 0.f;
					else
						Ms[r * TC_SA + s] = s <= r ? tf32f(acc[x] * expf(lg[r] - lg[s])) : 0.f;
				}
			}
		}
		// (b) K̂S and Q̂S: warp → m tile warp&3, n tiles NH·(warp>>2) …; R = β(V − γ K̂S) over V, O = γ Q̂S kept.
		const int mt = warp & 3, nb = (warp >> 2) * NH;
		const bool live = 16 * mt < nt;
		const int ra = 16 * mt + gq, rb = ra + 8;
		float oacc[NH][4];
#pragma unroll
		for (int j = 0; j < NH; j++) oacc[j][0] = oacc[j][1] = oacc[j][2] = oacc[j][3] = 0.f;
		if (live) {
			float kacc[NH][4];
#pragma unroll
			for (int j = 0; j < NH; j++) kacc[j][0] = kacc[j][1] = kacc[j][2] = kacc[j][3] = 0.f;
			const float *pk = Ks + ra * SK + tq, *pq = Qs + ra * SK + tq;
#pragma unroll 2
			for (int kk = 0; kk < DK / 8; kk++) {
				const uint32_t ak[4] = {bits(pk[8 * kk]), bits(pk[8 * SK + 8 * kk]), bits(pk[8 * kk + 4]),
				                        bits(pk[8 * SK + 8 * kk + 4])};
				const uint32_t aq[4] = {bits(pq[8 * kk]), bits(pq[8 * SK + 8 * kk]), bits(pq[8 * kk + 4]),
				                        bits(pq[8 * SK + 8 * kk + 4])};
				const float *ps = Ss + (8 * kk + tq) * SV + 8 * nb + gq;
#pragma unroll
				for (int j = 0; j < NH; j++) {
					const uint32_t b0 = tf32(ps[8 * j]), b1 = tf32(ps[4 * SV + 8 * j]);
					mma8(kacc[j], ak, b0, b1);
					mma8(oacc[j], aq, b0, b1);
				}
			}
			const float ga = gm[ra], gb = gm[rb], ba = bt[ra], bb = bt[rb];
#pragma unroll
			for (int j = 0; j < NH; j++) {
				const int c = 8 * (nb + j) + 2 * tq;
				float *va = Vs + ra * SV + c, *vb = Vs + rb * SV + c;
				va[0] = tf32f(ba * (va[0] - ga * kacc[j][0]));
				va[1] = tf32f(ba * (va[1] - ga * kacc[j][1]));
				vb[0] = tf32f(bb * (vb[0] - gb * kacc[j][2]));
				vb[1] = tf32f(bb * (vb[1] - gb * kacc[j][3]));
				oacc[j][0] *= ga;
				oacc[j][1] *= ga;
				oacc[j][2] *= gb;
				oacc[j][3] *= gb;
			}
		}
		__syncthreads();

		// (c) T = (I + A)⁻¹: diagonal 16×16 blocks, one lane per column, then block rows 1, 2, 3.
		if (warp < 4 && 16 * warp < nt && lane < 16) {
			const int b = 16 * warp, c = lane;
			float col[16];
#pragma unroll
			for (int r = 0; r < 16; r++) {
				float acc = 0.f;
#pragma unroll
				for (int m = 0; m < r; m++) acc = fmaf(As[(b + r) * TC_SA + b + m], col[m], acc);
				col[r] = r < c ? 0.f : r == c ? 1.f : -acc;
			}
#pragma unroll
			for (int r = 0; r < 16; r++) Ts[(b + r) * TC_SA + b + c] = col[r];
		}
		__syncthreads();
		for (int i = 1; 16 * i < nt; i++) {
			for (int idx = tid; idx < 256 * i; idx += 32 * NW) { // X_ij = Σ_{k=j}^{i−1} A_ik T_kj
				const int j = idx >> 8, r = (idx >> 4) & 15, c = idx & 15;
				const float *pa = As + (16 * i + r) * TC_SA;
				float acc = 0.f;
				for (int m = 16 * j; m < 16 * i; m++) acc = fmaf(pa[m], Ts[m * TC_SA + 16 * j + c], acc);
				Xs[r * TC_SX + 16 * j + c] = acc;
			}
			__syncthreads();
			for (int idx = tid; idx < 256 * i; idx += 32 * NW) { // T_ij = −T_ii X_ij
				const int j = idx >> 8, r = (idx >> 4) & 15, c = idx & 15;
				const float *pt = Ts + (16 * i + r) * TC_SA + 16 * i;
				float acc = Xs[r * TC_SX + 16 * j + c];
				for (int m = 0; m < r; m++) acc = fmaf(pt[m], Xs[m * TC_SX + 16 * j + c], acc);
				Ts[(16 * i + r) * TC_SA + 16 * j + c] = -acc;
			}
			__syncthreads();
		}

		// (d) U = T R (k̂ rows up to the m tile's end: T is lower triangular).
		if (live) {
			float uacc[NH][4];
#pragma unroll
			for (int j = 0; j < NH; j++) uacc[j][0] = uacc[j][1] = uacc[j][2] = uacc[j][3] = 0.f;
			const float *pt = Ts + ra * TC_SA + tq;
			for (int kk = 0; kk < 2 * (mt + 1); kk++) {
				const uint32_t a[4] = {tf32(pt[8 * kk]), tf32(pt[8 * TC_SA + 8 * kk]), tf32(pt[8 * kk + 4]),
				                       tf32(pt[8 * TC_SA + 8 * kk + 4])};
				const float *pr = Vs + (8 * kk + tq) * SV + 8 * nb + gq;
#pragma unroll
				for (int j = 0; j < NH; j++) mma8(uacc[j], a, bits(pr[8 * j]), bits(pr[4 * SV + 8 * j]));
			}
#pragma unroll
			for (int j = 0; j < NH; j++) {
				const int c = 8 * (nb + j) + 2 * tq;
				Us[ra * SV + c] = tf32f(uacc[j][0]);
				Us[ra * SV + c + 1] = tf32f(uacc[j][1]);
				Us[rb * SV + c] = tf32f(uacc[j][2]);
				Us[rb * SV + c + 1] = tf32f(uacc[j][3]);
			}
		}
		__syncthreads();

		// (e) O = γ Q̂S + M U, written for the chunk's tokens.
		if (live) {
			const float *pm = Ms + ra * TC_SA + tq;
			for (int kk = 0; kk < 2 * (mt + 1); kk++) {
				const uint32_t a[4] = {bits(pm[8 * kk]), bits(pm[8 * TC_SA + 8 * kk]), bits(pm[8 * kk + 4]),
				                       bits(pm[8 * TC_SA + 8 * kk + 4])};
				const float *pu = Us + (8 * kk + tq) * SV + 8 * nb + gq;
#pragma unroll
				for (int j = 0; j < NH; j++) mma8(oacc[j], a, bits(pu[8 * j]), bits(pu[4 * SV + 8 * j]));
			}
#pragma unroll
			for (int j = 0; j < NH; j++) {
				const size_t c = (size_t)h * dv + c0 + 8 * (nb + j) + 2 * tq;
				if (ra < nt) {
					st(o, odt, (r0 + ra) * ow + c, oacc[j][0]);
					st(o, odt, (r0 + ra) * ow + c + 1, oacc[j][1]);
				}
				if (rb < nt) {
					st(o, odt, (r0 + rb) * ow + c, oacc[j][2]);
					st(o, odt, (r0 + rb) * ow + c + 1, oacc[j][3]);
				}
			}
		}

		// (f) S ← γ_C S + (K̂ diag(γ_C/γ))ᵀ U: warp → m tile warp % MT of the state rows, NS n tiles; each warp
		// reads and writes only its own state tiles.
		if (upd) {
			const int ms = warp % MT, ns = (warp / MT) * NS;
			const int ia = 16 * ms + gq, ib = ia + 8;
			const float gC = gm[TC_C - 1]; // pads have g = 0: γ of the chunk's last token
			float sacc[NS][4];
#pragma unroll
			for (int j = 0; j < NS; j++) {
				const int c = 8 * (ns + j) + 2 * tq;
				sacc[j][0] = gC * Ss[ia * SV + c];
				sacc[j][1] = gC * Ss[ia * SV + c + 1];
				sacc[j][2] = gC * Ss[ib * SV + c];
				sacc[j][3] = gC * Ss[ib * SV + c + 1];
			}
			for (int kk = 0; kk < np / 8; kk++) {
				const int ta = 8 * kk + tq, tb = ta + 4;
				const float da = df[ta], db = df[tb];
				const uint32_t a[4] = {tf32(Ks[ta * SK + ia] * da), tf32(Ks[ta * SK + ib] * da),
				                       tf32(Ks[tb * SK + ia] * db), tf32(Ks[tb * SK + ib] * db)};
				const float *pu = Us + ta * SV + 8 * ns + gq;
#pragma unroll
				for (int j = 0; j < NS; j++) mma8(sacc[j], a, bits(pu[8 * j]), bits(pu[4 * SV + 8 * j]));
			}
#pragma unroll
			for (int j = 0; j < NS; j++) {
				const int c = 8 * (ns + j) + 2 * tq;
				Ss[ia * SV + c] = sacc[j][0];
				Ss[ia * SV + c + 1] = sacc[j][1];
				Ss[ib * SV + c] = sacc[j][2];
				Ss[ib * SV + c + 1] = sacc[j][3];
			}
		}
	}
	if (final) {
		__syncthreads();
		for (int idx = tid; idx < DK * CW; idx += 32 * NW) {
			const int i = idx / CW, c = idx % CW;
			final[((size_t)h * DK + i) * dv + c0 + c] = Ss[i * SV + c];
		}
	}
}

// deltatc_dkD_cwW: grid (dv/W, hv, segments), 256 threads, deltaTCShared<D, W>() bytes of dynamic shared memory;
// segment z = blockIdx.z is desc[z]. qkv [N, 2·hk·D + hv·dv] = [Q | K | V], g and beta [N, hv], o [N, hv·dv].
#define DELTA_TC(DK, CW)                                                                                             \
	extern "C" __global__ void __launch_bounds__(256, 1) deltatc_dk##DK##_cw##CW(                                 \
	    void *o, int odt, const void *qkv, int xdt, const void *g, int gdt, const void *beta, int bdt,              \
	    const SegDesc *desc, int hk, int hv, int dv) {                                                              \
		const SegDesc sd = desc[blockIdx.z];                                                                   \
		deltatc<DK, CW>(o, odt, qkv, xdt, g, gdt, beta, bdt, sd, hk, hv, dv);                                  \
	}
DELTA_TC(64, 32)
DELTA_TC(64, 64)
DELTA_TC(128, 32)
DELTA_TC(128, 64)
