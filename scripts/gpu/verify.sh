#!/usr/bin/env bash
# A short check of the CUDA path on the GPU machine (about two minutes): kernel and backend tests including batch
# invariance and the register delta-rule kernels, golden parity and batch invariance through the predictor, the
# delta-rule benchmark, then Kev's four serving cases (no PyTorch side) and an HTTP load test at 64 clients that
# checks answers are equal across batches.
# Build on the Go machine (the build commands at the top of scripts/gpu/final.sh): bin/kev, bin/kev.test,
# bin/cuda.test, each gzipped into .gold-in/c (gzip -c bin/kev > .gold-in/c/kev.gz, …) with the Qwen3 tokenizer
# (.gold-in/c/tokenizer.json.gz). Run there with .gold-in/c carried: OUT=dir bash scripts/gpu/verify.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
L=$OUT
mkdir -p "$OUT" bin .gold-in $L
python3 scripts/gpu/unpack.py .gold-in/c || exit 1
export PYTHONUNBUFFERED=1
(python3 scripts/golden/make_kev4b.py /tmp/kev4b --tokenizer .gold-in/tokenizer.json > /tmp/make_kev4b.log 2>&1; echo "make rc=$?" >> /tmp/make_kev4b.log) &
mk=$!
echo "== tests"
(cd tensor/cuda && timeout 60 ../../bin/cuda.test -test.v -test.run 'Invariant|^TestGEMM$|^TestConformance$|^TestSegmentsFast$|^TestForwardBatchedMatchesCPU$|^TestModelMatchesCPU$|TestDeltaRuleOne|TestDeltaSegmentsOne|TestDeltaRuleFast|^TestFlashAttention$' > $L/cuda_tests.log 2>&1; echo "cuda tests rc=$?")
grep -E "^(--- FAIL|    --- FAIL|FAIL|ok|PASS)" $L/cuda_tests.log | head; grep -E "worst relative error|differs|bit-identical|identical" $L/cuda_tests.log | tail -12
timeout 20 bin/kev.test -test.run 'TestBatchInvariantCUDA|TestPredictorGoldenCUDA' -test.v > $L/kev_tests.log 2>&1; echo "kev tests rc=$?"
grep -E "worst|^(--- |ok|PASS|FAIL)" $L/kev_tests.log | tail -8
echo "== benchmarks"
(cd tensor/cuda && timeout 25 ../../bin/cuda.test -test.run '^$' -test.bench 'BenchmarkDeltaRows' -test.benchtime 3x > $L/delta_bench.log 2>&1; grep KEVBENCH $L/delta_bench.log | head -14)
wait $mk; tail -1 /tmp/make_kev4b.log
echo "== serving cases"
timeout 60 bin/kev bench -device cuda -checkpoint /tmp/kev4b/kev -base /tmp/kev4b/base -runs 10 -warmup 2 -clients 64 -duration 5s -out $OUT/kev_bench.json > $L/kev_bench.log 2>&1
grep -E "new|clients|resident" $L/kev_bench.log | head -8
echo "== HTTP at 64 clients"
bin/kev serve -device cuda -checkpoint /tmp/kev4b/kev -base /tmp/kev4b/base -addr 127.0.0.1:8019 > /tmp/serve.log 2>&1 &
spid=$!
for i in $(seq 1 60); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8019/v1/models', timeout=2)" 2>/dev/null && break; sleep 1; done
timeout 40 bin/kev loadtest -url http://127.0.0.1:8019 -levels 1,64 -duration 5s -bodies 64 -out $OUT/http_bench.json > $L/loadtest.log 2>&1
tail -2 $L/loadtest.log; grep -E '"answers_equal"|"mismatches"' $OUT/http_bench.json
kill -TERM $spid; wait $spid
ls $OUT
