#!/usr/bin/env bash
# What bounds the FP8 tile kernel, and longer promotion intervals (KEV_CUDA_FP8_PROMOTE: the products of P k tiles
# summed in the tensor cores before each fp32 add), on a Hopper GPU in one call of at most TOTAL seconds (default
# 560). PARTS (default "kernels ncu passes goldens") names the parts; "serve" adds step 6:
#   1. kernels: the FP8 tests in TESTS (default: the promotion intervals and the k loop that keeps products in
#      flight, the products against the reference, batch invariance)                                -> $OUT/fp8_tests.log
#   2. kernels: BenchmarkGEMMFP8 (bf16, the planned FP8 kernel, each form, each promotion interval) -> $OUT/gemmfp8.log
#   3. ncu: Nsight Compute (--set full, clocks left alone) on one launch each of the FP8 products in NCU_KERNELS
#      (default: the 2,200-token pass's gate/up at 2,392 rows, with every k tile promoted, with all of K in the
#      tensor cores and on the 256-column FAST tiles, and the 257-token question pass's gate/up), each with its
#      details page and the warps' stalls
#      by stretch of machine code (sass_regions.py)                    -> $OUT/ncu/<label>.details.txt, .regions.txt
#   4. passes: per-kernel pass profiles of CASES for each variant in VARIANTS (default: the defaults — all of K in
#      the tensor cores, the 256-column FAST tiles where they fit — the k loop that keeps products in flight,
#      fp8_pipe (KEV_CUDA_FP8_PIPE=on), every k tile promoted, fp8_promo1, and the planned widths alone,
#      fp8_wideoff; also fp8_promoN, fp8_wideN, switches joined: fp8_pipe_wide192, _mc, _xc)   -> $OUT/pass_<variant>.log
#   5. goldens: with bin/kev.test, the golden checkpoints in FP8 against fp32 at each interval in PROMOS
#      (default "1 4 all")                                             -> $OUT/goldens_promo<P>.log
#   6. serve: with bin/kev, the Kev-4B shape served as SERVE_VARIANTS (default "bfloat16 fp8 fp8:pipe") and kev
#      eval's agreement of each FP8 variant with bf16 (fp8.sh's serving part)            -> $OUT/served/
# Build on the Go machine (CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs):
#   go test -c -tags cuda -ldflags='-s -w' -o bin/cuda.test ./tensor/cuda
#   go test -c -tags cuda -ldflags='-s -w' -o bin/kev.test .                 # step 5
#   go build -tags cuda -ldflags='-s -w' -o bin/kev ./examples/kev           # step 6
# then from the repository root: OUT=dir bash scripts/gpu/fp8_bound.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
mkdir -p "$OUT/ncu" && OUT=$(cd "$OUT" && pwd)
TOTAL=${TOTAL:-560}
PARTS=" ${PARTS:-kernels ncu passes goldens} "
CASES=${CASES:-6q-kev257,5q-2200}
# label:case:kernel regex:launches to skip:switches (VAR=value, comma-separated)
NCU_KERNELS=${NCU_KERNELS:-gateup2392:5q-2200:gemm_fp8_wgmma_pg128x144:2:KEV_CUDA_FP8_PROMOTE=1 \
gateup2392all:5q-2200:gemm_fp8_wgmma_pg128x144:2:KEV_CUDA_FP8_PROMOTE=all \
gateup2392wide:5q-2200:gemm_fp8_wgmma_pfg128x256:2:KEV_CUDA_FP8_PROMOTE=all,KEV_CUDA_FP8_WIDE=256 \
gateup2392pipe:5q-2200:gemm_fp8_wgmma_pfg128x256:2:KEV_CUDA_FP8_PIPE=on \
gateup257:6q-kev257:gemm_fp8_wgmma_pg128x144:2:KEV_CUDA_FP8_PROMOTE=1}
# shellcheck source=steps.sh
source scripts/gpu/steps.sh # step, left
chmod +x bin/* 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
has() { [[ $PARTS == *" $1 "* ]]; }
cd tensor/cuda
if has kernels; then
  step "FP8 kernel tests" 120 "$OUT/fp8_tests.log" ../../bin/cuda.test -test.v \
    -test.run "${TESTS:-TestGEMMFP8Promote|TestMatMulFP8\$|TestMatMulFP8BatchInvariant|TestGEMMFP8Tiles}"
  grep -E "^(--- |FAIL|ok|PASS)|largest" "$OUT/fp8_tests.log" | head -40
  step "BenchmarkGEMMFP8" 120 "$OUT/gemmfp8.log" \
    ../../bin/cuda.test -test.run '^$' -test.bench '^BenchmarkGEMMFP8$' -test.benchtime 1x
  grep -E "path=(bf16|fp8|fp8-promo[0-9a-z]+|fp8-fast[0-9]+|fp8-(no)?pipe|fp8-fast256-pipe|fp8-pipe-(bn|mc|xc)[0-9]+) " "$OUT/gemmfp8.log"
fi
if has ncu; then
  for spec in $NCU_KERNELS; do
    IFS=: read -r label pcase kern skip sw <<<"$spec"
    rep=/tmp/ncu_$label
    # shellcheck disable=SC2086
    step "ncu $label ($kern, $pcase, skip $skip, ${sw//,/ })" 80 "$OUT/ncu/$label.run.log" env KEV_PROFILE_DTYPE=fp8 \
      ${sw//,/ } KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES="$pcase" \
      ncu --clock-control none -k "regex:$kern\$" --launch-skip "$skip" --launch-count 1 --set full --import-source no \
      -f -o "$rep" ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x
    if [ -f "$rep.ncu-rep" ]; then
      ncu --import "$rep.ncu-rep" --page details >"$OUT/ncu/$label.details.txt" 2>&1
      ncu --import "$rep.ncu-rep" --page source --csv --print-source sass >"$rep.csv" 2>/dev/null &&
        python3 "$root/scripts/gpu/sass_regions.py" "$rep.csv" 40 >"$OUT/ncu/$label.regions.txt" 2>&1
      grep -E " (Duration|Grid Size|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|L1/TEX Cache Throughput|SM Frequency) " \
        "$OUT/ncu/$label.details.txt" | head -10 | sed 's/^/   /'
    fi
  done
fi
if has passes; then
  for v in ${VARIANTS:-fp8 fp8_pipe fp8_promo1 fp8_wideoff}; do
    dt=${v%%_*} promo=all wide=256 pipe=off mc=off xc=off
    for part in $(tr _ ' ' <<<"${v#"$dt"}"); do # fp8_pipe_wide192: the switches in any order
      case $part in
      pipe) pipe=on ;;
      mc) mc=on ;;
      xc) xc=on ;;
      promo*) promo=${part#promo} ;;
      wide*) wide=${part#wide} ;;
      esac
    done
    step "pass profile $v" 60 "$OUT/pass_$v.log" env KEV_PROFILE_DTYPE="$dt" \
      KEV_CUDA_FP8_PROMOTE="$promo" KEV_CUDA_FP8_WIDE=$wide KEV_CUDA_FP8_PIPE=$pipe KEV_CUDA_FP8_MC=$mc KEV_CUDA_FP8_XC=$xc KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES="$CASES" \
      ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x
    grep -E "device_ms" "$OUT/pass_$v.log" | sed "s/^/$v /" | cut -c1-200
  done
fi
cd "$root"
if has goldens && [ -f bin/kev.test ]; then
  for p in ${PROMOS:-1 4 all}; do
    step "FP8 goldens, promote $p" 60 "$OUT/goldens_promo$p.log" env KEV_CUDA_FP8_PROMOTE="$p" \
      bin/kev.test -test.v -test.run 'TestPredictorGoldenCUDAFP8'
    grep -E "worst \|Δp\||^(--- |ok|FAIL|PASS)" "$OUT/goldens_promo$p.log" | sed "s/^/   promote $p: /" | head -12
  done
fi
if has serve && [ -f bin/kev ]; then
  step "served ${SERVE_VARIANTS:-bfloat16 fp8 fp8:pipe}" 590 "$OUT/served.log" env PARTS=serving \
    VARIANTS="${SERVE_VARIANTS:-bfloat16 fp8 fp8:pipe}" BENCH_TOTAL_S=$(($(left) - 10)) OUT="$OUT/served" \
    bash scripts/gpu/fp8.sh
  cat "$OUT/served.log"
fi
echo "done in $SECONDS s"
