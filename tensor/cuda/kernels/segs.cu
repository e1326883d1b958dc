// Kernels of the batched operations whose segments continue different prefixes (tensor.Batched): attention in
// fp32 (any storage types, one warp per row and head), the depthwise convolution with per-segment histories and
// the kept histories, and the pointer head's projections for many questions at once.
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

#define ATTN_MAXD 256

// attention_segs: one warp per (query row t, head h); row t of segment s = rowSeg[t] sees the desc[s].p prefix
// rows at desc[s].a / desc[s].b (type desc[s].dt) and the rows desc[s].start … t of k/v. D ≤ 256.
extern "C" __global__ void attention_segs(void *o, int odt, const void *q, int qdt, const void *k, int kdt,
                                          const void *v, int vdt, const SegDesc *desc, const int32_t *rowSeg, int N,
                                          int H, int KV, int D, float scale) {
	const int lane = threadIdx.x & 31;
	const int job = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (job >= N * H) return;
	const int t = job / H, h = job % H;
	const int kh = h / (H / KV);
	const int kvw = KV * D;
	const SegDesc sd = desc[rowSeg[t]];
	const int P = sd.p, s0 = sd.start;
	constexpr int E = ATTN_MAXD / 32;
	float qv[E], acc[E];
#pragma unroll
	for (int e = 0; e < E; e++) {
		int i = lane + 32 * e;
		qv[e] = i < D ? ld(q, qdt, (size_t)t * H * D + (size_t)h * D + i) * scale : 0.f;
		acc[e] = 0.f;
	}
	float m = -INFINITY, l = 0.f;
	const int nk = P + (t - s0 + 1);
	for (int j = 0; j < nk; j++) {
		const void *kb, *vb;
		int kbdt, vbdt;
		size_t row;
		if (j < P)
			kb = sd.a, vb = sd.b, kbdt = sd.dt, vbdt = sd.dtb, row = j;
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

// hist returns history row r (0 … K−2, oldest first) of channel c of a segment.
__device__ __forceinline__ float hist(const SegDesc &sd, int r, int c, int C) {
	if (sd.a == nullptr || r < sd.first) return 0.f;
	return ld(sd.a, sd.dt, (size_t)(sd.p + r) * C + c);
}

// conv1d_silu_segs: y[t, c] = silu(Σ_j w[c, j]·x[t−K+1+j, c]) for x, y [N, C], w [C, K]; rows before the first row
// of t's segment s = rowSeg[t] come from its history (desc[s], see hist).
extern "C" __global__ void conv1d_silu_segs(void *y, int ydt, const void *x, int xdt, const void *w, int wdt,
                                            const SegDesc *desc, const int32_t *rowSeg, int N, int C, int K) {
	const size_t n = (size_t)N * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(i / C), c = (int)(i % C);
		const SegDesc sd = desc[rowSeg[t]];
		float acc = 0.f;
		for (int j = 0; j < K; j++) {
			const int src = t - (K - 1) + j;
			const float xv = src >= sd.start ? ld(x, xdt, (size_t)src * C + c) : hist(sd, K - 1 + (src - sd.start), c, C);
			acc += ld(w, wdt, (size_t)c * K + j) * xv;
		}
		st(y, ydt, i, acc * sigm(acc));
	}
}

// ConvKeep names a kept history: segment seg's last K−1 inputs go to out ([K−1, C], type of x).
struct __align__(8) ConvKeep {
	int32_t seg, pad;
	void *out;
};

// conv_keep_segs writes, for each keep[blockIdx.y], the last K−1 rows of [history; segment rows].
extern "C" __global__ void conv_keep_segs(const void *x, int xdt, const SegDesc *desc, const ConvKeep *keep, int C,
                                          int K) {
	const ConvKeep kp = keep[blockIdx.y];
	const SegDesc sd = desc[kp.seg];
	const size_t n = (size_t)(K - 1) * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const int r = (int)(i / C), c = (int)(i % C);
		const int src = sd.len - (K - 1) + r;
		const float v = src >= 0 ? ld(x, xdt, (size_t)(sd.start + src) * C + c) : hist(sd, K - 1 + src, c, C);
		st(kp.out, xdt, i, v);
	}
}

// pointer_proj_q: the pointer head's projections for several questions, one warp per output: out[r, i] =
// W·h[rows[r]] + B with (W, B) = (Wq, Bq) for r < nq (the questions' <decide> rows) and (Wk, Bk) for the rest
// (their </opt> rows). out is fp32 [nr, dp].
extern "C" __global__ void pointer_proj_q(float *out, const void *h, int hdt, const int32_t *rows, int nr, int nq,
                                          const void *wq, int wqdt, const void *bq, int bqdt, const void *wk,
                                          int wkdt, const void *bk, int bkdt, int d, int dp) {
	const int lane = threadIdx.x & 31;
	const int o = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (o >= nr * dp) return;
	const int r = o / dp, i = o % dp;
	const bool isq = r < nq;
	const void *w = isq ? wq : wk;
	const int wdt = isq ? wqdt : wkdt;
	const size_t hb = (size_t)rows[r] * d, wb = (size_t)i * d;
	float acc = 0.f;
	for (int j = lane; j < d; j += 32) acc += ld(w, wdt, wb + j) * ld(h, hdt, hb + j);
	acc = wsum(acc);
	if (lane == 0) out[o] = acc + (isq ? ld(bq, bqdt, i) : ld(bk, bkdt, i));
}
