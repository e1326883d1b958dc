// The rows of the chunked gated delta rule on Hopper (sm_90a): segments of at most one 64-token chunk that continue
// a state and keep none of their own (a request's question rows), with warpgroup products (wgmma). gdn_prep (gdn.cu)
// has left each row's T, M and factors in the workspace; a row's outputs are then, with S₀ the state it continues,
//   X = K S₀, P = Q S₀,  R = fb·V − fa·X,  Δ = T R,  O = fq·P + M Δ
// as in gdn_state (gdn.cu), computed here in the transposed frame, the value columns as the products' rows:
//   [Xᵀ Pᵀ] = S₀ᵀ [K; Q]ᵀ    (A: S₀ᵀ split into bf16 hi + lo parts, in registers for the block's life;
//                            B: the row's k and q, 128 tokens' rows of the tile, from shared memory)
//   Δᵀ = Rᵀ Tᵀ               (A: Rᵀ in bf16, formed in registers from the Xᵀ accumulators; B: T)
//   Oᵀ = fq·Pᵀ + Δᵀ Mᵀ       (A: Δᵀ in bf16 from its accumulators; B: M)
// so that nothing between the products goes through shared memory, and T, M, K and Q are read as stored (K-major).
// A block of two warpgroups runs one (row, value head, 128 value columns) item after another: warpgroup w owns
// columns 64w … 64w + 63; the block copies each item's inputs once for both (cp.async, three stages: the next two
// items' copies run under this item's products) and keeps the state slice in registers while the items continue
// the same one. A row's outputs are computed the same way whichever items share its block: its bits do not depend
// on its batch-mates.
#include "common.cuh"
#include "gdn.cuh"
#include "wgmma.cuh"

// GdnRowBlk: a group of rows — entries r0 … r0 + n − 1 of the row table ([R][3]: first row, length 1…64,
// workspace chunk) — all continuing the state s (type dt, [hv][128][dv]; null: zero); q0 is the group's first item
// in the launch's sequence of items (groups in order, each with n items for each head and column block), or, where
// the launch splits each run of a group's rows by itself, its first block. With pr = 1 the group's first entry is
// instead a segment of one chunk that continues s, computed here as the first item of each run, and the rows after
// it continue its final state: the block that runs the item writes its outputs and, where fin is not null, its
// final state (fp32 [hv][128][dv]); a block that starts later in the run computes it first for its state alone.
struct __align__(8) GdnRowBlk {
	const void *s;
	int32_t dt, r0, n, q0, pr, pad;
	float *fin;
};

#define RV 136 // padded bf16 row of V (128 columns): rows two apart fall on distinct banks

// Stage layout (bytes): [K; Q] as two 128-byte-swizzled slabs of 128 rows (dimensions 0…63, 64…127; in gdn_rows_eE
// rows 0 … 8E − 1 the row's k, rows 8E … 16E − 1 its q), T and M
// (64 rows of 128 bytes, swizzled), V [64][RV] bf16, the factors fp32 [5][64].
#define R_KQ 0
#define R_T 32768
#define R_M 40960
#define R_V 49152
#define R_F (R_V + 64 * RV * 2)
#define R_STAGE 68608 // R_F + 1280, rounded up to 1024 bytes

// stsm4t stores four 8×8 bf16 matrices transposed (stmatrix .trans): lane l gives the address of row l % 8 of
// matrix l / 8 as stored, r[m] this lane's fragment of matrix m (row l / 4, columns 2(l % 4), +1 before the transpose).
__device__ __forceinline__ void stsm4t(const void *p, const uint32_t r[4]) {
	asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(sptr(p)), "r"(r[0]),
	             "r"(r[1]), "r"(r[2]), "r"(r[3])
	             : "memory");
}

