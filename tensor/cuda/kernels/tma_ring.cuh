// The Hopper (sm_90a) pieces the TMA-fed warpgroup GEMMs share (gemm_sm90a.cu, fp8_sm90a.cu): the tensor map
// passed by value, the mbarriers, the bulk tensor copy, the producer/consumer ring of stages, the register hand-over
// between warpgroups (setmaxnreg) and the order of output tiles.
#pragma once
#include <stdint.h>

// TensorMap is a CUtensorMap passed by value (__grid_constant__).
struct __align__(64) TensorMap {
	unsigned long long v[16];
};

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
	asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, unsigned bytes) {
	asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
	             "r"(bytes)
	             : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
	asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
	unsigned done;
	do {
		asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
		             : "=r"(done)
		             : "r"(bar), "r"(parity)
		             : "memory");
	} while (!done);
}

// tma_load2d copies the box at (c0 = column, c1 = row) of the tensor map into shared dst, completing on bar.
__device__ __forceinline__ void tma_load2d(uint32_t dst, const TensorMap *map, int c0, int c1, uint32_t bar) {
	asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
	             "%3}], [%4];\n" ::"r"(dst),
	             "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
	             : "memory");
}

// ring_init prepares the STAGES-deep TMA ring's barriers at bars (full[STAGES], then empty[STAGES]): a stage is full
// when the producer's announced bytes have landed (one arrival, its expect_tx), empty when the CONS consumer
// warpgroups (128·CONS threads) have arrived. Thread 0 initialises them; then the whole block synchronises.
template <int STAGES, int CONS = 2> __device__ __forceinline__ void ring_init(uint32_t bars) {
	if (threadIdx.x == 0) {
		for (int s = 0; s < STAGES; s++) {
			mbar_init(bars + 8 * s, 1);
			mbar_init(bars + 8 * (STAGES + s), 128 * CONS);
		}
		asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
	}
	__syncthreads();
}

// ring_acquire is the producer's step it of the ring at base: it waits until the stage's previous use has been
// consumed, announces the stage's STAGE_BYTES on its full barrier (returned in full) and returns its shared address.
template <int STAGES, int STAGE_BYTES>
__device__ __forceinline__ uint32_t ring_acquire(uint32_t base, uint32_t bars, int it, uint32_t &full) {
	const int s = it % STAGES;
	if (it >= STAGES) mbar_wait(bars + 8 * (STAGES + s), ((it / STAGES) + 1) & 1);
	full = bars + 8 * s;
	mbar_expect_tx(full, STAGE_BYTES);
	return base + s * STAGE_BYTES;
}

// producer_regs and consumer_regs move registers from the producer warpgroup to the consumers (setmaxnreg). A block
// of BM/64 consumer warpgroups and one producer launches with 65,536 / (128 · (BM/64 + 1)) registers per thread
// (ptxas gives every thread the launch bound's maximum when a kernel uses setmaxnreg): 168 at 384 threads, 128 at
// 512. The producer keeps 40; the consumers take what that frees, in multiples of 8.
__device__ __forceinline__ void producer_regs() { asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n"); }

template <int BM> __device__ __forceinline__ void consumer_regs() {
	static_assert(BM == 128 || BM == 192, "tiles of 128 or 192 rows");
	if constexpr (BM == 128)
		asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n"); // 40·128 + 232·256 ≤ 65,536
	else
		asm volatile("setmaxnreg.inc.sync.aligned.u32 152;\n"); // 40·128 + 152·384 ≤ 65,536
}

// tile_at places output tile t of an mT × nT grid of tiles (BM rows, TN columns): the tiles go in groups of gn
// n-tiles (the last group narrower when gn does not divide nT), n fastest within a group, then m. The blocks that
// run at the same time then cover a few n-tiles of many m-tiles, so both the X rows and the W rows they read are
// shared in L2 (m-fastest order over all of a tall X streamed X from memory once per n-tile). gn = 1 is m-fastest.
// gn < 0 (persistent kernels, whose block b runs tiles b, b + gridDim.x, …): m-fastest with the m-tiles of n-tile n
// rotated by ⌊n·mT / gridDim.x⌋, the round of tiles that n-tile starts in. When gridDim.x is a multiple of mT, a
// block's tiles in plain m-fastest order would all have the same m; rotated, its successive rounds take successive
// m-tiles, so the tiles of a partial last row of tiles (fewer live consumers, cheaper) are shared out among the
// blocks instead of falling to the same ones, while the m-tiles of an n-tile still run side by side.
__device__ __forceinline__ void tile_at(int t, int mT, int nT, int gn, int BM, int TN, int &m0, int &n0) {
	if (gn < 0) {
		const int n = t / mT;
		m0 = ((t - n * mT + n * mT / (int)gridDim.x) % mT) * BM;
		n0 = n * TN;
		return;
	}
	const int per = mT * gn, g = t / per, r = t - g * per;
	const int nb = g * gn, w = min(gn, nT - nb);
	m0 = (r / w) * BM;
	n0 = (nb + r % w) * TN;
}
