#!/usr/bin/env bash
# Where a pass's device time goes, per kernel, on the GPU machine (about three minutes): the delta-rule kernel
# tests and benchmark, BenchmarkPassKernels (Kev's four serving cases at Kev-4B shape: new state with its rows in
# one pass, and the rows on the kept state; batch-invariant and M-chosen GEMM plans; device time, time per kernel
# category and the longest kernels), BenchmarkPassGEMMs (a pass's GEMMs back to back at M = 240 and 2,392), then
# kev bench on the generated Kev-4B checkpoint.
# Build on the Go machine as scripts/gpu/verify.sh says (bin/kev, bin/cuda.test gzipped into .gold-in/c with the
# Qwen3 tokenizer.json.gz). Run there: OUT=dir bash scripts/gpu/profile.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
L=$OUT
mkdir -p "$OUT" bin .gold-in
python3 scripts/gpu/unpack.py .gold-in/c || exit 1
export PYTHONUNBUFFERED=1
(python3 scripts/golden/make_kev4b.py /tmp/kev4b --tokenizer .gold-in/tokenizer.json > /tmp/make_kev4b.log 2>&1; echo "make rc=$?" >> /tmp/make_kev4b.log) &
mk=$!
echo "== delta-rule tests"
(cd tensor/cuda && timeout 120 ../../bin/cuda.test -test.v -test.run '^TestConformance$|TestGDN|TestDeltaRuleOne|TestDeltaSegmentsOne|TestDeltaRuleFast|^TestSegmentsFast$|^TestModelMatchesCPU$|^TestForwardBatchedMatchesCPU$|TestForwardBatchInvariant' > $L/delta_tests.log 2>&1; echo "rc=$?")
grep -E "^(--- |FAIL|ok|PASS)" $L/delta_tests.log | head -12
grep -E "gdn_test.go.*rms error" $L/delta_tests.log | sort -u | tail -12
(cd tensor/cuda && timeout 60 ../../bin/cuda.test -test.run '^$' -test.bench 'BenchmarkDeltaRows|BenchmarkGDN' -test.benchtime 1x > $L/delta_bench.log 2>&1)
grep '^KEVBENCH' $L/delta_bench.log | sort -u
echo "== GEMM schedule"
(cd tensor/cuda && timeout 30 ../../bin/cuda.test -test.v -test.run 'TestGEMMStreamKBits/N=264' > $L/gemm_alone.log 2>&1; echo "alone rc=$?"; grep -E "^(---|    ---)|outputs wrong|counter|differs" $L/gemm_alone.log | head -8)
(cd tensor/cuda && timeout 120 ../../bin/cuda.test -test.v -test.run 'TestGEMMStreamKBits|TestGEMMStreamKLayouts|TestGEMMSchedulePlans|TestGEMMPlanInvariant|TestGEMMBatchInvariant|^TestGEMM$' > $L/gemm_tests.log 2>&1; echo "rc=$?")
grep -E "^(--- |FAIL|ok|PASS)" $L/gemm_tests.log | head -12
(cd tensor/cuda && timeout 60 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkGEMMSchedule -test.benchtime 25x > $L/gemm_bench.log 2>&1)
grep 'KEVBENCH gemm-sched' $L/gemm_bench.log | sed 's/KEVBENCH gemm-sched //'
echo "== pass profiles"
(cd tensor/cuda && timeout 150 ../../bin/cuda.test -test.run '^$' -test.bench 'BenchmarkPassKernels' -test.benchtime 1x > $L/pass_profile.log 2>&1; echo "rc=$?")
grep -E 'device_ms' $L/pass_profile.log | sed 's/KEVPROF //'
echo "== a pass's GEMMs back to back (one pair of events around them, as cuBLAS's are timed)"
(cd tensor/cuda && KEV_PASSGEMM_M=240,2392 timeout 60 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassGEMMs -test.benchtime 1x > $L/pass_gemms.log 2>&1; echo "rc=$?")
grep '^KEVBENCH passgemm' $L/pass_gemms.log
wait $mk; tail -1 /tmp/make_kev4b.log
echo "== serving cases"
timeout 60 bin/kev bench -device cuda -checkpoint /tmp/kev4b/kev -base /tmp/kev4b/base -runs 10 -warmup 2 -clients 64 -duration 5s -out $OUT/kev_bench.json > $L/kev_bench.log 2>&1
grep -E "new|clients" $L/kev_bench.log | head -6