// wgmma_rs<N>: d[64×N] = A[64×16] · B[N×16]ᵀ (+ d when acc ≠ 0), as wgmma_rs_m64n64 (wgmma.cuh) for N columns (16 to
// 128 in steps of 16): the products of gdn_rows as wide as its launch's longest row.
template <int N> __device__ __forceinline__ void wgmma_rs(float *d, const uint32_t a[4], uint64_t db, int acc);
template <> __device__ __forceinline__ void wgmma_rs<16>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wgmma_rs<32>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wgmma_rs<48>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %29, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n48k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23}, {%24,%25,%26,%27}, %28, p, 1, 1, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wgmma_rs<64>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	wgmma_rs_m64n64(d, a, db, acc);
}
template <> __device__ __forceinline__ void wgmma_rs<80>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %45, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, {%40,%41,%42,%43}, %44, p, 1, 1, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wgmma_rs<96>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %53, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, {%48,%49,%50,%51}, %52, p, 1, 1, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wgmma_rs<112>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %61, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n112k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55}, {%56,%57,%58,%59}, %60, p, 1, 1, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
template <> __device__ __forceinline__ void wgmma_rs<128>(float *d, const uint32_t a[4], uint64_t db, int acc) {
	wgmma_rs_m64n128(d, a, db, acc);
}

// The three products of an item over the first tokens of k, q and the row (k and v zero past the row, R and Δ
// then too: tokens past the row's own add exact zeros to the products, and their columns are never read):
// rows_xp: [Xᵀ Pᵀ] = S₀ᵀ [K; Q]ᵀ over the first 8·E tokens of k and q, one product of width 16·E a k step and part
// of S₀ (the stage's tile holds those k rows, then those q rows): acc[0 …) the k tokens', acc[4E …) the q tokens';
// rows_d: Δᵀ = Rᵀ Tᵀ and rows_o: Oᵀ += Δᵀ Mᵀ over the first NB 16-token
// tiles. kq, tb, mb: the stage's tiles.
template <int E>
__device__ __forceinline__ void rows_xp(float *acc, const uint32_t (*sh)[4], const uint32_t (*sl)[4], uint32_t kq) {
#pragma unroll
	for (int kk = 0; kk < 8; kk++) {
		const uint32_t b = kq + (kk >> 2) * 16384 + (kk & 3) * 32;
		wgmma_rs<16 * E>(acc, sh[kk], desc_sw128(b), kk > 0);
		wgmma_rs<16 * E>(acc, sl[kk], desc_sw128(b), 1);
	}
}
template <int NB> __device__ __forceinline__ void rows_d(float *D, const uint32_t (*ra)[4], uint32_t tb) {
#pragma unroll
	for (int s = 0; s < NB; s++) wgmma_rs<16 * NB>(D, ra[s], desc_sw128(tb + 32 * s), s > 0);
}
template <int NB> __device__ __forceinline__ void rows_o(float *P, const uint32_t (*da)[4], uint32_t mb) {
#pragma unroll
	for (int s = 0; s < NB; s++) wgmma_rs<16 * NB>(P, da[s], desc_sw128(mb + 32 * s), 1);
}

// GdnRowMeta: what the copies of a stage's step leave for its products: the row's first row and length, the state
// slice it continues (its run, group · hv·nz + head·nz + column block z; −run − 1 for the state a segment of the run
// continues), its head and first column, the state's type, the step's kind (0: a row; 1: a run's segment, outputs
// and final state written; 2: a run's segment for its state alone), the state's address and the final state's.
struct __align__(8) GdnRowMeta {
	int32_t t0, len, item, h, cb;
	int16_t dt, kind;
	const void *s;
	float *fin;
};
static_assert(sizeof(GdnRowMeta) == 40, "gdnRowsShared (gdn.go) counts 40 bytes a stage");

