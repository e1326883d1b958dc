// Tiled causal grouped-query attention on Hopper (sm_90a) with warpgroup products (wgmma), for head dimension 256
// and four query heads a key/value head (Qwen3.5's attention layers): flash_segs_wg_d256_g4 computes what
// flash_attn_segs_d256_g4 (flash.cu) does — the same segments, prefixes, masks, key splits and outputs, an fp32
// online softmax in base 2 with the probabilities rounded to bf16 for P·V — in tiles of 64 keys.
//
// A block of two warpgroups takes 32 consecutive query rows of one segment and the four query heads of one key
// head: warpgroup w the rows 16w … 16w + 15, its 64 product rows the four heads' 16 rows each (warp i of the
// warpgroup: head 4·blockIdx.y + i), so that each key tile it loads serves 128 product rows. Per key tile, for each
// warpgroup:
//   S = Q Kᵀ   (wgmma m64n64k16, 16 k steps: A the warpgroup's q rows, B the tile's k rows, both from shared memory)
//   online softmax on S in registers (masks only on a tile some row may not see in whole; O rescaled only where a
//   row's maximum grew)
//   O += P V   (wgmma m64n256k16, 4 k steps: A the probabilities in bf16 from S's registers, B the tile's v rows
//               from shared memory, read transposed: v is stored [key][dimension], the product's k is the key)
// q, k and v land in shared memory by cp.async in the 128-byte swizzled layout the products read (each 64
// dimensions a slab of 128-byte rows); the next tile's k and v are copied while this tile's products run. A
// warpgroup whose rows all lie past the segment only copies. A row's products and their order depend only on its
// segment (the key tiles start at the prefix's first key and at the segment's first row; keys a row may not see
// add exact zeros), so its bits do not depend on its batch-mates.
// Shared memory: q 2 × 32 KiB, two stages of k and v 64 KiB each, 1 KiB to align.
#include "common.cuh"
#include "gdn.cuh"
#include "wgmma.cuh"

// SegDesc: one segment of a batched call (the layout of segDesc in batched.go; see flash.cu).
struct __align__(8) SegDesc {
	int32_t start, len, p, dt, first, dtb;
	const void *a;
	void *b;
};

#define FA_PSEGS 16
struct FlashSegs {
	SegDesc d[FA_PSEGS];
};

#define FW_ROWS 32     // query rows a block
#define FW_BK 64       // keys a tile
#define FW_Q 0         // q: two warpgroups × four slabs of [64 rows][128 bytes]
#define FW_KV 65536    // stage s at FW_KV + s·FW_STAGE: k's four slabs of [64 keys][128 bytes], then v's
#define FW_STAGE 65536

// desc_mn_sw128 is the wgmma descriptor of an MN-major operand in 128-byte swizzled slabs of 64 elements (the
// product's n) by 8-row groups of its k: slabs lbo bytes apart, k groups 1,024 bytes apart.
__device__ __forceinline__ uint64_t desc_mn_sw128(uint32_t a, uint32_t lbo) {
	uint64_t d = (uint64_t)((a & 0x3FFFF) >> 4);
	d |= (uint64_t)(lbo >> 4) << 16;  // leading-dimension byte offset: the next 64 elements of n
	d |= (uint64_t)(1024 >> 4) << 32; // stride-dimension byte offset: the next 8 rows of k
	d |= (uint64_t)1 << 62;           // swizzle mode 1: 128 B
	return d;
}

