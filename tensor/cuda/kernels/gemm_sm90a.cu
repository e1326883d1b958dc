// bf16 GEMM for Hopper (sm_90a): Y[M,N] = X[M,K] · W[N,K]ᵀ (+ R[M,N]), fp32 accumulation, for M ≳ 128.
//
// Tiles of BM = 128 or 192 rows × BN columns (BN = 64 … 256), k in steps of 64. BM/64 + 1 warpgroups: warpgroup 0
// is the producer — one thread issues bulk tensor copies (TMA) of the X tile (BM×64) and the W tile (BN×64) into a
// STAGES-deep ring, each stage completing on its "full" mbarrier; warpgroups 1 … BM/64 are consumers, each owning 64
// rows of the tile: wgmma m64nBNk16 four times per stage from shared memory, then an arrive on the stage's "empty"
// mbarrier hands it back to the producer. Registers are moved from the producer to the consumers (setmaxnreg).
//
// The tensor maps use the 128-byte swizzle: a tile row is 64 bf16 = 128 bytes, 16-byte chunk c of row r lands at
// chunk c ^ (r & 7), and the wgmma descriptors name the same swizzle (8-row groups 1024 bytes apart); the k step of
// 16 elements advances the descriptor's start address by 32 bytes. Rows, columns and k outside the matrices are
// zero-filled by the copy engine; the epilogue skips rows ≥ M and columns ≥ N.
//
// Split-K as in gemm.cu: blockIdx.z owns k tiles [z·tps, (z+1)·tps), partial sums go to ws and the last split of
// a tile finishes it (gemm_splitk_finish).
//
// Chunked accumulation (128×128 tiles, one split, chunk > 0): the k tiles are summed in chunks of `chunk` tiles,
// each from zero, and the chunk sums are added in order — the same operations, in the same order, as a split-K
// launch with tps = chunk and its in-order finish, so both give the same bits. The planner uses it to keep each
// output element's reduction order a function of (N, K) alone, whatever M is.
#include "gemm.cuh"
#include "tma_ring.cuh"
#include "wgmma.cuh"

// wgmma_m64n256: d[64×256] = A[64×16] · B[256×16]ᵀ (+ d when acc ≠ 0), both bf16 K-major in shared memory
// (descriptors), fp32 d.
__device__ __forceinline__ void wgmma_m64n256(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
	             : "l"(da), "l"(db), "r"(acc));
}

// wgmma_m64n128: d[64×128] = A[64×16] · B[128×16]ᵀ (+ d when acc ≠ 0), both bf16 K-major in shared memory
// (descriptors), fp32 d.
__device__ __forceinline__ void wgmma_m64n128(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
	             : "l"(da), "l"(db), "r"(acc));
}

// wgmma_m64n192: d[64×192] = A[64×16] · B[192×16]ᵀ (+ d when acc ≠ 0), both bf16 K-major in shared memory
// (descriptors), fp32 d.
__device__ __forceinline__ void wgmma_m64n192(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95}, %96, %97, p, 1, 1, 0, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
	             : "l"(da), "l"(db), "r"(acc));
}

// wgmma_m64n80: d[64×80] = A[64×16] · B[80×16]ᵀ (+ d when acc ≠ 0), both bf16 K-major in shared memory
// (descriptors), fp32 d.
__device__ __forceinline__ void wgmma_m64n80(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %42, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39}, %40, %41, p, 1, 1, 0, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
	             : "l"(da), "l"(db), "r"(acc));
}

// wgmma_m64n96: d[64×96] = A[64×16] · B[96×16]ᵀ (+ d when acc ≠ 0), both bf16 K-major in shared memory
// (descriptors), fp32 d.
__device__ __forceinline__ void wgmma_m64n96(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47}, %48, %49, p, 1, 1, 0, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
	             : "l"(da), "l"(db), "r"(acc));
}

// wgmma_m64n144: d[64×144] = A[64×16] · B[144×16]ᵀ (+ d when acc ≠ 0), both bf16 K-major in shared memory
// (descriptors), fp32 d.
__device__ __forceinline__ void wgmma_m64n144(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n144k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71}, %72, %73, p, 1, 1, 0, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
	             : "l"(da), "l"(db), "r"(acc));
}

// wgmma_m64n160: d[64×160] = A[64×16] · B[160×16]ᵀ (+ d when acc ≠ 0), both bf16 K-major in shared memory
// (descriptors), fp32 d.
__device__ __forceinline__ void wgmma_m64n160(float *d, uint64_t da, uint64_t db, int acc) {
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %82, 0;\n"
	             "wgmma.mma_async.sync.aligned.m64n160k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79}, %80, %81, p, 1, 1, 0, 0;\n}\n"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
	             : "l"(da), "l"(db), "r"(acc));
}

template <int BN> __device__ __forceinline__ void wgmma_tile(float *d, uint64_t da, uint64_t db, int acc) {
	if constexpr (BN == 256)
		wgmma_m64n256(d, da, db, acc);
	else if constexpr (BN == 192)
		wgmma_m64n192(d, da, db, acc);
	else if constexpr (BN == 160)
		wgmma_m64n160(d, da, db, acc);
	else if constexpr (BN == 144)
		wgmma_m64n144(d, da, db, acc);
	else if constexpr (BN == 128)
		wgmma_m64n128(d, da, db, acc);
	else if constexpr (BN == 96)
		wgmma_m64n96(d, da, db, acc);
	else if constexpr (BN == 80)
		wgmma_m64n80(d, da, db, acc);
	else {
		static_assert(BN == 64, "no wgmma wrapper for this tile width");
		wgmma_m64n64(d, da, db, acc);
	}
}

