#!/usr/bin/env bash
# The FP8 tile plan on a Hopper GPU, in one call of at most TOTAL seconds (default 570), the most telling steps
# first: the FP8 kernel tests (every tile width against the reference and against each other bit for bit, the
# SwiGLU-fused kernels against the two operations, batch invariance on planned shapes); BenchmarkGEMMFP8 with every
# tile width (KEV_FP8_WIDTHS=all: the measurements fp8Plan's model is fitted to); the Kev-4B-shaped checkpoint served
# in bf16 and FP8 with kev eval's agreement (fp8.sh's serving part); then, while time
# is left, the per-kernel profile of Kev's cases in FP8 (and bf16 with DTYPES="fp8 bf16") and the predictor's CUDA
# tests when bin/kev.test is there. SERVE=0 skips the serving step (a short call: the profiles in both types,
# DTYPES="fp8 bf16", compare the device times instead).
# Build on the Go machine (CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs):
#   go test -c -tags cuda -ldflags='-s -w' -o bin/cuda.test ./tensor/cuda
#   go build -tags cuda -ldflags='-s -w' -o bin/kev ./examples/kev
#   go test -c -tags cuda -ldflags='-s -w' -o bin/kev.test .          # optional
# then run from the repository root: OUT=dir bash scripts/gpu/fp8_tiles.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
TOTAL=${TOTAL:-570}
# shellcheck source=steps.sh
source scripts/gpu/steps.sh # step, left
chmod +x bin/cuda.test bin/kev bin/kev.test 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
cd tensor/cuda
step "FP8 kernel tests" 100 "$OUT/fp8_tests.log" ../../bin/cuda.test -test.v -test.run 'FP8|E4M3'
grep -E "^(--- |FAIL|ok|PASS)" "$OUT/fp8_tests.log"
step "BenchmarkGEMMFP8, every width" 170 "$OUT/gemmfp8.log" \
  env KEV_FP8_WIDTHS=all ../../bin/cuda.test -test.run '^$' -test.bench '^BenchmarkGEMMFP8$' -test.benchtime 1x
grep -E "path=(bf16|fp8|fp8-bn128) " "$OUT/gemmfp8.log"
cd "$root"
if [ -f bin/kev ] && [ "${SERVE:-1}" = 1 ]; then
  step "served bf16 and FP8" 330 "$OUT/served.log" \
    env PARTS=serving BENCH_TOTAL_S=$(($(left) < 330 ? $(left) - 10 : 320)) OUT="$OUT/served" bash scripts/gpu/fp8.sh
  cat "$OUT/served.log"
fi
cd tensor/cuda
for dt in ${DTYPES:-fp8}; do
  step "pass profile $dt" 150 "$OUT/pass_$dt.log" env KEV_PROFILE_DTYPE="$dt" KEV_PROFILE_MODES=invariant \
    KEV_PROFILE_CASES="${CASES:-2q-short,6q-short,6q-kev257,5q-2200}" ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x
  grep -E "device_ms" "$OUT/pass_$dt.log" | sed "s/^/$dt /"
done
cd "$root"
if [ -f bin/kev.test ]; then
  step "predictor CUDA tests" 120 "$OUT/predictor_cuda.log" bin/kev.test -test.v -test.run 'TestPredictorCUDA'
  grep -E "^(--- |FAIL|ok|PASS)" "$OUT/predictor_cuda.log"
fi
echo "done in $SECONDS s"
