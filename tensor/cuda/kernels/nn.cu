// The backend's general kernels: every operand carries its storage type (F32, BF16 or F16) as a runtime code, all
// arithmetic is fp32, and each stored value is rounded once. Shapes are arbitrary (no alignment assumptions); the
// bf16 fast paths for aligned shapes live in ops.cu and gemm.cu.
#include "common.cuh"
#include "e4m3.cuh"

// y[t, :] = table[ids[t], :] for t < T. ids are validated by the caller.
extern "C" __global__ void embed_any(void *y, int ydt, const void *table, int tdt, const int32_t *ids, int T, int d) {
	KEV_GRID_DEP();
	const size_t n = (size_t)T * d;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		size_t t = i / d, c = i % d;
		st(y, ydt, i, ld(table, tdt, (size_t)ids[t] * d + c));
	}
}

// SplitPart is one output of split_cols16: y[r, c] = x[r, off + c] for c < w (off, w in 16-byte pieces).
struct __align__(8) SplitPart {
	uint4 *y;
	int32_t off, w;
};
struct SplitParts {
	SplitPart p[4];
};

// split_cols16 copies up to four column blocks of the same rows in 16-byte pieces, in one launch: part blockIdx.z.
extern "C" __global__ void split_cols16(const uint4 *x, int M, int ldx16, SplitParts parts) {
	KEV_GRID_DEP();
	// constant indices: a parameter array indexed by blockIdx.z would be copied to local memory per thread
	const unsigned z = blockIdx.z;
	const SplitPart sp = z == 0 ? parts.p[0] : z == 1 ? parts.p[1] : z == 2 ? parts.p[2] : parts.p[3];
	for (int r = blockIdx.y; r < M; r += gridDim.y)
		for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < sp.w; c += gridDim.x * blockDim.x)
			sp.y[(size_t)r * sp.w + c] = x[(size_t)r * ldx16 + sp.off + c];
}

// y[r, c] = x[r, off + c] for r < M, c < w; x rows are ldx wide; both hold elements of esz bytes (2 or 4).
extern "C" __global__ void copy_cols(void *y, const void *x, int esz, int M, int ldx, int off, int w) {
	KEV_GRID_DEP();
	const size_t n = (size_t)M * w;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		size_t r = i / w, c = i % w;
		size_t s = r * ldx + off + c;
		if (esz == 4)
			((uint32_t *)y)[i] = ((const uint32_t *)x)[s];
		else
			((uint16_t *)y)[i] = ((const uint16_t *)x)[s];
	}
}

// One block per row of width n:
//   s = x (+ res, rounded to sdt and stored to sum when res is set)
//   y = s / sqrt(mean(s²) + eps) · g,  g = 1 + gain if plusOne else gain.
extern "C" __global__ void rmsnorm_any(void *y, int ydt, void *sum, int sdt, const void *x, int xdt, const void *res,
                                       int rdt, const void *gain, int gdt, int M, int n, float eps, int plusOne) {
	KEV_GRID_DEP();
	__shared__ float scratch[32];
	const int row = blockIdx.x;
	if (row >= M) return;
	const size_t base = (size_t)row * n;
	float ss = 0.f;
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float v = ld(x, xdt, base + i);
		if (res) {
			v = rnd(v + ld(res, rdt, base + i), sdt);
			st(sum, sdt, base + i, v);
		}
		ss += v * v;
	}
	ss = bsum(ss, scratch);
	const float r = 1.f / sqrtf(ss / (float)n + eps);
	for (int i = threadIdx.x; i < n; i += blockDim.x) {
		float v = res ? ld(sum, sdt, base + i) : ld(x, xdt, base + i);
		float g = ld(gain, gdt, i);
		if (plusOne) g += 1.f;
		st(y, ydt, base + i, v * r * g);
	}
}

// y[m, f] = silu(x[m, f]) · x[m, F + f] for x [M, 2F].
extern "C" __global__ void swiglu_any(void *y, int ydt, const void *x, int xdt, int M, int F) {
	KEV_GRID_DEP();
	const size_t n = (size_t)M * F;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		size_t m = i / F, f = i % F;
		float g = ld(x, xdt, m * 2 * F + f), u = ld(x, xdt, m * 2 * F + F + f);
		st(y, ydt, i, g * sigm(g) * u);
	}
}