template <int BM, int BN, int STAGES, bool CHUNK>
__device__ __forceinline__ void gemm_wgmma(const TensorMap *tmX, const TensorMap *tmW, void *Y, const void *R,
                                           float *ws, unsigned *cnt, int M, int N, int K, int ldy, int yF32,
                                           int tps, int chunk, int gn, int wpre) {
	constexpr int BK = 64, CONS = BM / 64; // CONS consumer warpgroups of 64 rows each
	constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
	extern __shared__ unsigned char smem_raw[];
	const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
	const uint32_t bars = base + STAGES * STAGE_BYTES; // full[STAGES], then empty[STAGES]

	const int wg = threadIdx.x >> 7;
	int m0, n0; // the tile of block (x, y), in the order of tile_at
	tile_at(blockIdx.y * gridDim.x + blockIdx.x, gridDim.x, gridDim.y, max(gn, 1), BM, BN, m0, n0);
	const int kTiles = (K + BK - 1) / BK;
	const int kt0 = blockIdx.z * tps;
	const int nk = max(0, min(kTiles, kt0 + tps) - kt0);

	ring_init<STAGES, CONS>(bars);

	if (wg == 0) {
		producer_regs();
		if (threadIdx.x == 0) {
			// wpre (W holds weights uploaded from the host, which no kernel writes): the W tiles of the first steps
			// before the wait for the kernels before this one, their X tiles after it
			const int pre = wpre ? min(STAGES, nk) : 0;
			for (int kt = 0; kt < pre; kt++) {
				mbar_expect_tx(bars + 8 * kt, STAGE_BYTES);
				tma_load2d(base + kt * STAGE_BYTES + A_BYTES, tmW, (kt0 + kt) * BK, n0, bars + 8 * kt);
			}
			kev_grid_wait();
			kev_grid_launch();
			for (int kt = 0; kt < nk; kt++) {
				const int k = (kt0 + kt) * BK;
				if (kt < pre) {
					tma_load2d(base + kt * STAGE_BYTES, tmX, k, m0, bars + 8 * kt);
					continue;
				}
				uint32_t full;
				const uint32_t sa = ring_acquire<STAGES, STAGE_BYTES>(base, bars, kt, full);
				tma_load2d(sa, tmX, k, m0, full);
				tma_load2d(sa + A_BYTES, tmW, k, n0, full);
			}
		} else {
			kev_grid_wait();
			kev_grid_launch();
		}
		return;
	}
	kev_grid_wait();
	kev_grid_launch();
	consumer_regs<BM>();
	const int c = wg - 1, t = threadIdx.x - 128;
	const bool live = m0 + 64 * c < M; // rows of this consumer exist (M ≤ 64: the second one only keeps time)
	const bool split = gridDim.z > 1;
	const bool chunked = CHUNK && !split && chunk > 0 && chunk < nk;
	float d[BN / 2];
	float tot[CHUNK ? BN / 2 : 1]; // chunked: the sum of the finished chunks
#pragma unroll
	for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
	for (int kt = 0; kt < nk; kt++) {
		const int s = kt % STAGES;
		mbar_wait(bars + 8 * s, (kt / STAGES) & 1);
		const uint32_t sa = base + s * STAGE_BYTES + c * (64 * 128), sb = base + s * STAGE_BYTES + A_BYTES;
		if (live) {
			// A block's (or a chunk's) first product overwrites d (scale-d = 0), the others add to it.
			const bool fresh = kt == 0 || (chunked && kt % chunk == 0);
			wgmma_fence();
#pragma unroll
			for (int kk = 0; kk < BK / 16; kk++)
				wgmma_tile<BN>(d, desc_sw128(sa + 32 * kk), desc_sw128(sb + 32 * kk), kk > 0 || !fresh);
			wgmma_commit();
			if constexpr (CHUNK) {
				wgmma_wait0();
				if (chunked && ((kt + 1) % chunk == 0 || kt + 1 == nk)) {
					// as gemm_splitk_finish: the first chunk's sum as it is, then each next one added
					if (kt < chunk) {
#pragma unroll
						for (int i = 0; i < BN / 2; i++) tot[i] = d[i];
					} else {
#pragma unroll
						for (int i = 0; i < BN / 2; i++) tot[i] += d[i];
					}
				}
			} else {
				wgmma_wait1(); // this step's products stay in flight; the previous step's are done
			}
		}
		if constexpr (CHUNK) {
			mbar_arrive(bars + 8 * (STAGES + s));
		} else if (kt > 0) {
			mbar_arrive(bars + 8 * (STAGES + (kt - 1) % STAGES));
		}
	}
	if constexpr (!CHUNK) {
		if (live) wgmma_wait0();
		if (nk > 0) mbar_arrive(bars + 8 * (STAGES + (nk - 1) % STAGES));
	}
	// d (or tot) is only read for rows < M, which a live consumer owns; the planner never makes an empty split.

	// Accumulator layout (per warp w of the warpgroup, lane l): d[4j + h·2 + e] is row 16w + l/4 + 8h, column
	// 8j + 2(l%4) + e of the warpgroup's 64×BN tile.
	const int w = (t >> 5) & 3, l = t & 31;
	float *part = ws + (size_t)blockIdx.z * M * N;
	if (split) {
		// Partial sums in 16-byte pieces: lanes q and q ^ 1 of a quad swap halves of column groups j and j + 1, so
		// that lane q holds four consecutive sums (group j + (q & 1), columns 4(q >> 1) …) and a warp's store
		// writes 64 contiguous bytes of each of 8 rows. The same values at the same places as pairwise stores.
		const int q = l & 3;
		const bool odd = q & 1;
#pragma unroll
		for (int j = 0; j < BN / 8; j += 2) {
			const int col = n0 + 8 * (j + odd) + 4 * (q >> 1);
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const float2 a = make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
				const float2 b = make_float2(d[4 * j + 4 + 2 * h], d[4 * j + 4 + 2 * h + 1]);
				const float2 send = odd ? a : b;
				const float2 got = make_float2(__shfl_xor_sync(0xffffffffu, send.x, 1), __shfl_xor_sync(0xffffffffu, send.y, 1));
				const float4 v = odd ? make_float4(got.x, got.y, b.x, b.y) : make_float4(a.x, a.y, got.x, got.y);
				const int row = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h;
				if (row < M && col < N) *(float4 *)(part + (size_t)row * N + col) = v;
			}
		}
		// Split-K: the last split of a tile adds the partials in order here, or, launched without tile counters
		// (cnt null), gemm_splitk_reduce does it for all tiles afterwards.
		if (cnt) gemm_splitk_finish<BM, BN>(Y, R, ws, cnt, M, N, ldy, yF32, m0, n0, t, 128 * CONS, 1);
		return;
	}
	auto store = [&](const float *acc) {
#pragma unroll
		for (int j = 0; j < BN / 8; j++) {
			const int col = n0 + 8 * j + 2 * (l & 3);
			if (col >= N) continue;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int row = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h;
				if (row >= M) continue;
				gemm_store2(Y, R, ldy, yF32, row, col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
			}
		}
	};
	if (CHUNK && chunked)
		store(tot);
	else
		store(d);
}

