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

// hist returns history row r (0 … K−2, oldest first) of channel c of a segment. For the convolution, the desc's
// dtb field holds the row stride of its history a in elements (a cached state is C wide; a segment of the call is
// read in x, whose rows may be a column view of a wider matrix).
__device__ __forceinline__ float hist(const SegDesc &sd, int r, int c) {
	if (sd.a == nullptr || r < sd.first) return 0.f;
	return ld(sd.a, sd.dt, (size_t)(sd.p + r) * sd.dtb + c);
}

// conv1d_silu_segs: y[t, c] = silu(Σ_j w[c, j]·x[t−K+1+j, c]) for x [N, C] (rows ldx elements apart), y [N, C] dense,
// w [C, K]; rows before the first row of t's segment s = rowSeg[t] come from its history (desc[s], see hist).
extern "C" __global__ void conv1d_silu_segs(void *y, int ydt, const void *x, int xdt, const void *w, int wdt,
                                            const SegDesc *desc, const int32_t *rowSeg, int N, int C, int K, int ldx) {
	const size_t n = (size_t)N * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const int t = (int)(i / C), c = (int)(i % C);
		const SegDesc sd = desc[rowSeg[t]];
		float acc = 0.f;
		for (int j = 0; j < K; j++) {
			const int src = t - (K - 1) + j;
			const float xv = src >= sd.start ? ld(x, xdt, (size_t)src * ldx + c) : hist(sd, K - 1 + (src - sd.start), c);
			acc += ld(w, wdt, (size_t)c * K + j) * xv;
		}
		st(y, ydt, i, acc * sigm(acc));
	}
}

// ConvSegs carries up to CONV_PSEGS segment descriptors as a kernel parameter, so that a call with few segments
// uploads nothing.
#define CONV_PSEGS 16
struct ConvSegs {
	SegDesc d[CONV_PSEGS];
};

// conv_descs copies the nseg descriptors into shared memory: from desc when it is set, else from ps (constant
// indices: a parameter array indexed by a variable would be copied to local memory per thread).
__device__ __forceinline__ void conv_descs(SegDesc *sh, const SegDesc *desc, int nseg, const ConvSegs &ps) {
	if (desc != nullptr) {
		for (int i = threadIdx.x; i < nseg; i += blockDim.x) sh[i] = desc[i];
	} else {
#pragma unroll
		for (int i = 0; i < CONV_PSEGS; i++)
			if (threadIdx.x == i && i < nseg) sh[i] = ps.d[i];
	}
	__syncthreads();
}