// y = x · sigmoid(gate) over n elements.
extern "C" __global__ void sigmoid_gate_any(void *y, int ydt, const void *x, int xdt, const void *gate, int gdt,
                                            size_t n) {
	KEV_GRID_DEP();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		st(y, ydt, i, ld(x, xdt, i) * sigm(ld(gate, gdt, i)));
}

// y[r, c] = x[r, c] + b[c] over n = rows·C elements (the attention biases of Qwen2 and Qwen3 with attention_bias).
extern "C" __global__ void add_bias_any(void *y, int ydt, const void *x, int xdt, const void *b, int bdt, size_t n,
                                        int C) {
	KEV_GRID_DEP();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		st(y, ydt, i, ld(x, xdt, i) + ld(b, bdt, i % C));
}

// beta = sigmoid(b), g = −exp(aLog) · softplus(a + dtBias) (softplus(x) = x above 20), per [N, H] element; fp32 out
// (dense); the rows of b and a are ldb and lda elements apart.
extern "C" __global__ void delta_gates(float *beta, float *g, const void *b, int bdt, const void *a, int adt,
                                       const void *alog, int ldt, const void *dtb, int ddt, int N, int H, int ldb,
                                       int lda) {
	KEV_GRID_DEP();
	const size_t n = (size_t)N * H;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		const size_t t = i / H;
		const int h = (int)(i % H);
		beta[i] = sigm(ld(b, bdt, t * ldb + h));
		float x = ld(a, adt, t * lda + h) + ld(dtb, ddt, h);
		float sp = x > 20.f ? x : log1pf(expf(x));
		g[i] = -expf(ld(alog, ldt, h)) * sp;
	}
}