// quad_group8 is, as four bf16 pairs, column group j (8 columns) of row half h of a tile whose fp32 sums the four
// lanes of a quad keep in shared memory, lane q' at quad[q' + stride·i] for its accumulator i (columns 2q' + e of
// group j: i = 4j + 2h + e), plus the residual's 16 bytes r when res, rounded as gemm_store2 rounds (the same
// operations on the same values). Lane q reads lane (q + s) & 3's pair at step s, so a warp's reads hit 32 banks.
__device__ __forceinline__ uint4 quad_group8(const float *quad, int stride, int j, int h, int q, uint4 r, bool res) {
	float a[4], b[4]; // step s: lane (q + s) & 3's pair
#pragma unroll
	for (int s = 0; s < 4; s++) {
		const int qs = (q + s) & 3;
		a[s] = quad[qs + stride * (4 * j + 2 * h)];
		b[s] = quad[qs + stride * (4 * j + 2 * h + 1)];
	}
	// the pair of lane i (columns 2i, 2i + 1 of the group) came at step (i − q) & 3
	auto pair = [&](int i, uint32_t rb) -> uint32_t {
		const int s = (i - q) & 3;
		float x = s == 0 ? a[0] : s == 1 ? a[1] : s == 2 ? a[2] : a[3];
		float y = s == 0 ? b[0] : s == 1 ? b[1] : s == 2 ? b[2] : b[3];
		if (res) {
			const float2 rf = __bfloat1622float2(*(const __nv_bfloat162 *)&rb);
			x += rf.x;
			y += rf.y;
		}
		const __nv_bfloat162 o = __floats2bfloat162_rn(x, y);
		return *(const uint32_t *)&o;
	};
	return make_uint4(pair(0, r.x), pair(1, r.y), pair(2, r.z), pair(3, r.w));
}