// conv_seg returns the segment of row t: the last of the nseg segments starting at or before t (an empty segment
// starts where the next one does, so it is never the last such).
__device__ __forceinline__ int conv_seg(const SegDesc *sh, int nseg, int t) {
	int lo = 0, hi = nseg - 1;
	while (lo < hi) {
		const int mid = (lo + hi + 1) >> 1;
		if (sh[mid].start <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

// conv1d_silu_segs_k{2,3,4} are conv1d_silu_segs for bf16 x and y, C and ldx multiples of 8 and that kernel width
// K: a thread owns 8 channels of CONV_RB consecutive rows. The segment descriptors (from desc, or from ps when desc
// is null) are first copied to shared memory, where each thread finds its rows' segments (no per-row table). A
// thread issues all its loads first — the CONV_RB + K − 1 input rows (16 bytes each), the 8×K weights (vector
// loads for fp32 and bf16 weights) — and then computes from registers; only the first K − 1 rows of a segment
// read their history element by element. The sum runs over j = 0 … K−1 in the same order as conv1d_silu_segs, so
// both give the same bits. Grid (ceil(N/CONV_RB), ceil(C/8/128)), 128 threads, nseg·sizeof(SegDesc) bytes of
// dynamic shared memory.
#define CONV_RB 8
template <int K>
__device__ __forceinline__ void conv_v8(__nv_bfloat16 *y, const __nv_bfloat16 *x, int ldx, const void *w, int wdt,
                                        const SegDesc *desc, int nseg, const ConvSegs &ps, int N, int C) {
	extern __shared__ SegDesc sdesc[];
	const int c8 = blockIdx.y * blockDim.x + threadIdx.x;
	const int c = c8 * 8;
	const int t0 = blockIdx.x * CONV_RB, nt = min(CONV_RB, N - t0);
	constexpr int NR = CONV_RB + K - 1;
	uint4 raw[NR]; // input rows t0 − K + 1 … t0 + CONV_RB − 1 (zero outside [0, N))
	const bool on = c < C;
#pragma unroll
	for (int i = 0; i < NR; i++) {
		const int src = t0 - (K - 1) + i;
		raw[i] = (on && src >= 0 && src < N) ? *(const uint4 *)(x + (size_t)src * ldx + c) : make_uint4(0, 0, 0, 0);
	}
	float wv[K][8]; // wv[j][e] = w[c + e, j]; the 8K weights are contiguous
	if (!on) {
	} else if (wdt == DT_F32) {
		const float4 *w4 = (const float4 *)((const float *)w + (size_t)c * K);
#pragma unroll
		for (int q = 0; q < 2 * K; q++) {
			const float4 v = w4[q];
			const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
			for (int u = 0; u < 4; u++) wv[(4 * q + u) % K][(4 * q + u) / K] = f[u];
		}
	} else if (wdt == DT_BF16) {
		const uint4 *w8 = (const uint4 *)((const __nv_bfloat16 *)w + (size_t)c * K);
#pragma unroll
		for (int q = 0; q < K; q++) {
			float f[8];
			unpack8(w8[q], f);
#pragma unroll
			for (int u = 0; u < 8; u++) wv[(8 * q + u) % K][(8 * q + u) / K] = f[u];
		}
	} else {
#pragma unroll
		for (int j = 0; j < K; j++)
#pragma unroll
			for (int e = 0; e < 8; e++) wv[j][e] = ld(w, wdt, (size_t)(c + e) * K + j);
	}
	conv_descs(sdesc, desc, nseg, ps);
	if (!on) return;
	int cur = conv_seg(sdesc, nseg, t0);
	SegDesc sd = sdesc[cur];
#pragma unroll
	for (int r = 0; r < CONV_RB; r++) {
		if (r >= nt) break;
		const int t = t0 + r;
		if (cur + 1 < nseg && sdesc[cur + 1].start <= t) {
			while (cur + 1 < nseg && sdesc[cur + 1].start <= t) cur++;
			sd = sdesc[cur];
		}
		float in[K][8];
#pragma unroll
		for (int j = 0; j < K; j++) {
			const int src = t - (K - 1) + j;
			if (src >= sd.start) {
				unpack8(raw[r + j], in[j]);
			} else {
#pragma unroll
				for (int e = 0; e < 8; e++) in[j][e] = hist(sd, K - 1 + (src - sd.start), c + e);
			}
		}
		uint4 o;
		__nv_bfloat162 *h = (__nv_bfloat162 *)&o;
#pragma unroll
		for (int e = 0; e < 8; e += 2) {
			float v[2];
#pragma unroll
			for (int u = 0; u < 2; u++) {
				float acc = 0.f;
#pragma unroll
				for (int j = 0; j < K; j++) acc += wv[j][e + u] * in[j][e + u];
				v[u] = acc * sigm(acc);
			}
			h[e / 2] = __floats2bfloat162_rn(v[0], v[1]);
		}
		*(uint4 *)(y + (size_t)t * C + c) = o;
	}
}
#define CONV_V8(NAME, K)                                                                                              \
	extern "C" __global__ void __launch_bounds__(128)                                                               \
	    NAME(__nv_bfloat16 *y, const __nv_bfloat16 *x, int ldx, const void *w, int wdt, const SegDesc *desc,       \
	         int nseg, int N, int C, ConvSegs ps) {                                                                \
		conv_v8<K>(y, x, ldx, w, wdt, desc, nseg, ps, N, C);                                                   \
	}
CONV_V8(conv1d_silu_segs_k2, 2)
CONV_V8(conv1d_silu_segs_k3, 3)
CONV_V8(conv1d_silu_segs_k4, 4)

// ConvKeep names a kept history: segment seg's last K−1 inputs go to out ([K−1, C], type of x).
struct __align__(8) ConvKeep {
	int32_t seg, pad;
	void *out;
};
struct ConvKeeps {
	ConvKeep k[CONV_PSEGS];
};

// conv_keep_segs writes, for each keep blockIdx.y (from keep, or from pk when keep is null), the last K−1 rows of
// [history; segment rows]; x's rows are ldx elements apart. The descriptors come from desc, or from ps when desc
// is null (nseg ≤ CONV_PSEGS).
extern "C" __global__ void conv_keep_segs(const void *x, int xdt, const SegDesc *desc, const ConvKeep *keep, int C,
                                          int K, int ldx, int nseg, ConvSegs ps, ConvKeeps pk) {
	ConvKeep kp;
	if (keep != nullptr) {
		kp = keep[blockIdx.y];
	} else {
		kp = pk.k[0];
#pragma unroll
		for (int i = 1; i < CONV_PSEGS; i++)
			if (blockIdx.y == i) kp = pk.k[i];
	}
	SegDesc sd;
	if (desc != nullptr) {
		sd = desc[kp.seg];
	} else {
		sd = ps.d[0];
#pragma unroll
		for (int i = 1; i < CONV_PSEGS; i++)
			if (kp.seg == i) sd = ps.d[i];
	}
	const size_t n = (size_t)(K - 1) * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const int r = (int)(i / C), c = (int)(i % C);
		const int src = sd.len - (K - 1) + r;
		const float v = src >= 0 ? ld(x, xdt, (size_t)(sd.start + src) * ldx + c) : hist(sd, K - 1 + src, c);
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