// gated_rms8 is one lane's part of gated_rmsnorm_bf16: elements i … i+7 of vector v (on: v is a vector; every lane
// of the L-lane group takes part in the shuffles, on or not). When on it stores them to y, sets yv to them (packed
// bf16) and returns true.
__device__ __forceinline__ bool gated_rms8(uint4 &yv, __nv_bfloat16 *y, const __nv_bfloat16 *o, const __nv_bfloat16 *z,
                                           const float *w, int v, int i, bool on, int dv, int L, float eps, int hpr,
                                           int ldz) {
	float f[8], zz[8];
	float ss = 0.f;
	if (on) {
		const size_t zb = (size_t)(v / hpr) * ldz + (size_t)(v % hpr) * dv;
		const uint4 ov = *(const uint4 *)(o + (size_t)v * dv + i), zv = *(const uint4 *)(z + zb + i);
		const __nv_bfloat162 *oh = (const __nv_bfloat162 *)&ov, *zh = (const __nv_bfloat162 *)&zv;
#pragma unroll
		for (int e = 0; e < 4; e++) {
			float2 a = __bfloat1622float2(oh[e]), b = __bfloat1622float2(zh[e]);
			f[2 * e] = a.x, f[2 * e + 1] = a.y, zz[2 * e] = b.x, zz[2 * e + 1] = b.y;
		}
#pragma unroll
		for (int e = 0; e < 8; e++) ss += f[e] * f[e];
	}
	for (int m = L / 2; m > 0; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
	if (!on) return false;
	const float r = 1.f / sqrtf(ss / (float)dv + eps);
	const float4 w0 = *(const float4 *)(w + i), w1 = *(const float4 *)(w + i + 4);
	const float wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
	float out[8];
#pragma unroll
	for (int e = 0; e < 8; e++) out[e] = f[e] * r * wv[e] * silu_fast(zz[e]);
	yv = pack8(out);
	*(uint4 *)(y + (size_t)v * dv + i) = yv;
	return true;
}

// gated_rmsnorm_bf16 is gated_rmsnorm for bf16 y, o, z and fp32 w with L = dv/8 lanes per vector (L a power of two
// ≤ 32): each lane moves 8 elements in 16-byte loads and stores, 32/L vectors per warp.
extern "C" __global__ void gated_rmsnorm_bf16(__nv_bfloat16 *y, const __nv_bfloat16 *o, const __nv_bfloat16 *z,
                                              const float *w, int rows, int dv, int L, float eps, int hpr, int ldz) {
	KEV_GRID_DEP();
	const int lane = threadIdx.x & 31, ls = __ffs(L) - 1; // L = 2^ls: shifts and masks, not divisions
	const int v = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * (32 >> ls) + (lane >> ls);
	const int i = (lane & (L - 1)) * 8;
	uint4 yv;
	gated_rms8(yv, y, o, z, w, v, i, v < rows, dv, L, eps, hpr, ldz);
}

// gated_rmsnorm_bf16_e4m3 is gated_rmsnorm_bf16 that also quantizes y, one block per row of hpr vectors (a row of
// the [M, hpr·dv] matrix an FP8 product reads as x; M blocks): as quant_rows_e4m3 (kernels/fp8_sm90a.cu) quantizes
// a bf16 row, bit for bit, S[r] = max|y[r, ·]| / 448 (fmaxf over the row's bf16 values as floats, IEEE division; 1
// when that is 0) and Q[r·hpr·dv …] = E4M3(y / S[r]), nearest even, saturating. Thread t computes elements 8t …
// 8t+7 of the row: lane t mod L of vector t / L, the lane groups of gated_rmsnorm_bf16 (L | 32), so the same sums
// in the same order and the same bits. Blocks of hpr·L threads rounded up to a warp, at most 1024. The E4M3
// conversion needs compute capability 8.9: compiled for less, the kernel does nothing (the backend launches it on
// 9.0 only). hpr·dv a multiple of 16; Q 16-byte aligned.
extern "C" __global__ void __launch_bounds__(1024)
    gated_rmsnorm_bf16_e4m3(__nv_bfloat16 *y, const __nv_bfloat16 *o, const __nv_bfloat16 *z, const float *w, int M,
                            int dv, int L, float eps, int hpr, int ldz, uint8_t *Q, float *S) {
	KEV_GRID_DEP();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
	__shared__ float mpart[32];
	const int t = threadIdx.x, row = blockIdx.x, ls = __ffs(L) - 1;
	if (row >= M) return;
	const bool on = t < hpr * L;
	uint4 yv;
	float m = 0.f;
	if (gated_rms8(yv, y, o, z, w, row * hpr + (t >> ls), (t & (L - 1)) * 8, on, dv, L, eps, hpr, ldz))
		m = q8_absmax(m, yv);
	const float s = e4m3_scale(m, mpart, blockDim.x >> 5);
	if (t == 0) S[row] = s;
	if (on) {
		((uint2 *)(Q + (size_t)row * hpr * dv))[t] = q8_codes(yv, s);
	}
#endif
}

// One warp per dv-wide vector v < rows: y = o / sqrt(mean(o²) + eps) · w · silu(z). z holds hpr vectors to a row,
// rows ldz elements apart.
extern "C" __global__ void gated_rmsnorm(void *y, int ydt, const void *o, int odt, const void *z, int zdt,
                                         const void *w, int wdt, int rows, int dv, float eps, int hpr, int ldz) {
	KEV_GRID_DEP();
	const int lane = threadIdx.x & 31;
	const int v = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (v >= rows) return;
	const size_t base = (size_t)v * dv, zb = (size_t)(v / hpr) * ldz + (size_t)(v % hpr) * dv;
	float ss = 0.f;
	for (int i = lane; i < dv; i += 32) {
		float x = ld(o, odt, base + i);
		ss += x * x;
	}
	const float r = 1.f / sqrtf(wsum(ss) / (float)dv + eps);
	for (int i = lane; i < dv; i += 32) {
		float zz = ld(z, zdt, zb + i);
		st(y, ydt, base + i, ld(o, odt, base + i) * r * ld(w, wdt, i) * silu_fast(zz));
	}
}

// One warp per head vector: vectors [0, T·H) are query heads, [T·H, T·(H+KV)) key heads. Each is RMS-normalised
// with gain 1 + g (norm 0), g (norm 1), or not at all (norm 2: the gains are not read), then its first R dims are
// rotated by φ = fp32(pos · inv_freq[j]), inv_freq[j] = fp32(θ^(−2j/R)).
// With gated set, q rows are [H, 2D] (query | gate) and the gate half is copied to gate. The rows of q and k are
// ldq and ldk elements apart; the outputs are dense.
#define QK_MAX_HALF 256
extern "C" __global__ void qk_norm_rope(void *qo, void *ko, void *gate, int odt, int kodt, const void *q, int qdt,
                                        const void *k, int kdt, const void *qg, int qgdt, const void *kg, int kgdt,
                                        const int32_t *pos, int T, int H, int KV, int D, int R, double theta,
                                        float eps, int gated, int norm, int ldq, int ldk) {
	KEV_GRID_DEP();
	__shared__ float invf[QK_MAX_HALF]; // inv_freq, once per block instead of once per vector
	const int half = R / 2;
	for (int j = threadIdx.x; j < half; j += blockDim.x) invf[j] = (float)pow(theta, -2.0 * j / (double)R);
	__syncthreads();
	const int lane = threadIdx.x & 31;
	const int vec = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (vec >= T * (H + KV)) return;
	const void *src, *g;
	void *dst;
	int sdt, gdt, ddt;
	size_t sbase, dbase;
	int t;
	if (vec < T * H) {
		t = vec / H;
		int h = vec % H;
		src = q, sdt = qdt, g = qg, gdt = qgdt, dst = qo, ddt = odt;
		sbase = (size_t)t * ldq + (size_t)h * (gated ? 2 * D : D);
		dbase = (size_t)vec * D;
		if (gated)
			for (int i = lane; i < D; i += 32) st(gate, odt, dbase + i, ld(q, qdt, sbase + D + i));
	} else {
		int kv = vec - T * H;
		t = kv / KV;
		src = k, sdt = kdt, g = kg, gdt = kgdt, dst = ko, ddt = kodt;
		sbase = (size_t)t * ldk + (size_t)(kv % KV) * D;
		dbase = (size_t)kv * D;
	}
	float r = 1.f;
	if (norm != 2) {
		float ss = 0.f;
		for (int i = lane; i < D; i += 32) {
			float x = ld(src, sdt, sbase + i);
			ss += x * x;
		}
		r = 1.f / sqrtf(wsum(ss) / (float)D + eps);
	}
	const float p = (float)pos[t];
#define QK_GAIN(i) (norm == 0 ? 1.f + ld(g, gdt, (i)) : norm == 1 ? ld(g, gdt, (i)) : 1.f)
	for (int j = lane; j < half; j += 32) {
		float phi = p * invf[j];
		float c, s;
		sincosf(phi, &s, &c);
		float a = ld(src, sdt, sbase + j) * r * QK_GAIN(j);
		float b = ld(src, sdt, sbase + j + half) * r * QK_GAIN(j + half);
		st(dst, ddt, dbase + j, a * c - b * s);
		st(dst, ddt, dbase + j + half, b * c + a * s);
	}
	for (int i = R + lane; i < D; i += 32) st(dst, ddt, dbase + i, ld(src, sdt, sbase + i) * r * QK_GAIN(i));
#undef QK_GAIN
}

// QkIn is one head vector's inputs as qk_rope_bf16 loads them ahead: a lane's 16 bytes of the vector (and of its
// gate half), the position, where the results go.
struct QkIn {
	uint4 xv, gv;
	const float *g;
	__nv_bfloat16 *dst, *gdst; // gdst: null unless a gated query vector
	int pos;
	bool on;
};

// qk_load issues the loads of head vector vec (nothing past the last vector: on is false, x reads as zero, the
// position is row 0's, as a lane off the end computed before). Divisions by H and KV only here.
__device__ __forceinline__ QkIn qk_load(int vec, int i, __nv_bfloat16 *qo, __nv_bfloat16 *ko, __nv_bfloat16 *gate,
                                        const __nv_bfloat16 *q, const __nv_bfloat16 *k, const float *qg,
                                        const float *kg, const int32_t *pos, int T, int H, int KV, int D, int gated,
                                        int ldq, int ldk) {
	QkIn in;
	in.on = vec < T * (H + KV);
	in.g = qg;
	in.dst = qo;
	in.gdst = nullptr;
	in.xv = in.gv = make_uint4(0u, 0u, 0u, 0u);
	int t = 0;
	if (in.on) {
		const __nv_bfloat16 *src;
		if (vec < T * H) {
			t = vec / H;
			const int h = vec % H;
			src = q + (size_t)t * ldq + (size_t)h * (gated ? 2 * D : D);
			in.dst = qo + (size_t)vec * D;
			if (gated) {
				in.gdst = gate + (size_t)vec * D + i;
				in.gv = *(const uint4 *)(src + D + i);
			}
		} else {
			const int kv = vec - T * H;
			t = kv / KV;
			src = k + (size_t)t * ldk + (size_t)(kv % KV) * D;
			in.dst = ko + (size_t)kv * D;
			in.g = kg;
		}
		in.xv = *(const uint4 *)(src + i);
	}
	in.pos = pos[t];
	return in;
}

// qk_norm_rope_bf16 is qk_norm_rope for bf16 q, k and outputs, fp32 gains (or none), D = 8L with L a power of two
// ≤ 32 and R a multiple of 16: L lanes per head vector, each moving 8 elements in 16-byte loads and stores (the gate
// half too); a rotated element's partner (R/2 further, or back) sits R/16 lanes away and comes by a shuffle. The
// squares are summed per lane and then across the L lanes, so r may differ from qk_norm_rope's in the last bit;
// a vector's result depends on that vector alone.
// A block takes the vectors of (blockDim/32)·(32/L) consecutive indices at a time, then those gridDim.x such groups
// further on: the inv_freq table is computed once a block (while its first vectors load), and each step's loads of
// the next group's vectors are issued before this group's are computed (qk_load), so that a lane has two in flight.
// NA > 0: every lane holds exactly NA angles (⌈R/2 / L⌉ = NA), so the angle loops have a fixed length; NA = 0: any.
template <int NA>
__device__ __forceinline__ void qk_rope_bf16(__nv_bfloat16 *qo, __nv_bfloat16 *ko, __nv_bfloat16 *gate,
                                             const __nv_bfloat16 *q, const __nv_bfloat16 *k, const float *qg,
                                             const float *kg, const int32_t *pos, int T, int H, int KV, int D, int R,
                                             double theta, float eps, int gated, int norm, int ldq, int ldk, int L) {
	__shared__ float invf[QK_MAX_HALF];
	const int half = R / 2;
	const int lane = threadIdx.x & 31, ls = __ffs(L) - 1; // L = 2^ls: shifts and masks, not divisions
	const int per = (blockDim.x >> 5) << (5 - ls);         // vectors a block takes at a time
	const int mine = ((threadIdx.x >> 5) << (5 - ls)) + (lane >> ls);
	const int sub = lane & (L - 1), i = sub * 8;
	const int nvec = T * (H + KV), stride = gridDim.x * per;
#define QK_LOAD(vec) qk_load((vec), i, qo, ko, gate, q, k, qg, kg, pos, T, H, KV, D, gated, ldq, ldk)
	QkIn cur = QK_LOAD(blockIdx.x * per + mine);
	for (int j = threadIdx.x; j < half; j += blockDim.x) invf[j] = (float)pow(theta, -2.0 * j / (double)R);
	__syncthreads();
	// the partner lane of a rotated element: R/16 lanes up for the first half, down for the second
	const int hl = half / 8;
	const bool lo = i < half, rot = i < R;
	const int base = lane & ~(L - 1), partner = base + (lo ? sub + hl : sub - hl);
	const int na = NA ? NA : (half + L - 1) >> ls; // angles a lane holds (the same for every lane)
	for (int v0 = blockIdx.x * per; v0 < nvec; v0 += stride) { // the same trip count for every lane of the block
		const QkIn next = QK_LOAD(v0 + stride + mine);
		if (cur.gdst != nullptr) *(uint4 *)cur.gdst = cur.gv;
		float x[8];
		unpack8(cur.xv, x);
		float r = 1.f;
		if (norm != 2) {
			float ss = 0.f;
#pragma unroll
			for (int e = 0; e < 8; e++) ss += x[e] * x[e];
			for (int m = L / 2; m > 0; m >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, m);
			r = 1.f / sqrtf(ss / (float)D + eps);
		}
		float v[8]; // x·r·gain
		if (cur.on && norm != 2) {
			const float4 g0 = *(const float4 *)(cur.g + i), g1 = *(const float4 *)(cur.g + i + 4);
			const float gg[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
			for (int e = 0; e < 8; e++) v[e] = x[e] * r * (norm == 0 ? 1.f + gg[e] : gg[e]);
		} else {
#pragma unroll
			for (int e = 0; e < 8; e++) v[e] = x[e] * r;
		}
		float w[8];
#pragma unroll
		for (int e = 0; e < 8; e++) w[e] = __shfl_sync(0xffffffffu, v[e], rot ? partner : lane);
		// The angles: lane sub of a vector takes φ_j for j = sub, sub + L, … < half (at most 4: R ≤ D = 8L), each the
		// same fp32 p·inv_freq[j] and sincosf as before, and the lanes that rotate fetch theirs by shuffles. Each
		// angle is computed once a vector instead of once per element of both halves, by every lane instead of the
		// R/8 that rotate: the same bits, a quarter of the sincosf work of a warp at D = 256, R = 64.
		const float p = (float)cur.pos;
		float ac[4], as[4];
#pragma unroll
		for (int a = 0; a < (NA ? NA : 4); a++) {
			ac[a] = 1.f, as[a] = 0.f;
			const int j = sub + L * a;
			if (a < na && j < half) sincosf(p * invf[j], &as[a], &ac[a]);
		}
		float out[8];
#pragma unroll
		for (int e = 0; e < 8; e++) {
			const int j = (lo ? i : i - half) + e; // this element's angle (unused where it does not rotate)
			float cs = 1.f, sn = 0.f;
#pragma unroll
			for (int a = 0; a < (NA ? NA : 4); a++) {
				if (!NA && a >= na) break;
				const float c = __shfl_sync(0xffffffffu, ac[a], base + (j & (L - 1)));
				const float n = __shfl_sync(0xffffffffu, as[a], base + (j & (L - 1)));
				if (NA == 1 || (j >> ls) == a) cs = c, sn = n; // NA = 1: j < half ≤ L wherever it rotates
			}
			// v·cos ∓ w·sin as the compiler contracted it before (a rounded w·sin, then one fused multiply-add)
			const float ws = __fmul_rn(w[e], sn);
			out[e] = rot ? __fmaf_rn(v[e], cs, lo ? -ws : ws) : v[e];
		}
		if (cur.on) *(uint4 *)(cur.dst + i) = pack8(out);
		cur = next;
	}
#undef QK_LOAD
}

// The bf16 kernels run blocks of 256 threads; qk_norm_rope_bf16_a1 keeps QK_BLOCKS_SM of them resident a
// multiprocessor (its registers capped to fit), and the host launches at most that many a multiprocessor
// (qkRopeBlocksSM in nn.go; 2 for qk_norm_rope_bf16, whose registers allow two).
#define QK_BLOCKS_SM 4

#define QK_ROPE_PARAMS                                                                                                 \
	__nv_bfloat16 *qo, __nv_bfloat16 *ko, __nv_bfloat16 *gate, const __nv_bfloat16 *q, const __nv_bfloat16 *k,         \
	    const float *qg, const float *kg, const int32_t *pos, int T, int H, int KV, int D, int R, double theta,       \
	    float eps, int gated, int norm, int ldq, int ldk, int L
#define QK_ROPE_ARGS qo, ko, gate, q, k, qg, kg, pos, T, H, KV, D, R, theta, eps, gated, norm, ldq, ldk, L

extern "C" __global__ void __launch_bounds__(256) qk_norm_rope_bf16(QK_ROPE_PARAMS) {
	KEV_GRID_DEP();
	qk_rope_bf16<0>(QK_ROPE_ARGS);
}

// qk_norm_rope_bf16_a1: one angle a lane (R/2 ≤ L, as at D = 256, R = 64); the same bits as qk_norm_rope_bf16.
extern "C" __global__ void __launch_bounds__(256, QK_BLOCKS_SM) qk_norm_rope_bf16_a1(QK_ROPE_PARAMS) {
	KEV_GRID_DEP();
	qk_rope_bf16<1>(QK_ROPE_ARGS);
}

// Depthwise causal convolution and SiLU, one thread per (row, channel): y[t, c] = silu(Σ_j w[c, j] · x[t−K+1+j, c]),
// where rows before the row's segment start (segStart[t]) come from state [K−1, C] (zero when state is null).
extern "C" __global__ void conv1d_silu(void *y, int ydt, const void *x, int xdt, const void *w, int wdt,
                                       const void *state, int sdt, const int32_t *segStart, int N, int C, int K) {
	KEV_GRID_DEP();
	const size_t n = (size_t)N * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		int t = (int)(i / C), c = (int)(i % C);
		int s0 = segStart[t];
		float acc = 0.f;
		for (int j = 0; j < K; j++) {
			int src = t - (K - 1) + j; // row in x
			float xv;
			if (src >= s0)
				xv = ld(x, xdt, (size_t)src * C + c);
			else {
				int hr = K - 1 + (src - s0); // row in state
				xv = state ? ld(state, sdt, (size_t)hr * C + c) : 0.f;
			}
			acc += ld(w, wdt, (size_t)c * K + j) * xv;
		}
		st(y, ydt, i, silu_fast(acc));
	}
}

// The convolution state after one segment: the last K−1 rows of [state; x] (state zero when null).
extern "C" __global__ void conv_state(void *ns, int nsdt, const void *x, int xdt, const void *state, int sdt, int N,
                                      int C, int K) {
	KEV_GRID_DEP();
	const size_t n = (size_t)(K - 1) * C;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
		int r = (int)(i / C), c = (int)(i % C);
		int src = N - (K - 1) + r;
		float v;
		if (src >= 0)
			v = ld(x, xdt, (size_t)src * C + c);
		else
			v = state ? ld(state, sdt, (size_t)(K - 1 + src) * C + c) : 0.f;
		st(ns, nsdt, i, v);
	}
}