// gemm_wgmma_persist is gemm_wgmma without splits on a persistent grid: block g takes tiles g, g + G, …
// (in the order of tile_at, so blocks running together share X and W tiles in L2), and one k-step pipeline runs
// through all of them, so the producer fills the ring for the next tile while the consumers store this one. Each tile is
// computed exactly as by gemm_wgmma (same products, same order): the same bits.
//
// CHUNKED (a batch-invariant shape whose k tiles are summed in chunks of `chunk`): each chunk is summed from zero in
// d, and at its end d is added into a second accumulator set tot in chunk order (the first chunk's sum as it is) —
// the operations of gemm_splitk_finish on split partials and of the stream-K kernel's owner, so the same bits as
// both, with the tile's whole k range in one block. tot lives in shared memory after the ring and its barriers
// (thread-major, BN/2 floats per consumer thread, conflict-free): in registers beside d it spills. Only the chunk
// ends wait for their own products; the other steps keep one wgmma group in flight.
//
// GATED (the MLP's gate and up projections, W = [Wg; Wu] with N = 2F rows): a tile's W is BN/2 rows of Wg and the
// same BN/2 rows of Wu, loaded side by side, so each thread holds the gate and up sums of the same output columns
// (accumulator groups j and j + BN/16); the epilogue stores Y[M, F] (row stride ldy) = silu(g)·u as swiglu_bf16
// would on the stored GEMM output — the same bits, without writing [g | u].
template <int BM, int BN, int STAGES, bool GATED, bool CHUNKED = false>
__device__ __forceinline__ void gemm_wgmma_persist(const TensorMap *tmX, const TensorMap *tmW, void *Y,
                                                   const void *R, int M, int N, int K, int ldy, int yF32,
                                                   int gn, int chunk, int wpre) {
	static_assert(!(GATED && CHUNKED), "the SwiGLU epilogue has no chunked twin");
	constexpr int BK = 64, CONS = BM / 64; // CONS consumer warpgroups of 64 rows each
	constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
	extern __shared__ unsigned char smem_raw[];
	const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
	const uint32_t bars = base + STAGES * STAGE_BYTES; // full[STAGES], then empty[STAGES]
	constexpr int TN = GATED ? BN / 2 : BN; // output columns of a tile
	const int NO = GATED ? N / 2 : N;       // output columns
	const int mT = (M + BM - 1) / BM, nT = (NO + TN - 1) / TN, T = mT * nT;
	const int kTiles = (K + BK - 1) / BK;
	const int wg = threadIdx.x >> 7;
	ring_init<STAGES, CONS>(bars);

	if (wg == 0) {
		producer_regs();
		if (threadIdx.x == 0) {
			// wpre (W holds weights uploaded from the host, which no kernel writes): the W tiles of the first
			// STAGES steps before the wait for the kernels before this one, their X tiles after it
			auto loadW = [&](uint32_t sa, int kt, int n0, uint32_t full) {
				tma_load2d(sa + A_BYTES, tmW, kt * BK, n0, full);
				if constexpr (GATED) tma_load2d(sa + A_BYTES + TN * 128, tmW, kt * BK, NO + n0, full);
			};
			int pre = 0;
			for (int tile = blockIdx.x; wpre && tile < T && pre < STAGES; tile += gridDim.x) {
				int m0, n0;
				tile_at(tile, mT, nT, gn, BM, TN, m0, n0);
				for (int kt = 0; kt < kTiles && pre < STAGES; kt++, pre++) {
					mbar_expect_tx(bars + 8 * pre, STAGE_BYTES);
					loadW(base + pre * STAGE_BYTES, kt, n0, bars + 8 * pre);
				}
			}
			kev_grid_wait();
			kev_grid_launch();
			int it = 0;
			for (int tile = blockIdx.x; tile < T; tile += gridDim.x) {
				int m0, n0;
				tile_at(tile, mT, nT, gn, BM, TN, m0, n0);
				for (int kt = 0; kt < kTiles; kt++, it++) {
					if (it < pre) {
						tma_load2d(base + it * STAGE_BYTES, tmX, kt * BK, m0, bars + 8 * it);
						continue;
					}
					uint32_t full;
					const uint32_t sa = ring_acquire<STAGES, STAGE_BYTES>(base, bars, it, full);
					tma_load2d(sa, tmX, kt * BK, m0, full);
					loadW(sa, kt, n0, full);
				}
			}
		} else {
			kev_grid_wait();
			kev_grid_launch();
		}
		return;
	}
	kev_grid_wait();
	kev_grid_launch();
	consumer_regs<BM>();
	const int c = wg - 1, t = threadIdx.x - 128;
	const int w = (t >> 5) & 3, l = t & 31;
	float d[BN / 2];
	// CHUNKED: the sum of the tile's finished chunks, tot(i) for d[i]
	float *const tsm = (float *)(smem_raw + (base - smem_u32(smem_raw)) + STAGES * STAGE_BYTES + 16 * STAGES) + t;
	auto tot = [&](int i) -> float & { return tsm[128 * CONS * i]; };
#pragma unroll
	for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
	int it = 0;
	for (int tile = blockIdx.x; tile < T; tile += gridDim.x) {
		int m0, n0;
		tile_at(tile, mT, nT, gn, BM, TN, m0, n0);
		const bool live = m0 + 64 * c < M;
		for (int kt = 0, kc = 0; kt < kTiles; kt++, it++) { // kc: k tiles of the chunk so far
			const int s = it % STAGES;
			mbar_wait(bars + 8 * s, (it / STAGES) & 1);
			if (live) {
				const uint32_t sa = base + s * STAGE_BYTES + c * (64 * 128), sb = base + s * STAGE_BYTES + A_BYTES;
				// A tile's (CHUNKED: a chunk's) first product overwrites d (scale-d = 0), the others add to it.
				const bool fresh = CHUNKED ? kc == 0 : kt == 0;
				wgmma_fence();
#pragma unroll
				for (int kk = 0; kk < BK / 16; kk++)
					wgmma_tile<BN>(d, desc_sw128(sa + 32 * kk), desc_sw128(sb + 32 * kk), kk > 0 || !fresh);
				wgmma_commit();
				if (CHUNKED && (kc + 1 == chunk || kt + 1 == kTiles)) {
					wgmma_wait0(); // the chunk's sum is complete: into tot, as gemm_splitk_finish adds partials
					if (kt < chunk) {
#pragma unroll
						for (int i = 0; i < BN / 2; i++) tot(i) = d[i];
					} else {
#pragma unroll
						for (int i = 0; i < BN / 2; i++) tot(i) += d[i];
					}
				} else {
					wgmma_wait1();
				}
			}
			if constexpr (CHUNKED) kc = kc + 1 == chunk ? 0 : kc + 1;
			if (kt > 0) mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
		}
		if (live) wgmma_wait0();
		mbar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
		if (!live) continue;
		auto acc = [&](int i) { return CHUNKED ? tot(i) : d[i]; };
		// The bf16 pair of accumulator group j, row half h, as stored (SwiGLU applied, or rounded).
		auto pair = [&](int j, int h) -> uint32_t {
			float v0, v1;
			if constexpr (GATED) {
				constexpr int U = 4 * (TN / 8); // the up sums of the same columns
				v0 = swiglu1(d[4 * j + 2 * h], d[U + 4 * j + 2 * h]);
				v1 = swiglu1(d[4 * j + 2 * h + 1], d[U + 4 * j + 2 * h + 1]);
			} else {
				v0 = acc(4 * j + 2 * h);
				v1 = acc(4 * j + 2 * h + 1);
			}
			const __nv_bfloat162 b = __floats2bfloat162_rn(v0, v1);
			return *(const uint32_t *)&b;
		};
		// Whole sectors: for four column groups at a time, the quad's lanes (l & 3 = q) hold 4 bytes of each group of
		// a row; a 4 × 4 transpose by shuffles gives lane q the 16 bytes of group 4g + q, stored at once (each
		// instruction then writes 64 contiguous bytes of 8 rows instead of 16 of 8). bf16 output without a residual
		// and a row stride of whole 16-byte pieces; the same values as the pairwise stores below.
		// CHUNKED: the sums are in shared memory, so lane q reads its group there (quad_group8), with the residual's
		// 16 bytes when there is one.
		constexpr int G4 = (TN / 8) / 4; // groups of four column groups
		const bool wide = !yF32 && (CHUNKED || !R) && (ldy & 7) == 0;
		const int q = l & 3;
		if (CHUNKED && wide) {
#pragma unroll
			for (int g = 0; g < G4; g++) {
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int row = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h, col = n0 + 8 * (4 * g + q);
					const bool ok = row < M && col < NO; // N, a multiple of 8: whole groups
					const size_t at = (size_t)row * ldy + col;
					uint4 r = make_uint4(0u, 0u, 0u, 0u);
					if (R && ok) r = *(const uint4 *)((const __nv_bfloat16 *)R + at);
					const uint4 v = quad_group8(&tot(0) - q, 128 * CONS, 4 * g + q, h, q, r, R != nullptr);
					if (ok) *(uint4 *)((__nv_bfloat16 *)Y + at) = v;
				}
			}
		} else if (wide) {
#pragma unroll
			for (int g = 0; g < G4; g++) {
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int row = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h;
					const uint32_t p0 = pair(4 * g, h), p1 = pair(4 * g + 1, h), p2 = pair(4 * g + 2, h), p3 = pair(4 * g + 3, h);
					uint32_t o[4];
#pragma unroll
					for (int r = 0; r < 4; r++) {
						// round r: lane q sends its piece of group (q − r) & 3 and receives lane (q + r) & 3's piece
						// of group q
						const int k = (q - r) & 3;
						const uint32_t x = k == 0 ? p0 : k == 1 ? p1 : k == 2 ? p2 : p3;
						o[r] = __shfl_sync(0xffffffffu, x, (l & ~3) | ((q + r) & 3));
					}
					// piece i of group q (lane i's) is o[(i − q) & 3]
					uint4 v;
					v.x = q == 0 ? o[0] : q == 1 ? o[3] : q == 2 ? o[2] : o[1];
					v.y = q == 0 ? o[1] : q == 1 ? o[0] : q == 2 ? o[3] : o[2];
					v.z = q == 0 ? o[2] : q == 1 ? o[1] : q == 2 ? o[0] : o[3];
					v.w = q == 0 ? o[3] : q == 1 ? o[2] : q == 2 ? o[1] : o[0];
					const int col = n0 + 8 * (4 * g + q);
					if (row >= M || col >= NO) continue;
					__nv_bfloat16 *yp = (__nv_bfloat16 *)Y + (size_t)row * ldy + col;
					if (col + 8 <= NO) {
						*(uint4 *)yp = v;
					} else { // a partial group at the matrix's right edge: its pairs one by one
						const uint32_t pc[4] = {v.x, v.y, v.z, v.w};
						for (int i = 0; i < 4 && col + 2 * i < NO; i++) *(uint32_t *)(yp + 2 * i) = pc[i];
					}
				}
			}
		}
