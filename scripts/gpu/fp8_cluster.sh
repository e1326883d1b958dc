#!/usr/bin/env bash
# FP8 products in clusters of two blocks (gemm_fp8_wgmma_m128xBN: each W tile read once from L2 for two row tiles),
# on persistent blocks (gemm_fp8_wgmma_p128xBN) and both (gemm_fp8_wgmma_pm128xBN) against one tile a block, on a
# Hopper GPU in one call of at most
# TOTAL seconds (default 400):
#   1. the FP8 kernel tests (the cluster and persistent kernels bit for bit against one tile a block, SwiGLU, the
#      codes fused in the normalisations, batch invariance)                          -> $OUT/fp8_tests.log
#   2. BenchmarkGEMMFP8: bf16, the planned FP8 kernel, and the planned width on single blocks, in clusters,
#      persistent and in persistent clusters (KEV_FP8_WIDTHS=all with SWEEP=1: every width on single blocks and in
#      clusters)                                                                     -> $OUT/gemmfp8.log
#   3. per-kernel profiles of Kev's cases (CASES) in FP8 with clusters (fp8), on single blocks (fp8_1blk), on the
#      persistent kernels (fp8_persist, KEV_CUDA_FP8_PERSIST=on, the default), on persistent clusters (fp8_pmc, both on), FP8
#      that quantizes every product's x in a launch of its own (fp8_nofuse, KEV_CUDA_FP8_FUSE=off), with the
#      half-column kernels for products of at most 64 rows (fp8_half, KEV_CUDA_FP8_HALF=on) and bf16
#                                                                                   -> $OUT/pass_VARIANT.log
#   4. with bin/kev.test: the predictor's FP8 tests (the golden checkpoints with the codes fused and not)
#                                                                                   -> $OUT/predictor_fp8.log
#   5. with SERVE=1 and bin/kev: the Kev-4B shape served in bf16 and FP8 (fp8.sh's serving part) -> $OUT/served/
# NCU=1 adds, after step 2, Nsight Compute on the 2,200-token pass's gate/up and down FP8 products (ncu_fp8.txt:
# tensor pipe, shared memory and L2 throughput, warp stalls), with the switches in NCU_ENV (e.g.
# NCU_ENV=KEV_CUDA_FP8_PROMOTE=1). TESTS (a -test.run pattern) and VARIANTS (a subset of "fp8 fp8_1blk fp8_persist
# fp8_pmc fp8_nofuse fp8_half bf16") narrow steps 1 and 3.
# Build on the Go machine (CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs):
#   go test -c -tags cuda -ldflags='-s -w' -o bin/cuda.test ./tensor/cuda
#   go test -c -tags cuda -ldflags='-s -w' -o bin/kev.test .                 # optional
#   go build -tags cuda -ldflags='-s -w' -o bin/kev ./examples/kev           # SERVE=1 only
# then from the repository root: OUT=dir bash scripts/gpu/fp8_cluster.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
TOTAL=${TOTAL:-400}
CASES=${CASES:-6q-short,6q-kev257,5q-2200,64x6q-short}
# shellcheck source=steps.sh
source scripts/gpu/steps.sh # step, left
chmod +x bin/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
cd tensor/cuda
step "FP8 kernel tests" 120 "$OUT/fp8_tests.log" ../../bin/cuda.test -test.v -test.run "${TESTS:-FP8|E4M3}"
grep -E "^(--- |FAIL|ok|PASS)" "$OUT/fp8_tests.log"
sweep=
[ "${SWEEP:-0}" = 1 ] && sweep=all
step "BenchmarkGEMMFP8" 150 "$OUT/gemmfp8.log" \
  env KEV_FP8_WIDTHS=$sweep ../../bin/cuda.test -test.run '^$' -test.bench '^BenchmarkGEMMFP8$' -test.benchtime 1x
grep -E "path=(bf16|fp8|fp8-1blk|fp8-mc|fp8-persist|fp8-pmc|fp8-promo[0-9a-z]+|fp8-fast[0-9]+|fp8-whole[0-9]+|fp8-half[0-9]+) " \
  "$OUT/gemmfp8.log"
if [ "${NCU:-0}" = 1 ]; then # what bounds the FP8 tile kernel: two launches of the 2,200-token pass, Nsight Compute
  # shellcheck disable=SC2086
  step "ncu FP8 GEMM" 150 "$OUT/ncu_fp8.txt" env ${NCU_ENV:-} KEV_PROFILE_DTYPE=fp8 KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=5q-2200 \
    ncu --clock-control none -k 'regex:gemm_fp8_wgmma_p?(g128x144|128x128)' --launch-count 2 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x
fi
for v in ${VARIANTS:-fp8 fp8_1blk fp8_persist fp8_nofuse bf16}; do
  dt=${v%%_*} mc=on fuse=on persist=off half=off
  case $v in
  fp8_1blk) mc=off ;;
  fp8_persist) mc=off persist=on ;;
  fp8_pmc) persist=on ;;
  fp8_half) mc=off persist=on half=on ;;
  fp8_nofuse) fuse=off ;;
  esac
  step "pass profile $v" 120 "$OUT/pass_$v.log" env KEV_PROFILE_DTYPE="$dt" KEV_CUDA_FP8_MC=$mc KEV_CUDA_FP8_FUSE=$fuse \
    KEV_CUDA_FP8_PERSIST=$persist KEV_CUDA_FP8_HALF=$half KEV_PROFILE_MODES=invariant \
    KEV_PROFILE_CASES="$CASES" ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x
  grep -E "device_ms" "$OUT/pass_$v.log" | sed "s/^/$v /" | cut -c1-200
done
cd "$root"
if [ -f bin/kev.test ]; then
  step "predictor FP8 tests" 120 "$OUT/predictor_fp8.log" bin/kev.test -test.v -test.run 'TestPredictorCUDAFP8'
  grep -E "^(--- |FAIL|ok|PASS)" "$OUT/predictor_fp8.log"
fi
if [ -f bin/kev ] && [ "${SERVE:-0}" = 1 ]; then
  step "served bf16 and FP8" 330 "$OUT/served.log" \
    env PARTS=serving BENCH_TOTAL_S=$(($(left) < 330 ? $(left) - 10 : 320)) OUT="$OUT/served" bash scripts/gpu/fp8.sh
  cat "$OUT/served.log"
fi
echo "done in $SECONDS s"
