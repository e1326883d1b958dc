// Package cuda runs the engine on NVIDIA GPUs (compute capability 8.0 or newer): Backend implements
// tensor.Backend and registers itself as "cuda" when the package is imported (built with the cuda tag); the GPU
// is opened only when tensor.Open("cuda") is called:
//
//	import _ "github.com/kevgo/kev/tensor/cuda"
//	b, err := tensor.Open("cuda")
//
// The GPU's context belongs to one goroutine locked to its OS thread; an operation called from elsewhere is handed
// over to it (tens of microseconds). Run a whole model pass inside Backend.Run (tensor.Run) to call every
// operation there directly: a pass then costs about its device time.
//
// With KEV_CUDA_GRAPHS=on (or a number of graphs, or Device.SetGraphs(n > 0)), passes inside Run are replayed as
// CUDA graphs: the queue records a pass's launches, copies and fills with their parameters and stages its index
// uploads in one buffer, and issues every 128 operations (and at each read-back) either the graph kept for records
// of that shape (the same kernels with the same parameter layouts, copies and fills, in the same order), with the
// nodes whose launch shapes, parameters, addresses or sizes differ from its last replay set first, a new capture
// when the shape is seen the second time, or the work itself. Uploaded contents (token ids, segment tables) are
// not part of a record. So a pass on a new state, at new addresses, or with other token counts replays the graph
// of a pass like it. Graphs are off by default until they are measured to win in serving. Launch profiles run
// eagerly.
//
// Below the backend, Device and Queue give typed access to every kernel. Kernels are CUDA C++ sources in
// kernels/, compiled by `go generate` (kernels/build.sh, nvcc 12.x) to PTX that is committed and embedded; each
// module is loaded once per context from the machine code built for the GPU at hand (or its PTX, which the driver
// compiles). Every kernel has one typed Go method on Queue. On compute capability 9.0 the modules come from
// compute_90 PTX and kernels are launched as programmatic dependents of the kernel before them
// (cuLaunchKernelEx): a kernel's blocks may become resident while the one before it finishes, and each kernel
// waits for that grid (griddepcontrol.wait, kernels/pdl.cuh) before touching memory, so launch gaps overlap the
// previous kernel's tail (−0.2 to −0.4 ms per short pass); the GEMM kernels load the W tiles of their first k
// steps before that wait when W was uploaded from the host (weights, which no kernel writes; GEMM.WLoaded), and
// wait first for any other W. KEV_CUDA_PDL=off launches them plainly. On compute
// capability 9.0 the GEMM runs warp-specialised wgmma kernels fed by
// the bulk tensor copy engine (kernels/gemm_sm90a.cu, PTX for sm_90a): tiles of 128 or 192 rows and 64 to 256
// columns, persistent, or split-K over the fixed k chunks of a shape with one reduce launch (or, when an AddRMSNorm
// follows, MatMulAddRMSNorm's kernel that adds the partial sums and normalises), or a persistent stream-K schedule
// over those chunks, chosen per M by a cost model so that the tiles fill the GPU (the k partition depends on the
// shape only, so a row's bits do not depend on its batch); when X outgrows L2 the tiles run in groups of n-tiles so
// that the blocks running together share both operands in L2, and otherwise m-fastest with each n-tile's m-tiles
// rotated by the round they start in, so that a partial last row of tiles is shared out among the blocks; bf16
// tiles without a residual store whole 16-byte pieces (a shuffle transpose within each quad of lanes); the MLP's
// gate/up GEMM applies SwiGLU in its epilogue. Elsewhere an mma.sync kernel. FP8 weights (tensor.F8E4M3, from
// FromFloat32FP8; compute capability 9.0 only so far) run MatMul as two launches (kernels/fp8_sm90a.cu): x quantized
// per row to E4M3, then a wgmma GEMM of E4M3 tiles whose fp32 sums are scaled by both rows' scales, in tiles 24 to
// 144 columns wide planned per product by a cost model (fp8_plan.go; every width gives the same bits, so the width
// may follow M); MatMulSwiGLU applies SwiGLU in that GEMM's epilogue. On a backend with FP8 weights RMSNorm,
// AddRMSNorm, GatedRMSNorm and SigmoidGate also write their bf16 output's E4M3 codes and row scales
// (quant_rows_e4m3's bits), attached to the output, which the FP8 products then read instead of quantizing
// (fp8_fuse.go; KEV_CUDA_FP8_FUSE=off: every product quantizes). FP8 products of more tiles than multiprocessors run
// on persistent blocks (KEV_CUDA_FP8_PERSIST=off: one tile a block); KEV_CUDA_FP8_MC=on runs those of more than one
// row tile in clusters of two blocks sharing each W tile (persistent clusters with the persistent blocks; all the
// same bits; off by default, measured no faster). Their epilogue issues its loads (scales, residual) before it uses
// them. KEV_CUDA_FP8_HALF=on runs products of at most 64 rows on kernels that split each tile's columns between the
// two consumer warpgroups (the same bits; off by default, measured no faster in a pass). The tensor cores sum
// each FP8 product over all of K in their fp32 accumulators (KEV_CUDA_FP8_PROMOTE=N adds every N k tiles' sums to a
// separate fp32 total instead, N = 1 as DeepSeek-V3's training kernels do: slower, the answers no closer to bf16's);
// so summed, products with at least four rounds of tiles run on tiles 256 columns wide whose sums fill the
// registers a promoted tile's fp32 total took (KEV_CUDA_FP8_WIDE=192 or off). KEV_CUDA_FP8_PIPE=on has such products
// keep one k tile's products in flight across the k loop instead of waiting for each (the same bits; off until
// measured). KEV_CUDA_FP8_XC=on runs products whose tiles fit one round of the multiprocessors in clusters of two
// blocks on neighbouring column tiles sharing each X tile (the same bits; off until measured). The gated
// delta rule at d_k = 128 with bf16 rows runs in its chunked form on tensor cores: a parallel precompute per 64-token chunk and head, then
// one pass per 32 value columns with the state slice in registers (64 columns a block, two groups of warps sharing
// each chunk's loads and taking question rows two at a time, in launches of more than a wave; kernels/gdn.cu);
// on Hopper (d_v a multiple of 128; KEV_GDN_ROWS=off keeps the path before), question rows run instead on gdn_rows
// (kernels/gdn_sm90a.cu: warpgroup products with the state's value columns as their rows, persistent blocks), which
// also computes new segments of one chunk before the rows that continue them (KEV_GDN_FOLD=off leaves them to the
// state pass); other shapes keep each head's state in registers and go token by token (kernels/delta.cu). Small
// uploads (a pass's tables) go as launches carrying the words in their parameters (KEV_CUDA_SMALL_UPLOADS=copy:
// copies). Attention is a tiled
// flash kernel whose blocks take 16 rows of the four query heads of a group (or 32 of two, or 64 of one), so that
// each K/V tile they load serves four heads and short segments pad few rows; keys over a long prefix split per
// segment, merged by a second launch. On Hopper, head dimension 256 with four query heads a key head (Qwen3.5's
// attention) runs on warpgroup products instead (kernels/flash_sm90a.cu: blocks of 32 rows of the four heads,
// 64-key tiles; KEV_FLASH_WG=off keeps the tiled kernel, whose bits differ, so the choice is per process).
//
// KEV_CUDA_PASS_LOG=file appends one JSON line per Run: its host time and, for each wait for the device inside it,
// when the host began to wait and when the device got there (an event at the start and one before each wait);
// KEV_CUDA_PASS_LOG_LAUNCHES=1 adds every launch, with an event after each. The difference between when the device
// reaches a pass's read-back and the pass's own device time is time it spent waiting for the host.
//
// FP8 products (kernels/fp8_sm90a.cu) add each k tile's 128 codes to an fp32 total.
//
// Results are batch-invariant: a GEMM's k partition (its chunks, summed in a fixed order) depends on (N, K) and
// the device only, the batch size only picks the schedule that runs it; attention splits keys per segment; the
// delta rule picks its kernels per segment from the segment's own length; every other kernel works per row or per
// segment. A request's rows therefore get the same bits in any batch.
//
// Everything but this comment, the PTX freshness test and the graph cache's bookkeeping is behind the cuda build tag, because the driver
// binding exits the process when no GPU driver is present. Build and test on a machine with CUDA 12.x headers:
//
//	CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/cuda.test ./tensor/cuda
//
// and run bin/cuda.test on the GPU machine (scripts/gpu/run_kernels.sh; scripts/gpu/profile.sh for per-launch
// device-time profiles of the serving passes).
package cuda

//go:generate bash kernels/build.sh