#pragma unroll
		for (int j = 0; j < TN / 8; j++) {
			if (wide && j < 4 * G4) continue;
			const int col = n0 + 8 * j + 2 * (l & 3);
			if (col >= NO) continue;
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int row = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h;
				if (row >= M) continue;
				if constexpr (GATED) {
					constexpr int U = 4 * (TN / 8); // the up sums of the same columns
					const float v0 = swiglu1(d[4 * j + 2 * h], d[U + 4 * j + 2 * h]);
					const float v1 = swiglu1(d[4 * j + 2 * h + 1], d[U + 4 * j + 2 * h + 1]);
					*(__nv_bfloat162 *)((__nv_bfloat16 *)Y + (size_t)row * ldy + col) = __floats2bfloat162_rn(v0, v1);
				} else {
					gemm_store2(Y, R, ldy, yF32, row, col, acc(4 * j + 2 * h), acc(4 * j + 2 * h + 1));
				}
			}
		}
	}
}

#define WP_PARAMS                                                                                                \
	const __grid_constant__ TensorMap tmX, const __grid_constant__ TensorMap tmW, void *Y, const void *R, int M, \
	    int N, int K, int ldy, int yF32, int gn
#define WP_ARGS &tmX, &tmW, Y, R, M, N, K, ldy, yF32, gn

// Persistent tile kernels, one block per multiprocessor at most, for every tile width of the wave kernels below,
// and their SwiGLU-fused twins (gemm_wgmma_gBMxBN: Y = silu(X·Wgᵀ)·(X·Wuᵀ), R and yF32 unused). BM rows: 128
// (384 threads) or 192 (three consumer warpgroups, 512 threads: each W tile read once for 192 rows of X, so that M
// just above a multiple of 128 — 257 … 384, 513 … 576 — does not pay a whole extra row of tiles; no 256-wide twin:
// its 128 accumulators per thread do not fit beside the rest in 152 registers).
#define WP_TILE(BM, BN, STAGES)                                                                                   \
	extern "C" __global__ void __launch_bounds__(128 * (BM / 64 + 1), 1) gemm_wgmma_p##BM##x##BN(WP_PARAMS, int wpre) {      \
		KEV_GRID_DEP_DEFERRED();                                                                                  \
		gemm_wgmma_persist<BM, BN, STAGES, false>(WP_ARGS, 0, wpre);                                                      \
	}                                                                                                          \
	extern "C" __global__ void __launch_bounds__(128 * (BM / 64 + 1), 1) gemm_wgmma_g##BM##x##BN(WP_PARAMS, int wpre) {      \
		KEV_GRID_DEP_DEFERRED();                                                                                  \
		gemm_wgmma_persist<BM, BN, STAGES, true>(WP_ARGS, 0, wpre);                                                       \
	}
