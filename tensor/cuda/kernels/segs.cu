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
	KEV_GRID_DEP();
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
	KEV_GRID_DEP();
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
		st(y, ydt, i, silu_fast(acc));
	}
}

// ConvSegs carries up to CONV_PSEGS segment descriptors as a kernel parameter, so that a call with few segments
// uploads nothing.
#define CONV_PSEGS 16
struct ConvSegs {
	SegDesc d[CONV_PSEGS];
};

// conv_start is the first row of segment i (from desc, or from ps when desc is null; ps is __grid_constant__: read
// in place, not copied per thread).
__device__ __forceinline__ int conv_start(const SegDesc *desc, const ConvSegs &ps, int i) {
	return desc != nullptr ? __ldg(&desc[i].start) : ps.d[i].start;
}

// conv_seg returns the segment of row t: the last of the nseg segments starting at or before t (an empty segment
// starts where the next one does, so it is never the last such).
__device__ __forceinline__ int conv_seg(const SegDesc *desc, int nseg, const ConvSegs &ps, int t) {
	int lo = 0, hi = nseg - 1;
	while (lo < hi) {
		const int mid = (lo + hi + 1) >> 1;
		if (conv_start(desc, ps, mid) <= t)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

// conv_seg_warp is conv_seg for the uploaded descriptors (desc not null), found by the active lanes of a warp
// together, all with the same t: each round the L lanes probe L starts spread over the range left and a ballot
// keeps the last one at or before t, so that 448 segments take two dependent loads, not nine. The active lanes
// must be lanes 0 … L − 1 (the lanes past the channels have returned); a lane alone cannot narrow the range that
// way and searches as conv_seg does.
__device__ __forceinline__ int conv_seg_warp(const SegDesc *desc, int nseg, const ConvSegs &ps, int t) {
	const unsigned am = __activemask();
	const int L = __popc(am), lane = threadIdx.x & 31;
	if (L < 2) return conv_seg(desc, nseg, ps, t);
	int lo = 0, hi = nseg - 1; // the segment is in [lo, hi]; segment lo starts at or before t
	for (;;) {
		const int step = (hi - lo + L) / L; // ⌈(hi − lo + 1) / L⌉
		const int i = lo + lane * step;
		const bool ok = i <= hi && __ldg(&desc[i].start) <= t;
		const unsigned m = __ballot_sync(am, ok);
		lo += (31 - __clz(m)) * step;
		if (step == 1) return lo;
		hi = min(hi, lo + step - 1);
	}
}

// bf16at returns element e of the 8 bf16 in v, widened to fp32 (exactly, as __bfloat162float).
__device__ __forceinline__ float bf16at(const uint4 &v, int e) {
	const uint32_t u = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
	return __uint_as_float((e & 1) ? (u & 0xffff0000u) : (u << 16));
}

#define CONV_RB 4  // rows a thread (conv1d_silu_segs_k*)
#define CONV_WY 4  // thread rows a block
#define CONV_VX 32 // threads a row of the block, 8 channels each

// conv_weights_block stages the weights of the block's channels cb = 8·CONV_VX·blockIdx.x … (at most 8·CONV_VX of
// them, fewer at the end of C) in ws, widened exactly to fp32: channel cb + 8v + e, tap j at ws[v·(8K + 4) + eK + j],
// the rows of 8K weights that thread v reads padded by 4 floats, so that its 16-byte reads fall on distinct banks.
// The block's threads load the weights coalesced (16-byte vectors for fp32 and bf16), once a block instead of 8K
// scattered values a thread; every thread of the block must call it (it ends with a barrier).
template <int K>
__device__ __forceinline__ void conv_weights_block(float *ws, const void *w, int wdt, int C) {
	constexpr int NT = CONV_VX * CONV_WY, RW = 8 * K; // threads, weights a row of ws
	const int tid = threadIdx.y * CONV_VX + threadIdx.x, cb = blockIdx.x * CONV_VX * 8;
	const int n = min(CONV_VX * 8, C - cb) * K; // a multiple of 8K: C is a multiple of 8
	if (wdt == DT_F32) {
		const float4 *w4 = (const float4 *)((const float *)w + (size_t)cb * K);
		for (int g = tid; g < n / 4; g += NT) {
			const int i = 4 * g;
			*(float4 *)(ws + i + 4 * (i / RW)) = w4[g];
		}
	} else if (wdt == DT_BF16) {
		const uint4 *w8 = (const uint4 *)((const __nv_bfloat16 *)w + (size_t)cb * K);
		for (int g = tid; g < n / 8; g += NT) {
			const int i = 8 * g; // 8 weights of one row: RW is a multiple of 8
			float f[8];
			unpack8(w8[g], f);
			float *d = ws + i + 4 * (i / RW);
			*(float4 *)d = make_float4(f[0], f[1], f[2], f[3]);
			*(float4 *)(d + 4) = make_float4(f[4], f[5], f[6], f[7]);
		}
	} else {
		for (int i = tid; i < n; i += NT) ws[i + 4 * (i / RW)] = ld(w, wdt, (size_t)cb * K + i);
	}
	__syncthreads();
}

// conv_row returns the 8 outputs of one row from its window (win[j]: input row t − K + 1 + j, 8 bf16 channels).
// Same bits as conv1d_silu_segs: each window value and weight is the same element widened exactly to fp32, and
// each output is acc = 0, then acc += w[c, j]·x_j for j = 0 … K − 1 (the same expression, so the same fused
// multiply-adds in the same order), then silu_fast(acc), rounded once to nearest even.
template <int K>
__device__ __forceinline__ uint4 conv_row(const float (&wv)[K][8], const uint4 (&win)[K]) {
	uint4 o;
	__nv_bfloat162 *h = (__nv_bfloat162 *)&o;
#pragma unroll
	for (int e = 0; e < 8; e += 2) {
		float s[2];
#pragma unroll
		for (int u = 0; u < 2; u++) {
			float acc = 0.f;
#pragma unroll
			for (int j = 0; j < K; j++) acc += wv[j][e + u] * bf16at(win[j], e + u);
			s[u] = silu_fast(acc);
		}
		h[e / 2] = __floats2bfloat162_rn(s[0], s[1]);
	}
	return o;
}

// conv1d_silu_segs_k{2,3,4} are conv1d_silu_segs for bf16 x, y and histories (cached states, rows of x), C, ldx
// and the histories' row strides multiples of 8, x, y and the histories 16-byte aligned, and that kernel width K.
// Block (CONV_VX, CONV_WY): thread (v, r) owns the 8 channels c = 8·(CONV_VX·blockIdx.x + v) … c + 7, so a warp
// reads and writes 512 contiguous bytes of a row, and consecutive blocks the rest of the same rows. Rows are
// computed once each, by one of two kinds of block:
// - blockIdx.y < hb = ceil(nseg·(K − 1)/CONV_WY): the first K − 1 rows of every segment, the only rows whose
//   window reaches into a history; thread row h computes row j = h mod (K − 1) of segment h div (K − 1) (none
//   when the segment is shorter), its window the history rows j … K − 2 (16-byte vectors; zero where hist gives
//   zero) and rows of x. Its segment is known, so nothing is searched.
// - the others: CONV_RB consecutive rows a thread. It issues all its loads first (the CONV_RB + K − 1 input rows and
//   the 8·K weights), finds the segment of its first row (binary search in the parameter or the uploaded
//   descriptors: the warp's lanes together, conv_seg_warp), follows the segment boundaries row by row and skips the
//   rows of the first kind.
// Loads wait only for the segment descriptors (the row's own, or the search), never for each other; the weights are
// staged once a block in shared memory (conv_weights_block) while the rows load. The bits are those of
// conv1d_silu_segs (see conv_row). Grid (ceil(C/8/CONV_VX), hb + ceil(N / (CONV_RB·CONV_WY))).
template <int K>
__device__ __forceinline__ void conv_v8(__nv_bfloat16 *y, const __nv_bfloat16 *x, int ldx, const void *w, int wdt,
                                        const SegDesc *desc, int nseg, const ConvSegs &ps, int N, int C) {
	__shared__ __align__(16) float ws[CONV_VX * (8 * K + 4)];
	const int c = (blockIdx.x * CONV_VX + threadIdx.x) * 8;
	bool live = c < C; // this thread has a row to compute (it still joins the block's barrier)
	const uint4 zero = make_uint4(0, 0, 0, 0);
	const int hb = (nseg * (K - 1) + CONV_WY - 1) / CONV_WY;
	uint4 raw[CONV_RB + K - 1]; // this thread's input rows t0 − K + 1 … t0 + CONV_RB − 1, or a first row's window
	int t0 = 0;
	if ((int)blockIdx.y < hb) {
		const int h = blockIdx.y * CONV_WY + threadIdx.y, j = h % (K - 1);
		live = live && h < nseg * (K - 1);
		SegDesc sd;
		if (live) {
			sd = desc != nullptr ? desc[h / (K - 1)] : ps.d[h / (K - 1)];
			live = j < sd.len;
		}
		if (live) {
			t0 = sd.start + j;
			// window row i is history row j + i (zero where hist gives zero) while j + i < K − 1, then row t0 − K + 1 + i
#pragma unroll
			for (int i = 0; i < K; i++) {
				const int hr = j + i;
				if (hr >= K - 1)
					raw[i] = *(const uint4 *)(x + (size_t)(t0 - (K - 1) + i) * ldx + c);
				else if (sd.a != nullptr && hr >= sd.first)
					raw[i] = __ldg((const uint4 *)((const __nv_bfloat16 *)sd.a + (size_t)(sd.p + hr) * sd.dtb + c));
				else
					raw[i] = zero;
			}
		}
	} else {
		t0 = ((blockIdx.y - hb) * CONV_WY + threadIdx.y) * CONV_RB;
		live = live && t0 < N;
		if (live) {
#pragma unroll
			for (int i = 0; i < CONV_RB + K - 1; i++) {
				const int src = t0 - (K - 1) + i;
				raw[i] = (src >= 0 && src < N) ? *(const uint4 *)(x + (size_t)src * ldx + c) : zero;
			}
		}
	}
	conv_weights_block<K>(ws, w, wdt, C); // while the rows are on their way
	if (!live) return;
	float wv[K][8]; // wv[j][e] = w[c + e, j]
	{
		const float4 *w4 = (const float4 *)(ws + threadIdx.x * (8 * K + 4));
#pragma unroll
		for (int q = 0; q < 2 * K; q++) {
			const float4 v = w4[q];
			const float f[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
			for (int u = 0; u < 4; u++) wv[(4 * q + u) % K][(4 * q + u) / K] = f[u];
		}
	}
	const bool firsts = (int)blockIdx.y < hb; // one row, t0, its window in raw[0 … K − 1]
	int s = 0, start = 0, next = 0x7fffffff;
	if (!firsts) {
		s = desc != nullptr ? conv_seg_warp(desc, nseg, ps, t0) : conv_seg(desc, nseg, ps, t0);
		start = conv_start(desc, ps, s);
		if (s + 1 < nseg) next = conv_start(desc, ps, s + 1);
	}
#pragma unroll
	for (int r = 0; r < CONV_RB; r++) {
		const int t = t0 + r;
		if (t >= N || (firsts && r > 0)) break;
		if (!firsts) {
			while (t >= next) {
				s++;
				start = next;
				next = s + 1 < nseg ? conv_start(desc, ps, s + 1) : 0x7fffffff;
			}
			if (t - start < K - 1) continue; // computed by the first hb blocks
		}
		uint4 win[K];
#pragma unroll
		for (int j = 0; j < K; j++) win[j] = raw[r + j];
		*(uint4 *)(y + (size_t)t * C + c) = conv_row<K>(wv, win);
	}
}
#define CONV_V8(NAME, K)                                                                                              \
	extern "C" __global__ void __launch_bounds__(CONV_VX * CONV_WY)                                                  \
	    NAME(__nv_bfloat16 *y, const __nv_bfloat16 *x, int ldx, const void *w, int wdt, const SegDesc *desc,       \
	         int nseg, int N, int C, const __grid_constant__ ConvSegs ps) {                                          \
		KEV_GRID_DEP();                                                                                           \
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
	KEV_GRID_DEP();
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
	KEV_GRID_DEP();
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