// wgmma_rs_m64n256_tb: d[64×256] = A[64×16] · B[16×256] (+ d when acc ≠ 0), A bf16 in registers (the m64k16
// fragment, as wgmma_rs_m64n64), B bf16 MN-major in shared memory (desc_mn_sw128), fp32 d.
__device__ __forceinline__ void wgmma_rs_m64n256_tb(float *d, const uint32_t a[4], uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

// fw_slab is the byte offset of 16-byte piece p (0 … 31: elements 8p … 8p + 7) of row r in a tile of 64 rows of 256
// bf16 elements kept as four 128-byte swizzled slabs.
__device__ __forceinline__ uint32_t fw_slab(int r, int p) { return (p >> 3) * 8192 + r * 128 + (((p & 7) ^ (r & 7)) << 4); }

__device__ __forceinline__ const SegDesc &fw_desc(const SegDesc *desc, const FlashSegs &ps, int i) {
	return desc != nullptr ? desc[i] : ps.d[i];
}

// fw_hold keeps the A fragments of products in flight alive (their registers not reused) until after their wait.
__device__ __forceinline__ void fw_hold(const uint32_t (*pa)[4]) {
#pragma unroll
	for (int kk = 0; kk < 4; kk++) asm volatile("" ::"r"(pa[kk][0]), "r"(pa[kk][1]), "r"(pa[kk][2]), "r"(pa[kk][3]) : "memory");
}

// flash_segs_wg_d256_g4: blocks[b] = (segment, 32-row tile, key splits of this block, unused) for blockIdx.x = b,
// query heads 4·blockIdx.y … + 3, split blockIdx.z (splits ≥ the block's count do nothing); the rest as
// flash_attn_segs_dN_gG (flash.cu): a block of one split writes o, the others their normalised partial outputs
// (opart fp32 [splits, N, H, 256]) and (m, l) (ml fp32 [splits, N, H, 2]) for attn_combine_rows.
extern "C" __global__ void __launch_bounds__(256, 1)
    flash_segs_wg_d256_g4(void *o, int odt, float *opart, float *ml, const __nv_bfloat16 *q, const __nv_bfloat16 *k,
                          const __nv_bfloat16 *v, const SegDesc *desc, const int4 *blocks, int N, int H, int KV,
                          float scale2, const __grid_constant__ FlashSegs ps) {
	KEV_GRID_DEP();
	constexpr int D = 256;
	const int4 bl = blocks[blockIdx.x];
	const int z = blockIdx.z, splits = bl.z;
	if (z >= splits) return;
	const SegDesc &sd = fw_desc(desc, ps, bl.x);
	const int s0 = sd.start, rowEnd = sd.start + sd.len, P = sd.p, tq0 = s0 + bl.y * FW_ROWS;
	const __nv_bfloat16 *kp = (const __nv_bfloat16 *)sd.a, *vp = (const __nv_bfloat16 *)sd.b;
	extern __shared__ __align__(16) char fw_raw[];
	const uint32_t base = (smem_u32(fw_raw) + 1023) & ~1023u;
	char *sm = fw_raw + (base - smem_u32(fw_raw));
	const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, tig = lane & 3;
	const int h0 = 4 * blockIdx.y, h = h0 + wi, kh = h0 / (H / KV);
	const int tmax = min(tq0 + FW_ROWS - 1, rowEnd - 1);
	const int nPre = (P + FW_BK - 1) / FW_BK;
	const int nt = nPre + (tmax - s0) / FW_BK + 1;
	const int per = (nt + splits - 1) / splits;
	const int ta = min(nt, z * per), tb = min(nt, ta + per);
	const size_t qw = (size_t)H * D, kvw = (size_t)KV * D;

	// load copies k and v of key tile i — the prefix's first, then the segment's rows from s0 — into stage st, zero
	// past its keys. Thread tid copies piece tid % 32 of keys tid / 32 + 8j: the same swizzled column every time.
	const int lr = tid >> 5, lp = tid & 31;
	const uint32_t ldst = fw_slab(lr, lp);
	auto load = [&](int i, int st) {
		const __nv_bfloat16 *kb = k, *vb = v;
		int b0 = s0 + (i - nPre) * FW_BK, lim = tmax + 1;
		if (i < nPre) kb = kp, vb = vp, b0 = i * FW_BK, lim = P;
		const size_t off = (size_t)(b0 + lr) * kvw + (size_t)kh * D + 8 * lp;
		const __nv_bfloat16 *ks = kb + off, *vs = vb + off;
		char *dst = sm + FW_KV + st * FW_STAGE + ldst;
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const bool ok = b0 + lr + 8 * j < lim;
			cp16(dst + 1024 * j, ok ? ks + 8 * j * kvw : kb, ok);
			cp16(dst + 32768 + 1024 * j, ok ? vs + 8 * j * kvw : vb, ok);
		}
	};
	if (ta < tb) {
		// q: warpgroup w's product row m = 16i + r is row tq0 + 16w + r of head h0 + i
#pragma unroll
		for (int j = 0; j < 16; j++) {
			const int c = tid + 256 * j, w = c >> 11, m = (c >> 5) & 63, p = c & 31;
			const int t = tq0 + 16 * w + (m & 15);
			const bool ok = t < rowEnd;
			cp16(sm + FW_Q + w * 32768 + fw_slab(m, p), q + (ok ? (size_t)t * qw + (size_t)(h0 + (m >> 4)) * D + 8 * p : 0), ok);
		}
		load(ta, 0);
		cp_commit();
	}

	// this thread's rows: 16·wg + g and + 8 of the block; the accumulators' layout is mma.sync's per warp. A
	// warpgroup whose rows all lie past the segment (a segment's last tile of at most 16 rows more) only copies and
	// waits with the other.
	const int t0 = tq0 + 16 * wg + g, t1 = t0 + 8;
	const int ss0 = t0 < rowEnd ? s0 : 0x7fffffff, ss1 = t1 < rowEnd ? s0 : 0x7fffffff;
	const bool busy = tq0 + 16 * wg < rowEnd;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f; // running maxima (of S·scale2) and sums
	float acc[128], s[32];
	uint32_t pa[4][4];
#pragma unroll
	for (int n = 0; n < 128; n++) acc[n] = 0.f;
	// descriptors of the warpgroup's q and of stage 0's k and v (the offsets below add to their address fields)
	const uint64_t dq = desc_sw128(base + FW_Q + wg * 32768), dk = desc_sw128(base + FW_KV);
	const uint64_t dv = desc_mn_sw128(base + FW_KV + 32768, 8192);

	for (int i = ta; i < tb; i++) {
		const int st = (i - ta) & 1;
		cp_wait<0>();
		fence_async_shared();
		__syncthreads(); // tile i has landed for all; every warpgroup is done with the other stage
		if (i + 1 < tb) {
			load(i + 1, st ^ 1);
			cp_commit();
		}
		if (!busy) continue;
		wgmma_fence();
#pragma unroll
		for (int kk = 0; kk < 16; kk++) {
			const uint32_t off = ((kk >> 2) * 8192 + (kk & 3) * 32) >> 4;
			wgmma_m64n64(s, dq + off, dk + st * (FW_STAGE >> 4) + off, kk > 0);
		}
		wgmma_commit();
		wgmma_wait0();
		regs_after<32>(s);
		// masks: none where every key of the tile is visible to both rows (a prefix tile inside the prefix, a tile of
		// new keys at or before both rows and from the segment's first on)
		const bool pre = i < nPre;
		const int kb0 = pre ? i * FW_BK : s0 + (i - nPre) * FW_BK;
		const bool whole = pre ? kb0 + FW_BK <= P : kb0 >= max(ss0, ss1) && kb0 + FW_BK - 1 <= t0;
		float mx0 = -INFINITY, mx1 = -INFINITY;
		if (whole) { // S scaled, then the rows' maxima
#pragma unroll
			for (int n = 0; n < 8; n++) {
#pragma unroll
				for (int e = 0; e < 4; e++) s[4 * n + e] *= scale2;
				mx0 = fmaxf(mx0, fmaxf(s[4 * n], s[4 * n + 1]));
				mx1 = fmaxf(mx1, fmaxf(s[4 * n + 2], s[4 * n + 3]));
			}
		} else {
#pragma unroll
			for (int n = 0; n < 8; n++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int j = kb0 + n * 8 + 2 * tig + (e & 1);
					const bool ok = pre ? j < P : (e < 2 ? (j >= ss0 && j <= t0) : (j >= ss1 && j <= t1));
					float &x = s[4 * n + e];
					x = ok ? x * scale2 : -INFINITY;
					if (e < 2)
						mx0 = fmaxf(mx0, x);
					else
						mx1 = fmaxf(mx1, x);
				}
		}
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
		mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
		mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
		const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		// Rows with nothing visible yet keep m = −inf: their probabilities are 0 and nothing is rescaled.
		const float c0 = mn0 == -INFINITY ? 1.f : exp2f(m0 - mn0), c1 = mn1 == -INFINITY ? 1.f : exp2f(m1 - mn1);
		const float b0 = mn0 == -INFINITY ? 0.f : mn0, b1 = mn1 == -INFINITY ? 0.f : mn1;
		float ps0 = 0.f, ps1 = 0.f;
#pragma unroll
		for (int n = 0; n < 8; n++) {
			s[4 * n] = exp2f(s[4 * n] - b0);
			s[4 * n + 1] = exp2f(s[4 * n + 1] - b0);
			s[4 * n + 2] = exp2f(s[4 * n + 2] - b1);
			s[4 * n + 3] = exp2f(s[4 * n + 3] - b1);
			ps0 += s[4 * n] + s[4 * n + 1];
			ps1 += s[4 * n + 2] + s[4 * n + 3];
		}
		l0 = l0 * c0 + ps0;
		l1 = l1 * c1 + ps1;
		m0 = mn0;
		m1 = mn1;
		// rescale O (a factor of 1 changes nothing: skipped where it is 1 for the whole warp)
		if (!__all_sync(0xffffffffu, c0 == 1.f && c1 == 1.f)) {
#pragma unroll
			for (int n = 0; n < 32; n++) {
				acc[4 * n] *= c0;
				acc[4 * n + 1] *= c0;
				acc[4 * n + 2] *= c1;
				acc[4 * n + 3] *= c1;
			}
		}
#pragma unroll
		for (int kk = 0; kk < 4; kk++) {
			pa[kk][0] = pack2(s[8 * kk], s[8 * kk + 1]);
			pa[kk][1] = pack2(s[8 * kk + 2], s[8 * kk + 3]);
			pa[kk][2] = pack2(s[8 * kk + 4], s[8 * kk + 5]);
			pa[kk][3] = pack2(s[8 * kk + 6], s[8 * kk + 7]);
		}
		wgmma_fence();
#pragma unroll
		for (int kk = 0; kk < 4; kk++) wgmma_rs_m64n256_tb(acc, pa[kk], dv + st * (FW_STAGE >> 4) + kk * (2048 >> 4), 1);
		wgmma_commit();
		wgmma_wait0();
		regs_after<128>(acc);
		fw_hold(pa);
	}
	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
	const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
	if (splits == 1) {
		if (odt == DT_BF16) {
#pragma unroll
			for (int n = 0; n < 32; n++) {
				const int c = n * 8 + 2 * tig;
				if (t0 < rowEnd) *(uint32_t *)((__nv_bfloat16 *)o + (size_t)t0 * qw + (size_t)h * D + c) = pack2(acc[4 * n] * i0, acc[4 * n + 1] * i0);
				if (t1 < rowEnd) *(uint32_t *)((__nv_bfloat16 *)o + (size_t)t1 * qw + (size_t)h * D + c) = pack2(acc[4 * n + 2] * i1, acc[4 * n + 3] * i1);
			}
			return;
		}
#pragma unroll
		for (int n = 0; n < 32; n++) {
			const int c = n * 8 + 2 * tig;
			if (t0 < rowEnd) {
				const size_t r = (size_t)t0 * qw + (size_t)h * D + c;
				st(o, odt, r, acc[4 * n] * i0);
				st(o, odt, r + 1, acc[4 * n + 1] * i0);
			}
			if (t1 < rowEnd) {
				const size_t r = (size_t)t1 * qw + (size_t)h * D + c;
				st(o, odt, r, acc[4 * n + 2] * i1);
				st(o, odt, r + 1, acc[4 * n + 3] * i1);
			}
		}
		return;
	}
	const size_t zoff = (size_t)z * N * qw;
#pragma unroll
	for (int n = 0; n < 32; n++) {
		const int c = n * 8 + 2 * tig;
		if (t0 < rowEnd) *(float2 *)(opart + zoff + (size_t)t0 * qw + (size_t)h * D + c) = make_float2(acc[4 * n] * i0, acc[4 * n + 1] * i0);
		if (t1 < rowEnd) *(float2 *)(opart + zoff + (size_t)t1 * qw + (size_t)h * D + c) = make_float2(acc[4 * n + 2] * i1, acc[4 * n + 3] * i1);
	}
	if (tig == 0) {
		const size_t mz = (size_t)z * N * H;
		if (t0 < rowEnd) *(float2 *)(ml + 2 * (mz + (size_t)t0 * H + h)) = make_float2(m0, l0);
		if (t1 < rowEnd) *(float2 *)(ml + 2 * (mz + (size_t)t1 * H + h)) = make_float2(m1, l1);
	}
}