WP_TILE(128, 64, 8)
WP_TILE(128, 96, 7)
WP_TILE(128, 128, 6)
WP_TILE(128, 144, 6)
WP_TILE(128, 192, 5)
WP_TILE(128, 256, 4)
WP_TILE(192, 64, 7)
WP_TILE(192, 96, 6)
WP_TILE(192, 128, 5)
WP_TILE(192, 144, 5)
WP_TILE(192, 192, 4)

// Persistent chunked tile kernel (CHUNKED above) for the batch-invariant shapes whose k tiles are summed in chunks,
// at M where X does not fit in L2: the bits of the stream-K kernel and of split-K with one split per chunk, without
// partial sums in memory, in 128×160 tiles (N = 2,560 in 16 of them), four stages beside the 80 KiB of chunk sums.
// (128×128 with the sums in registers, 128×192 and 192×128 were built, bit-tested and measured: slower than the
// stream-K kernel or this one at every M measured.)
extern "C" __global__ void __launch_bounds__(384, 1) gemm_wgmma_c128x160(WP_PARAMS, int chunk, int wpre) {
	KEV_GRID_DEP_DEFERRED();
	gemm_wgmma_persist<128, 160, 4, false, true>(WP_ARGS, chunk, wpre);
}

#define WG_PARAMS                                                                                                \
	const __grid_constant__ TensorMap tmX, const __grid_constant__ TensorMap tmW, void *Y, const void *R,      \
	    float *ws, unsigned *cnt, int M, int N, int K, int ldy, int yF32, int tps, int chunk, int gn
#define WG_ARGS &tmX, &tmW, Y, R, ws, cnt, M, N, K, ldy, yF32, tps, chunk, gn

// Wave kernels (one block per tile, split-K), tiles of 128 or 192 rows (as WP_TILE). Stages: as many as fit in
// 227 KiB of shared memory. Only the 128×128 kernel has the chunked accumulation (CHUNK: a second accumulator set;
// the wider tiles' registers would not fit it, and they run a chunked shape as split-K with one split per chunk).
#define WG_TILE(BM, BN, STAGES, CHUNK)                                                                            \
	extern "C" __global__ void __launch_bounds__(128 * (BM / 64 + 1), 1) gemm_wgmma_##BM##x##BN(WG_PARAMS, int wpre) {       \
		KEV_GRID_DEP_DEFERRED();                                                                                  \
		gemm_wgmma<BM, BN, STAGES, CHUNK>(WG_ARGS, wpre);                                                              \
	}
WG_TILE(128, 256, 4, false)
WG_TILE(128, 128, 6, true)
WG_TILE(128, 64, 8, false)
WG_TILE(128, 96, 7, false)
WG_TILE(128, 144, 6, false)
WG_TILE(128, 192, 5, false)
WG_TILE(192, 64, 7, false)
WG_TILE(192, 96, 6, false)
WG_TILE(192, 128, 5, false)
WG_TILE(192, 144, 5, false)
WG_TILE(192, 192, 4, false)

// gemm_splitk_reduce ends a split-K launch made without tile counters: for every output element it adds the
// splits' partial sums ws[z][M][N] in split order, then the residual, and stores Y — the operations of
// gemm_splitk_finish, so the same bits, but spread over the whole GPU instead of one block per tile. One thread per
// 4 consecutive columns of a row (N is a multiple of 8), grid-stride.
extern "C" __global__ void __launch_bounds__(256) gemm_splitk_reduce(void *Y, const void *R, const float *ws, int M,
                                                                     int N, int ldy, int yF32, int splits) {
	KEV_GRID_DEP();
	const int Q = N / 4;
	const long long n = (long long)M * Q;
	const size_t plane = (size_t)M * N;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		const int row = (int)(i / Q), col = (int)(i % Q) * 4;
		const float4 s = gemm_split_sum4(ws + (size_t)row * N + col, plane, splits);
		gemm_store2(Y, R, ldy, yF32, row, col, s.x, s.y);
		gemm_store2(Y, R, ldy, yF32, row, col + 2, s.z, s.w);
	}
}

// ---- Persistent stream-K schedule ----
//
// The k tiles of every output tile are cut into nch = ⌈k tiles / chunk⌉ chunks of `chunk` tiles; the chunk size is
// a function of (N, K) alone (the planner's). A unit is one (tile, chunk) pair. The launch has one block per
// multiprocessor (gridDim.x = G); tiles are numbered as tile_at places them (so blocks running at the same time
// share X and W tiles in L2). The first skTiles tiles are stream-K: their skTiles·nch units are dealt out as contiguous ranges,
// block g taking units [⌊gU/G⌋, ⌊(g+1)U/G⌋); the remaining tiles are whole, block g taking tiles skTiles + g,
// skTiles + g + G, … after its stream-K range. One k-tile pipeline (TMA ring, as gemm_wgmma) runs through all of a
// block's units.
//
// Each chunk is summed from zero in the accumulators. The block that holds a tile's first chunk (its owner) adds
// its chunk sums in chunk order into a running sum in shared memory (64 KiB: each thread's 64 values, thread-major,
// conflict-free; registers are too few for a second accumulator set next to the fix-up's loads), exactly as
// gemm_splitk_finish adds split partials; any other block stores each of its chunk sums separately. A tile held whole is stored from the registers. A tile
// shared by several blocks: the owner stores its running sum, the others their chunk sums, each block then counts
// itself in cnt[tile], and the last one adds the remaining chunk sums to the owner's in chunk order and stores Y
// (the counter is reset for the next launch). Whatever M, G and skTiles are, every output element is therefore
// ((p₀ + p₁) + p₂) + … over the same chunks — the bits of split-K with one split per chunk.

