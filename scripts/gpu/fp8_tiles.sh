#!/usr/bin/env bash
# The FP8 tile plan on a Hopper GPU, kernels only (about five minutes): the FP8 kernel tests (every tile width against
# the reference and against each other bit for bit, batch invariance on planned shapes), BenchmarkGEMMFP8 with every
# tile width (KEV_FP8_WIDTHS=all: the measurements fp8Plan's model is fitted to), the per-kernel profile of Kev's
# cases at Kev-4B shape in FP8 and in bf16, and the predictor's graph option test when bin/kev.test is there.
# Build on the Go machine (CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs):
#   go test -c -tags cuda -ldflags='-s -w' -o bin/cuda.test ./tensor/cuda
#   go test -c -tags cuda -ldflags='-s -w' -o bin/kev.test .          # optional
# then run from the repository root: OUT=dir bash scripts/gpu/fp8_tiles.sh. The serving half is fp8_promo.sh
# (PARTS=serving).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
chmod +x bin/cuda.test bin/kev.test 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt" 2>&1
cd tensor/cuda
timeout 150 ../../bin/cuda.test -test.v -test.run 'FP8|E4M3' >"$OUT/fp8_tests.log" 2>&1
echo "exit $?" >>"$OUT/fp8_tests.log"
grep -E "^(--- |FAIL|ok|PASS|exit)" "$OUT/fp8_tests.log"
KEV_FP8_WIDTHS=all timeout 240 ../../bin/cuda.test -test.run '^$' -test.bench '^BenchmarkGEMMFP8$' -test.benchtime 1x >"$OUT/gemmfp8.log" 2>&1
echo "exit $?" >>"$OUT/gemmfp8.log"
grep -E "path=(bf16|fp8|fp8-bn128|fp8-promo256) |^exit" "$OUT/gemmfp8.log"
for dt in fp8 bf16; do
  KEV_PROFILE_DTYPE=$dt KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=${CASES:-2q-short,6q-short,6q-kev257,5q-2200} \
    timeout 150 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x >"$OUT/pass_$dt.log" 2>&1
  echo "exit $?" >>"$OUT/pass_$dt.log"
  grep -E "device_ms|^exit" "$OUT/pass_$dt.log" | sed "s/^/$dt /"
done
cd "$root"
if [ -f bin/kev.test ]; then
  timeout 120 bin/kev.test -test.v -test.run 'TestPredictorCUDA' >"$OUT/graphs_option.log" 2>&1
  echo "exit $?" >>"$OUT/graphs_option.log"
  grep -E "^(--- |FAIL|ok|PASS|exit)" "$OUT/graphs_option.log"
fi
echo "done in $SECONDS s"
