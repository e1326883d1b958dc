// The gated delta rule in its recurrent form, fp32 state. Column j of a head's state S [d_k, d_v] evolves on its
// own given the token's k̂, q̂, β and decay, so a block (one warp) owns 32 columns of one value head of one segment
// and keeps them in shared memory, with thread j holding column j's updates.
#include "common.cuh"

// Per token t of the segment (rows segStart[z] … segStart[z]+segLen[z]−1), value head h (key head h/(hv/hk)):
//   q̂ = q/sqrt(Σq² + 1e-6)/sqrt(dk), k̂ = k/sqrt(Σk² + 1e-6), a = exp(g[t, h])
//   r_j = a·Σ_i S[i, j] k̂_i,  δ_j = β[t, h](v_j − r_j),  S[i, j] ← a·S[i, j] + k̂_i δ_j,  o_j = Σ_i S[i, j] q̂_i.
// qkv [N, 2·hk·dk + hv·dv] = [Q | K | V]; g, beta [N, hv]; s0 [hv, dk, dv] (null: zero); o [N, hv·dv];
// final [hv, dk, dv] fp32 (null: not stored). Grid (ceil(dv/32), hv, segments), 32 threads, shared
// (32·dk + 2·dk)·4 bytes.
extern "C" __global__ void delta_rule_rec(void *o, int odt, float *final, const void *qkv, int xdt, const void *g,
                                          int gdt, const void *beta, int bdt, const void *s0, int sdt,
                                          const int32_t *segStart, const int32_t *segLen, int hk, int hv, int dk,
                                          int dv) {
	extern __shared__ float sm[];
	float *S = sm;             // [dk][32]
	float *qs = sm + 32 * dk;  // [dk]
	float *ks = qs + dk;       // [dk]
	const int lane = threadIdx.x;
	const int col = blockIdx.x * 32 + lane;
	const int h = blockIdx.y, seg = blockIdx.z;
	const int kh = h / (hv / hk);
	const bool on = col < dv;
	const size_t width = 2 * (size_t)hk * dk + (size_t)hv * dv;
	for (int i = 0; i < dk; i++) S[i * 32 + lane] = (s0 && on) ? ld(s0, sdt, ((size_t)h * dk + i) * dv + col) : 0.f;
	const float qscale = rsqrtf((float)dk);
	const int t0 = segStart[seg], t1 = t0 + segLen[seg];
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