// sk_owner returns the block whose unit range [⌊gU/G⌋, ⌊(g+1)U/G⌋) holds unit u.
__device__ __forceinline__ int sk_owner(long long u, long long U, int G) {
	return (int)(((u + 1) * G + U - 1) / U) - 1;
}

template <int BN, int STAGES>
__device__ __forceinline__ void gemm_sk(const TensorMap *tmX, const TensorMap *tmW, void *Y, const void *R,
                                        float *ws, unsigned *cnt, int M, int N, int K, int ldy, int yF32,
                                        int chunk, int skTiles, int gn) {
	constexpr int BM = 128, BK = 64;
	constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
	extern __shared__ unsigned char smem_raw[];
	__shared__ unsigned s_last;
	const uint32_t base = (smem_u32(smem_raw) + 1023) & ~1023u;
	const uint32_t bars = base + STAGES * STAGE_BYTES; // full[STAGES], then empty[STAGES]
	float *tot = (float *)(smem_raw + (base - smem_u32(smem_raw)) + STAGES * STAGE_BYTES + 256); // [BN/2][256]

	const int mT = (M + BM - 1) / BM, nT = (N + BN - 1) / BN, T = mT * nT;
	const int kTiles = (K + BK - 1) / BK, nch = (kTiles + chunk - 1) / chunk;
	const int G = gridDim.x, g = blockIdx.x;
	const long long U = (long long)skTiles * nch;
	const long long ua = U * g / G, ub = U * (g + 1) / G;

	// run calls piece(tile, ja, jb) for the block's runs of chunks [ja, jb) of one tile, in order (one call site, so
	// that the k loop is inlined once and the accumulators stay in place).
	auto run = [&](auto &&piece) {
		long long u = ua;
		int whole = skTiles + g;
		for (;;) {
			int tile, ja, jb;
			if (u < ub) {
				tile = (int)(u / nch), ja = (int)(u % nch);
				jb = (int)min((long long)nch, ja + (ub - u));
				u += jb - ja;
			} else if (whole < T) {
				tile = whole, ja = 0, jb = nch;
				whole += G;
			} else {
				break;
			}
			piece(tile, ja, jb);
		}
	};

	const int wg = threadIdx.x >> 7;
	ring_init<STAGES>(bars);

	if (wg == 0) {
		producer_regs();
		if (threadIdx.x == 0) {
			int it = 0;
			run([&](int tile, int ja, int jb) {
				int m0, n0;
				tile_at(tile, mT, nT, gn, BM, BN, m0, n0);
				const int k1 = min(kTiles, jb * chunk);
				for (int kt = ja * chunk; kt < k1; kt++, it++) {
					uint32_t full;
					const uint32_t sa = ring_acquire<STAGES, STAGE_BYTES>(base, bars, it, full);
					tma_load2d(sa, tmX, kt * BK, m0, full);
					tma_load2d(sa + A_BYTES, tmW, kt * BK, n0, full);
				}
			});
		}
		return;
	}
	consumer_regs<128>();
	const int c = wg - 1, tid = threadIdx.x - 128;
	const int w = (tid >> 5) & 3, l = tid & 31;
	const int slotRows = min(M, BM);
	const size_t slotSize = (size_t)slotRows * BN;
	float d[BN / 2];
#pragma unroll
	for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
	float *mine = tot + tid; // this thread's running sum: mine[256 i], i < BN/2
	int it = 0;

	run([&](int tile, int ja, int jb) {
		int m0, n0;
		tile_at(tile, mT, nT, gn, BM, BN, m0, n0);
		const bool live = m0 + 64 * c < M; // rows of this consumer exist (M ≤ 64: the second one only keeps time)
		// Accumulator layout (per warp w of the warpgroup, lane l): acc[4j + h·2 + e] is row 16w + l/4 + 8h,
		// column 8j + 2(l%4) + e of the warpgroup's 64×BN tile.
		auto toSlot = [&](const float *acc, int stride, int j) { // acc[stride·i]: d (stride 1) or mine (256)
			float *slot = ws + ((size_t)tile * nch + j) * slotSize;
#pragma unroll
			for (int jj = 0; jj < BN / 8; jj++) {
				const int cl = 8 * jj + 2 * (l & 3);
				if (n0 + cl >= N) continue;
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int rl = 64 * c + 16 * w + (l >> 2) + 8 * h;
					if (m0 + rl >= M) continue;
					*(float2 *)(slot + (size_t)rl * BN + cl) =
					    make_float2(acc[stride * (4 * jj + 2 * h)], acc[stride * (4 * jj + 2 * h + 1)]);
				}
			}
		};
		for (int j = ja; j < jb; j++) {
			const int k0 = j * chunk, k1 = min(kTiles, k0 + chunk);
			for (int kt = k0; kt < k1; kt++, it++) {
				const int s = it % STAGES;
				mbar_wait(bars + 8 * s, (it / STAGES) & 1);
				if (live) {
					const uint32_t sa = base + s * STAGE_BYTES + c * (64 * 128), sb = base + s * STAGE_BYTES + A_BYTES;
					// A chunk's first product overwrites d (scale-d = 0), the others add to it.
					wgmma_fence();
#pragma unroll
					for (int kk = 0; kk < BK / 16; kk++)
						wgmma_tile<BN>(d, desc_sw128(sa + 32 * kk), desc_sw128(sb + 32 * kk), kk > 0 || kt != k0);
					wgmma_commit();
					wgmma_wait0();
				}
				mbar_arrive(bars + 8 * (STAGES + s));
			}
			if (!live) continue;
			if (ja == 0) { // the owner: chunk sums added in order, as gemm_splitk_finish does
				if (j == 0) {
#pragma unroll
					for (int i = 0; i < BN / 2; i++) mine[256 * i] = d[i];
				} else {
#pragma unroll
					for (int i = 0; i < BN / 2; i++) mine[256 * i] += d[i];
				}
			} else {
				toSlot(d, 1, j);
			}
		}
		if (ja == 0 && jb == nch) { // the whole tile here
			if (!live) return;
			if (!yF32 && (ldy & 7) == 0) {
				// Whole sectors: lane q of a quad takes column group 4g + q of its row from the quad's sums in shared
				// memory (quad_group8) with the residual's 16 bytes and stores 16 bytes: 64 contiguous bytes of 8 rows
				// a warp instruction instead of 16. The operations of gemm_store2, on the same values.
				const int q = l & 3;
				const float *quad = tot + (tid & ~3);
#pragma unroll
				for (int g = 0; g < BN / 32; g++) {
					const int jj = 4 * g + q, col = n0 + 8 * jj;
#pragma unroll
					for (int h = 0; h < 2; h++) {
						const int row = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h;
						const bool ok = row < M && col < N;
						const size_t at = (size_t)row * ldy + col;
						uint4 r = make_uint4(0u, 0u, 0u, 0u);
						if (R && ok) r = *(const uint4 *)((const __nv_bfloat16 *)R + at);
						const uint4 o = quad_group8(quad, 256, jj, h, q, r, R != nullptr);
						if (ok) *(uint4 *)((__nv_bfloat16 *)Y + at) = o;
					}
				}
				return;
			}
#pragma unroll
			for (int jj = 0; jj < BN / 8; jj++) {
				const int col = n0 + 8 * jj + 2 * (l & 3);
				if (col >= N) continue;
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int row = m0 + 64 * c + 16 * w + (l >> 2) + 8 * h;
					if (row < M)
						gemm_store2(Y, R, ldy, yF32, row, col, mine[256 * (4 * jj + 2 * h)], mine[256 * (4 * jj + 2 * h + 1)]);
				}
			}
			return;
		}
		if (ja == 0 && live) toSlot(mine, 256, 0);

		// Count this block in; the last of the tile's blocks finishes it.
		const long long u0 = (long long)tile * nch;
		const int owner = sk_owner(u0, U, G);
		__threadfence();
		gemm_bar(1, 256);
		if (tid == 0) {
			// the blocks holding some of the tile's chunks (when there are fewer units than blocks, the blocks
			// between two holders may hold nothing, so the owners' span is not the count)
			unsigned blocks = 0;
			for (int j = 0, prev = -1; j < nch; j++) {
				const int o = sk_owner(u0 + j, U, G);
				blocks += o != prev;
				prev = o;
			}
			const unsigned prev = atomicAdd(&cnt[tile], 1u);
			s_last = prev == blocks - 1;
			if (s_last) cnt[tile] = 0;
		}
		gemm_bar(1, 256);
		if (!s_last) return;
		__threadfence();

		// The owner's running sum covers chunks [0, e0]; add chunks e0+1 … nch-1 in order. Loads are issued four
		// elements × four chunks at a time so that the fix-up is not a chain of L2 round trips.
		const int e0 = (int)(min(U * (owner + 1) / G, u0 + nch) - 1 - u0);
		const int rows = min(BM, M - m0), cols = min(BN, N - n0);
		constexpr int Q = BN / 4;
		const float *slot0 = ws + (size_t)u0 * slotSize;
		for (int i0 = tid; i0 < rows * Q; i0 += 4 * 256) {
			float4 acc[4];
			int off[4];
			bool ok[4];
#pragma unroll
			for (int q = 0; q < 4; q++) {
				const int i = i0 + 256 * q;
				ok[q] = i < rows * Q && (i % Q) * 4 < cols;
				off[q] = (i / Q) * BN + (i % Q) * 4;
				acc[q] = ok[q] ? __ldcg((const float4 *)(slot0 + off[q])) : make_float4(0.f, 0.f, 0.f, 0.f);
			}
			for (int j = e0 + 1; j < nch; j += 4) {
				float4 v[4][4];
#pragma unroll
				for (int jj = 0; jj < 4; jj++)
#pragma unroll
					for (int q = 0; q < 4; q++)
						if (j + jj < nch && ok[q]) v[jj][q] = __ldcg((const float4 *)(slot0 + (size_t)(j + jj) * slotSize + off[q]));
#pragma unroll
				for (int jj = 0; jj < 4; jj++)
#pragma unroll
					for (int q = 0; q < 4; q++)
						if (j + jj < nch && ok[q]) {
							acc[q].x += v[jj][q].x;
							acc[q].y += v[jj][q].y;
							acc[q].z += v[jj][q].z;
							acc[q].w += v[jj][q].w;
						}
			}
#pragma unroll
			for (int q = 0; q < 4; q++) {
				if (!ok[q]) continue;
				const int row = m0 + off[q] / BN, col = n0 + off[q] % BN;
				gemm_store2(Y, R, ldy, yF32, row, col, acc[q].x, acc[q].y);
				gemm_store2(Y, R, ldy, yF32, row, col + 2, acc[q].z, acc[q].w);
			}
		}
	});
}

#define SK_PARAMS WG_PARAMS, int skTiles
#define SK_ARGS &tmX, &tmW, Y, R, ws, cnt, M, N, K, ldy, yF32, chunk, skTiles, gn

// Persistent stream-K, 128×128 tiles, 5 stages of 32 KiB, then 256 bytes of barriers and the owner's 64 KiB
// running sum (dynamic shared memory 5·32 KiB + 1 KiB alignment + 256 + 64 KiB); gridDim.x blocks (one per
// multiprocessor). tps is unused.
extern "C" __global__ void __launch_bounds__(384, 1) gemm_wgmma_sk_128x128(SK_PARAMS) {
	KEV_GRID_DEP();
	gemm_sk<128, 5>(SK_ARGS);
}
