// Causal grouped-query attention over a cached prefix and stacked segments, fp32 online softmax (one pass over the
// keys, rescaling the running sum and output whenever the maximum grows).
#include "common.cuh"

#define ATTN_MAXD 256

// One warp per (query row t, head h), lane l holding dims l, l+32, ... of the query and the output. Row t sees the
// P prefix rows of kp/vp and the rows segStart[t] … t of k/v; query head h reads key/value head h / (H / KV).
// q, o [N, H·D]; k, v [N, KV·D]; kp, vp [P, KV·D] (null when P = 0). D ≤ 256.
extern "C" __global__ void attention_fwd(void *o, int odt, const void *q, int qdt, const void *k, int kdt,
                                         const void *v, int vdt, const void *kp, int kpdt, const void *vp, int vpdt,
                                         const int32_t *segStart, int N, int P, int H, int KV, int D, float scale) {
	KEV_GRID_DEP();
	const int lane = threadIdx.x & 31;
	const int job = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (job >= N * H) return;
	const int t = job / H, h = job % H;
	const int kh = h / (H / KV);
	const int kvw = KV * D;
	constexpr int E = ATTN_MAXD / 32;
	float qv[E], acc[E];
#pragma unroll
	for (int e = 0; e < E; e++) {
		int i = lane + 32 * e;
		qv[e] = i < D ? ld(q, qdt, (size_t)t * H * D + (size_t)h * D + i) * scale : 0.f;
		acc[e] = 0.f;
	}
	float m = -INFINITY, l = 0.f;
	const int s0 = segStart[t];
	const int nk = P + (t - s0 + 1);
	for (int j = 0; j < nk; j++) {
		const void *kb, *vb;
		int kbdt, vbdt;
		size_t row;
		if (j < P)
			kb = kp, vb = vp, kbdt = kpdt, vbdt = vpdt, row = j;
		else
			kb = k, vb = v, kbdt = kdt, vbdt = vdt, row = s0 + (j - P);
		const size_t base = row * kvw + (size_t)kh * D;
		float s = 0.f;
#pragma unroll
		for (int e = 0; e < E; e++) {
			int i = lane + 32 * e;
			if (i < D) s += qv[e] * ld(kb, kbdt, base + i);
		}
		s = wsum(s);
		float mn = fmaxf(m, s);
		float corr = expf(m - mn), p = expf(s - mn);
		l = l * corr + p;
#pragma unroll
		for (int e = 0; e < E; e++) {
			int i = lane + 32 * e;
			if (i < D) acc[e] = acc[e] * corr + p * ld(vb, vbdt, base + i);
		}
		m = mn;
	}
	const float inv = 1.f / l;
#pragma unroll
	for (int e = 0; e < E; e++) {
		int i = lane + 32 * e;
		if (i < D) st(o, odt, (size_t)t * H * D + (size_t)h * D + i, acc[e] * inv);
	}
}