// gdn_rows: grid (G), 256 threads, a persistent block per multiprocessor at most. The work is a sequence of q row
// items: for each of the ng groups e in order, each head h and column block z (nz = dv/128 of them), a run of the
// group's n_e rows. Block b runs items b·per … min(q, (b + 1)·per) − 1 one after another (runs = 0), or, in a
// launch that has a block for each piece of per rows of every run (runs = 1), one such piece, so that no block
// loads two states where the runs are short; either way it finds its group from the groups' first items or blocks
// (a warp-wide count of those at or before its own), so that a launch uploads nothing per block. Where a run's rows
// continue a segment of one chunk (pr: the run's first item), the block runs that segment like a row, then updates
// the state in registers, S₁ᵀ = γ_C S₀ᵀ + (fk·Δ)ᵀ K (mma.sync, K by ldmatrix.trans from the stage); a block that
// starts later in such a run runs the segment first, one more step, for its state alone.
// Dynamic shared memory: NS stages of R_STAGE bytes (aligned to 1024 bytes: 1,024 more) and NS GdnRowMeta; the
// copies of the next NS − 1 steps are in flight while one runs, across the items' groups, heads and column blocks.
// Where an item continues another state slice than the one before it, the slice is loaded anew (from L2: the copies
// prefetch it when they reach its group's first row). o [N, hv·dv] of type odt; qkv bf16 [N, 2·hk·128 + hv·dv];
// work as gdn_prep leaves it.
// gdn_rows_eE (E = 1 … 8) is gdn_rows for a launch whose rows and segments hold at most 8E tokens: every product
// of every item runs over the launch's width — [Xᵀ Pᵀ] over 8E tokens, Δᵀ and Oᵀ over XN = ⌈E/2⌉ tiles of 16 (one
// width a kernel: ptxas serialises all of a kernel's warpgroup products where two widths of one product share
// it). Tokens past an item's own add exact zeros and fill columns that nothing reads, so a token's results do not
// depend on E: a launch takes the E of its longest row, and its rows keep their bits in any batch.
template <int E>
__device__ __forceinline__ void gdn_rows_body(void *o, int odt, const __nv_bfloat16 *qkv, const GdnRowBlk *blks,
                                              const int32_t *rows, int ng, int per, int q, int runs, int hk, int hv,
                                              int dv, const char *work) {
	constexpr int NS = 3, XN = (E + 1) / 2;
	extern __shared__ __align__(16) char smr_raw[];
	char *smr = smr_raw + ((1024 - (smem_u32(smr_raw) & 1023)) & 1023); // the swizzled tiles want 1024-byte alignment
	GdnRowMeta *meta = (GdnRowMeta *)(smr + NS * R_STAGE);
	const int tid = threadIdx.x, wg = tid >> 7, wi = (tid >> 5) & 3, lane = tid & 31, gq = lane >> 2, qq = lane & 3;
	const int c0 = 64 * wg + 16 * wi + gq; // this thread's value columns (in the item's 128): c0 and c0 + 8
	const int nz = dv >> 7, hzn = hv * nz;
	const size_t width = 2 * (size_t)hk * GDK + (size_t)hv * dv;
	const int iw = (int)width; // a row's offsets within a chunk's 64 rows in 32 bits: the launch has 64·width < 2³¹
	// the block's group e0 is the last one whose first item (runs: first block) is at or before the block's
	const int key = runs ? (int)blockIdx.x : (int)blockIdx.x * per;
	int e0 = -1;
	for (int j = 0; j < ng; j += 32)
		e0 += __popc(__ballot_sync(0xffffffffu, j + lane < ng && blks[j + lane].q0 <= key));
	const GdnRowBlk b0 = blks[e0];                     // the first item's group
	const int span = runs ? (b0.n + per - 1) / per : b0.n; // a run's blocks (runs) or items
	const int hz0 = (key - b0.q0) / span;                    // the first item's (head, column block)
	const int ir0 = runs ? (key - b0.q0 - hz0 * span) * per : key - b0.q0 - hz0 * span; // and row
	const int count = runs ? min(per, b0.n - ir0) : min(per, q - key);
	// the copies' cursor: group ie (ib), head and column block ihz (head ih = ikh·(hv/hk) + irt, block iz), row ir;
	// ent is that row's table entry. The cursor steps without dividing (its divisions were ~60 instructions of a
	// step's ~1,000 a warp).
	const int rat = hv / hk;
	int ie = e0, ihz = hz0, ir = ir0, left = count, ih = hz0 / nz, iz = hz0 - ih * nz, ikh = ih / rat, irt = ih - ikh * rat;
	GdnRowBlk ib = b0;
	bool pend = ib.pr && ir0 > 0; // the run's segment first, for its state alone
	const int steps = count + pend;
	int3 ent = make_int3(rows[3 * (ib.r0 + ir)], rows[3 * (ib.r0 + ir) + 1], rows[3 * (ib.r0 + ir) + 2]);
	// issue copies the cursor's item into stage slot as one group — the first 8E rows of k and q, the first 16·XN of v
	// (zero past the row's length), the rows of T and M that hold tokens (the others are never read), the factors —
	// records it in the slot's meta, and moves the cursor on (the next entry's loads in flight until the next call).
	auto issue = [&](int slot) {
		char *sb = smr + slot * R_STAGE;
		const bool silent = pend, seg = pend || (ib.pr && ir == 0); // the run's segment, for its state alone or not
		int3 en = ent;
		if (silent) {
			const int32_t *pw = rows + 3 * ib.r0;
			en = make_int3(pw[0], pw[1], pw[2]);
		}
		const int h = ih, cb = iz * 128, kh = ikh, t0 = en.x, len = en.y;
		const int run = ie * hzn + ihz;
		if (tid == 0)
			meta[slot] = GdnRowMeta{t0, len, seg ? -run - 1 : run, h, cb, (int16_t)ib.dt, (int16_t)(seg ? (silent ? 2 : 1) : 0), ib.s, ib.fin};
		if (ir == 0 && ib.s && ib.dt == DT_F32) { // the item's state slice (128 rows of 512 bytes) into L2
			const char *sp = (const char *)ib.s + ((size_t)h * GDK * dv + cb) * 4;
#pragma unroll
			for (int j = 0; j < 2; j++) {
				const int p = tid + 256 * j; // row p / 4, 128-byte line p % 4
				asm volatile("prefetch.global.L2 [%0];\n" ::"l"(sp + (size_t)(p >> 2) * dv * 4 + (p & 3) * 128));
			}
		}
		const __nv_bfloat16 *row0 = qkv + (size_t)t0 * width;
		const int nr = 16 * ((len + 15) >> 4); // rows of T and M that the products read: the tiles holding tokens
		{ // [K; Q]: tile row n = n0 + 16j (k of token n, or q of token n − 8E), 16 pieces a row; piece c of row n at
		  // slab c / 8, chunk (c % 8) ^ (n % 8)
			const int c = tid & 15, n0 = tid >> 4, q0 = kh * GDK + 8 * c, k0 = q0 + hk * GDK;
			char *dst = sb + R_KQ + (c >> 3) * 16384 + (((c & 7) ^ (n0 & 7)) << 4) + n0 * 128;
#pragma unroll
			for (int j = 0; j < E; j++) {
				const int n = n0 + 16 * j;
				const bool isq = n >= 8 * E;
				const int t = isq ? n - 8 * E : n;
				const bool ok = t < len;
				const __nv_bfloat16 *src = row0 + (t * iw + (isq ? q0 : k0));
				cp16(dst + j * 16 * 128, ok ? src : row0, ok);
			}
		}
		{ // V: row t = t0r + 16j, 16 pieces a row
			const int c = tid & 15, t0r = tid >> 4, v0 = 2 * hk * GDK + h * dv + cb + 8 * c;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const int t = t0r + 16 * j;
				const bool ok = t < len;
				const __nv_bfloat16 *src = row0 + (t * iw + v0);
				if (t < 16 * XN) cp16(sb + R_V + (t * RV + 8 * c) * 2, ok ? src : row0, ok);
			}
		}
		const char *wp = work + ((size_t)en.z * hv + h) * GDN_WORK;
		{ // T and M: row t = tr + 32j, 8 pieces a row, piece c at chunk c ^ (t % 8)
			const int c = tid & 7, tr = tid >> 3;
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const int m = j >> 1, t = tr + 32 * (j & 1);
				if (t < nr)
					cp16(sb + (m ? R_M : R_T) + t * 128 + ((c ^ (t & 7)) << 4), wp + (size_t)m * GC * GC * 2 + (t * GC + 8 * c) * 2, true);
			}
		}
		if (tid < 5 * GC / 4) cp16(sb + R_F + 16 * tid, wp + 2 * GC * GC * 2 + 16 * tid, true);
		cp_commit();
		if (silent) { // then the item the block starts at
			pend = false;
			return;
		}
		if (--left == 0) return;
		if (++ir == ib.n) { // the next head or column block of the group, or the next group
			ir = 0;
			++ihz;
			if (++iz == nz) {
				iz = 0;
				if (++irt == rat) irt = 0, ++ikh;
				if (++ih == hv) ih = ikh = irt = ihz = 0, ib = blks[++ie];
			}
		}
		const int32_t *rw = rows + 3 * (ib.r0 + ir);
		ent = make_int3(rw[0], rw[1], rw[2]);
	};