// The pointer head's projections, one warp per output: out[r, i] = W·h[rows[r]] + B, with (W, B) = (Wq, Bq) for
// r = 0 and (Wk, Bk) for r > 0. out is fp32 [nr, dp].
extern "C" __global__ void pointer_proj(float *out, const void *h, int hdt, const int32_t *rows, int nr,
                                        const void *wq, int wqdt, const void *bq, int bqdt, const void *wk, int wkdt,
                                        const void *bk, int bkdt, int d, int dp) {
	KEV_GRID_DEP();
	const int lane = threadIdx.x & 31;
	const int o = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (o >= nr * dp) return;
	const int r = o / dp, i = o % dp;
	const void *w = r == 0 ? wq : wk;
	const int wdt = r == 0 ? wqdt : wkdt;
	const size_t hb = (size_t)rows[r] * d, wb = (size_t)i * d;
	float acc = 0.f;
	for (int j = lane; j < d; j += 32) acc += ld(w, wdt, wb + j) * ld(h, hdt, hb + j);
	acc = wsum(acc);
	if (lane == 0) out[o] = acc + (r == 0 ? ld(bq, bqdt, i) : ld(bk, bkdt, i));
}

// y[M, N] = x[M, K] · w[N, K]ᵀ for any storage types, fp32 accumulation: 32×32 output tiles, 256 threads each
// computing four outputs of one column, k staged through shared memory 32 at a time.
extern "C" __global__ void matmul_any(void *y, int ydt, const void *x, int xdt, const void *w, int wdt, int M, int N,
                                      int K) {
	KEV_GRID_DEP();
	__shared__ float xs[32][33], ws[32][33];
	const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5; // ty in [0, 8)
	const int m0 = blockIdx.y * 32, n0 = blockIdx.x * 32;
	float acc[4] = {0.f, 0.f, 0.f, 0.f};
	for (int k0 = 0; k0 < K; k0 += 32) {
		for (int r = ty; r < 32; r += 8) {
			int m = m0 + r, n = n0 + r, k = k0 + tx;
			xs[r][tx] = (m < M && k < K) ? ld(x, xdt, (size_t)m * K + k) : 0.f;
			ws[r][tx] = (n < N && k < K) ? ld(w, wdt, (size_t)n * K + k) : 0.f;
		}
		__syncthreads();
#pragma unroll 8
		for (int kk = 0; kk < 32; kk++) {
			float b = ws[tx][kk];
#pragma unroll
			for (int i = 0; i < 4; i++) acc[i] += xs[ty + 8 * i][kk] * b;
		}
		__syncthreads();
	}
	const int n = n0 + tx;
	if (n >= N) return;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int m = m0 + ty + 8 * i;
		if (m < M) st(y, ydt, (size_t)m * N + n, acc[i]);
	}
}