#pragma unroll
	for (int i = 0; i < NS - 1; i++)
		if (i < steps) issue(i);
	// S₀ᵀ of the current item as A fragments, hi and lo = S₀ − hi in bf16 (as gdn_state splits S): k step kk,
	// register r holds rows c0 (r even) or c0 + 8, dimensions 16kk + 2qq (+1), plus 8 for r ≥ 2
	uint32_t sh[8][4], sl[8][4];
	// loadState splits the state slice (s of type dt; null: zero) of head h, columns cb … into sh and sl; fp32 states
	// (all but cached ones of another type) with every load in flight at once
	auto loadState = [&](const void *s, int dt, int h, int cb) {
		if (!s) { // a new state: both parts zero, as split2 leaves them
#pragma unroll
			for (int kk = 0; kk < 8; kk++)
#pragma unroll
				for (int r = 0; r < 4; r++) sh[kk][r] = sl[kk][r] = 0u;
			return;
		}
		float sv[8][4][2];
		if (dt == DT_F32) {
			const float *sp = (const float *)s + (size_t)h * GDK * dv + cb + c0;
#pragma unroll
			for (int kk = 0; kk < 8; kk++)
#pragma unroll
				for (int r = 0; r < 4; r++) {
					const int k = 16 * kk + 2 * qq + (r >> 1) * 8;
					sv[kk][r][0] = sp[(size_t)k * dv + (r & 1) * 8];
					sv[kk][r][1] = sp[(size_t)(k + 1) * dv + (r & 1) * 8];
				}
		} else {
#pragma unroll
			for (int kk = 0; kk < 8; kk++)
#pragma unroll
				for (int r = 0; r < 4; r++) {
					const int col = cb + c0 + (r & 1) * 8, k = 16 * kk + 2 * qq + (r >> 1) * 8;
					sv[kk][r][0] = ld(s, dt, ((size_t)h * GDK + k) * dv + col);
					sv[kk][r][1] = ld(s, dt, ((size_t)h * GDK + k + 1) * dv + col);
				}
		}
#pragma unroll
		for (int kk = 0; kk < 8; kk++)
#pragma unroll
			for (int r = 0; r < 4; r++) split2(sv[kk][r][0], sv[kk][r][1], sh[kk][r], sl[kk][r]);
	};
	// the first item's state while its copies are on their way
	int item = b0.pr ? -(e0 * hzn + hz0) - 1 : e0 * hzn + hz0; // a run with a segment starts from the segment's state
	loadState(b0.s, b0.dt, hz0 / nz, (hz0 % nz) * 128);
	const size_t ow = (size_t)hv * dv;
	for (int i = 0; i < steps; i++) {
		char *sb = smr + (i % NS) * R_STAGE;
		if (i + 1 < steps) // steps i and i + 1 are on their way
			cp_wait<1>();
		else
			cp_wait<0>();
		fence_async_shared();
		__syncthreads(); // item i's inputs are in; every thread is past item i − 1, whose stage item i + NS − 1 takes
		const GdnRowMeta m = meta[i % NS];
		const int h = m.h, cb = m.cb;
		if (m.item != item) {
			item = m.item;
			loadState(m.s, m.dt, h, cb);
		}
		const int t0 = m.t0, len = m.len, nb = (len + 15) >> 4;
		const uint32_t kq = smem_u32(sb + R_KQ), tb = smem_u32(sb + R_T), mb = smem_u32(sb + R_M);
		const __nv_bfloat16 *Vs = (const __nv_bfloat16 *)(sb + R_V);
		const float *F = (const float *)(sb + R_F);
		// [Xᵀ Pᵀ] = S₀ᵀ [K; Q]ᵀ: per k step the high part, then the low part of S₀. acc[4j + e] holds column c0 (e < 2)
		// or c0 + 8 of token 8j + 2qq + (e & 1) (j < E: X; j ≥ E: P of token 8(j − E) + …)
		float acc[64];
		wgmma_fence();
		rows_xp<E>(acc, sh, sl, kq);
		wgmma_commit();
		if (i + NS - 1 < steps) issue((i + NS - 1) % NS); // under the products
		wgmma_wait0();
		regs_after<64>(acc);
		// Rᵀ = fb·Vᵀ − fa·Xᵀ in bf16, as the A fragments of Δᵀ's four k steps (tokens 16s …). V's 8×8 blocks are
		// read transposed: matrix m of load j2 is tokens 8(2j2 + m / 2) …, columns 16wi + 8(m % 2) … of the
		// warpgroup's 64, so that vp[j][hf] holds (V[t][c], V[t + 1][c]) for t = 8j + 2qq, c = c0 + 8hf.
		const __nv_bfloat16 *Vw = Vs + 64 * wg + 16 * wi + 8 * ((lane >> 3) & 1) + (lane & 7) * RV; // this lane's row
		uint32_t vp[8][2];
#pragma unroll
		for (int j2 = 0; j2 < XN; j2++) {
			uint32_t r[4];
			ldsm4t(r, Vw + 8 * (2 * j2 + (lane >> 4)) * RV);
			vp[2 * j2][0] = r[0], vp[2 * j2][1] = r[1], vp[2 * j2 + 1][0] = r[2], vp[2 * j2 + 1][1] = r[3];
		}
		uint32_t ra[4][4];
#pragma unroll
		for (int j = 0; j < 2 * XN; j++) {
			const int t = 8 * j + 2 * qq;
			const float2 fa = *(const float2 *)(F + t), fb = *(const float2 *)(F + GC + t);
			const float v00 = __uint_as_float(vp[j][0] << 16), v01 = __uint_as_float(vp[j][0] & 0xffff0000u);
			const float v10 = __uint_as_float(vp[j][1] << 16), v11 = __uint_as_float(vp[j][1] & 0xffff0000u);
			if (j >= E) { // tokens past 8E: X not computed, R zero
				ra[j >> 1][2 * (j & 1)] = ra[j >> 1][2 * (j & 1) + 1] = 0u;
				continue;
			}
			ra[j >> 1][2 * (j & 1)] = pack2(fb.x * v00 - fa.x * acc[4 * j], fb.y * v01 - fa.y * acc[4 * j + 1]);
			ra[j >> 1][2 * (j & 1) + 1] = pack2(fb.x * v10 - fa.x * acc[4 * j + 2], fb.y * v11 - fa.y * acc[4 * j + 3]);
		}
		// Δᵀ = Rᵀ Tᵀ over the row's tiles (T is zero above its diagonal and past the row in its rows below nr; its
		// later rows are not copied; Δ's fragments past the row's tiles are zero)
		float D[32];
		wgmma_fence();
		rows_d<XN>(D, ra, tb);
		wgmma_commit();
		wgmma_wait0();
		regs_after<32>(D);
		uint32_t da[4][4];
#pragma unroll
		for (int s = 0; s < 4; s++)
#pragma unroll
			for (int r = 0; r < 4; r++) da[s][r] = s < nb ? pack2(D[8 * s + 2 * r], D[8 * s + 2 * r + 1]) : 0u;
		// (fk·Δ)ᵀ in bf16 as mma.sync A fragments (k step s: tokens 16s …), for a run's segment's state update
		uint32_t ua[4][4];
		if (m.kind != 0) {
#pragma unroll
			for (int s = 0; s < 4; s++)
#pragma unroll
				for (int r = 0; r < 4; r++) {
					const int t = 16 * s + 2 * qq + 8 * (r >> 1);
					const float2 fk = *(const float2 *)(F + 3 * GC + t);
					ua[s][r] = s < nb ? pack2(fk.x * D[8 * s + 2 * r], fk.y * D[8 * s + 2 * r + 1]) : 0u;
				}
		}
		// Oᵀ = fq·Pᵀ + Δᵀ Mᵀ
		float P[32]; // fq·Pᵀ: a register block of its own for the products that add M Δ to it
#pragma unroll
		for (int j = 0; j < 8; j++) {
			const int t = 8 * j + 2 * qq;
			const float2 fq = *(const float2 *)(F + 2 * GC + t);
			const float fq0 = fq.x, fq1 = fq.y;
			const bool in = j < E; // tokens past 8E: never stored
			const float *pa = acc + 4 * E + 4 * (in ? j : 0);
			P[4 * j] = in ? pa[0] * fq0 : 0.f;
			P[4 * j + 1] = in ? pa[1] * fq1 : 0.f;
			P[4 * j + 2] = in ? pa[2] * fq0 : 0.f;
			P[4 * j + 3] = in ? pa[3] * fq1 : 0.f;
		}
		wgmma_fence();
		rows_o<XN>(P, da, mb);
		wgmma_commit();
		wgmma_wait0();
		regs_after<32>(P);
		const size_t col = (size_t)h * dv + cb + c0;
		if (m.kind == 2) {
			// a run's segment for its state alone: its outputs are the other block's to write
		} else if (odt == DT_BF16) {
			// Oᵀ's 8×8 blocks stored transposed where this warp read V (its 16 columns, read by no other warp), then
			// copied out 16 bytes at a time: rows t, two pieces of 8 columns each
#pragma unroll
			for (int j2 = 0; j2 < XN; j2++) {
				const uint32_t r[4] = {pack2(P[8 * j2], P[8 * j2 + 1]), pack2(P[8 * j2 + 2], P[8 * j2 + 3]),
				                       pack2(P[8 * j2 + 4], P[8 * j2 + 5]), pack2(P[8 * j2 + 6], P[8 * j2 + 7])};
				stsm4t(Vw + 8 * (2 * j2 + (lane >> 4)) * RV, r);
			}
			__syncwarp();
			const __nv_bfloat16 *Vo = Vs + 64 * wg + 16 * wi;
			__nv_bfloat16 *ob = (__nv_bfloat16 *)o + (size_t)t0 * ow + (size_t)h * dv + cb + 64 * wg + 16 * wi;
#pragma unroll
			for (int k = 0; k < 4; k++) {
				const int t = (lane >> 1) + 16 * k, hf = lane & 1;
				if (t < len) *(uint4 *)(ob + (size_t)t * ow + 8 * hf) = *(const uint4 *)(Vo + t * RV + 8 * hf);
			}
		} else {
#pragma unroll
			for (int j = 0; j < 8; j++)
#pragma unroll
				for (int e = 0; e < 2; e++) {
					const int t = 8 * j + 2 * qq + e;
					if (t >= len) continue;
					const size_t at = (size_t)(t0 + t) * ow + col;
					st(o, odt, at, P[4 * j + e]);
					st(o, odt, at + 8, P[4 * j + 2 + e]);
				}
		}
		if (m.kind == 0) continue;
		// A run's segment: S₁ᵀ = γ_C S₀ᵀ + (fk·Δ)ᵀ K, warp wi its 16 columns × 128 dimensions as 16 n tiles of 8
		// (U[4j + e]: column c0 (e < 2) or c0 + 8, dimension 8j + 2qq + (e & 1)), S₀ from its hi and lo parts; K's
		// 8×8 blocks read transposed from the stage (tokens as the k dimension; with E odd, the last tile's tokens from
		// 8E on are the tile rows of q, read as zeros: the row has no such tokens). Then the final state where it is
		// wanted, and S₁ split as the state the run's rows continue.
		{
			const float gC = F[4 * GC];
			float U[64];
#pragma unroll
			for (int j = 0; j < 16; j++) {
				const int kk = j >> 1, r = 2 * (j & 1);
				const uint32_t h0 = sh[kk][r], l0 = sl[kk][r], h1 = sh[kk][r + 1], l1 = sl[kk][r + 1];
				U[4 * j] = gC * (__uint_as_float(h0 << 16) + __uint_as_float(l0 << 16));
				U[4 * j + 1] = gC * (__uint_as_float(h0 & 0xffff0000u) + __uint_as_float(l0 & 0xffff0000u));
				U[4 * j + 2] = gC * (__uint_as_float(h1 << 16) + __uint_as_float(l1 << 16));
				U[4 * j + 3] = gC * (__uint_as_float(h1 & 0xffff0000u) + __uint_as_float(l1 & 0xffff0000u));
			}
			const int lt = (lane & 7) + ((lane >> 3) & 1) * 8, ld8 = (lane >> 4) * 8;
#pragma unroll
			for (int s = 0; s < 4; s++) {
				if (s >= nb) break; // padding tokens add nothing
#pragma unroll
				for (int jp = 0; jp < 8; jp++) {
					const int t = 16 * s + lt, d = 16 * jp + ld8;
					uint32_t b[4];
					ldsm4t(b, sb + R_KQ + (d >> 6) * 16384 + t * 128 + ((((d >> 3) & 7) ^ (t & 7)) << 4));
					if (E % 2 == 1 && s == XN - 1) b[1] = b[3] = 0u; // tokens 8E …: the stage's q rows there, past the row
					mma16816(U + 8 * jp, ua[s], b[0], b[1]);
					mma16816(U + 8 * jp + 4, ua[s], b[2], b[3]);
				}
			}
			if (m.kind == 1 && m.fin) {
				float *fp = m.fin + (size_t)h * GDK * dv + cb + c0;
#pragma unroll
				for (int j = 0; j < 16; j++) {
					const int d = 8 * j + 2 * qq;
					fp[(size_t)d * dv] = U[4 * j];
					fp[(size_t)(d + 1) * dv] = U[4 * j + 1];
					fp[(size_t)d * dv + 8] = U[4 * j + 2];
					fp[(size_t)(d + 1) * dv + 8] = U[4 * j + 3];
				}
			}
#pragma unroll
			for (int j = 0; j < 16; j++) {
				const int kk = j >> 1, r = 2 * (j & 1);
#pragma unroll
				for (int hf = 0; hf < 2; hf++)
					split2(U[4 * j + 2 * hf], U[4 * j + 2 * hf + 1], sh[kk][r + hf], sl[kk][r + hf]);
			}
			item = -m.item - 1; // the run's rows continue S₁
		}
	}
}

#define GDN_ROWS(E)                                                                                                    \
	extern "C" __global__ void __launch_bounds__(256, 1)                                                               \
	    gdn_rows_e##E(void *o, int odt, const __nv_bfloat16 *qkv, const GdnRowBlk *blks, const int32_t *rows, int ng,  \
	                  int per, int q, int runs, int hk, int hv, int dv, const char *work) {                           \
		KEV_GRID_DEP();                                                                                                \
		gdn_rows_body<E>(o, odt, qkv, blks, rows, ng, per, q, runs, hk, hv, dv, work);                                 \
	}
GDN_ROWS(1)
GDN_ROWS(2)
GDN_ROWS(3)
GDN_ROWS(4)
GDN_ROWS(5)
GDN_ROWS(6)
GDN_ROWS(7)
GDN_ROWS(8)
