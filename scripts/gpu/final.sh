#!/usr/bin/env bash
# Everything the CUDA path is checked and measured by, in one command on the GPU machine (under ten minutes):
#   1. kernel and backend tests (conformance suite, model vs CPU, kernel tests) and compute-sanitizer memcheck on them
#   2. golden parity: bf16 on the GPU against the fp32 PyTorch reference (TestPredictorGoldenCUDA)
#   3. tokenizer speed: our Go tokenizer and HF tokenizers (Rust) over the same corpus on the same host
#   4. bench.sh: the Kev-4B-shaped checkpoint, kev bench, the PyTorch reference, the side-by-side table
#   5. HTTP: kev serve -device cuda on that checkpoint, kev loadtest at 1/32/64 clients over loopback
# Build on the Go machine first; the binaries and inputs travel as one xz-compressed tar (one archive compresses
# the embedded kernels that every binary carries once, about half the size of the files compressed apart):
#   export CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs
#   mkdir -p .gold-in/b && go build -tags cuda -ldflags='-s -w' -o .gold-in/b/kev ./examples/kev \
#     && go test -c -tags cuda -ldflags='-s -w' -o .gold-in/b/kev.test . \
#     && go test -c -tags cuda -ldflags='-s -w' -o .gold-in/b/cuda.test ./tensor/cuda \
#     && go test -c -ldflags='-s -w' -o .gold-in/b/tok.test ./tokenizer
#   go run ./scripts/corpus -unpack .gold-in && cp .gold-in/tokenizer.json .gold-in/corpus.jsonl .gold-in/b/
#   mkdir -p .gold-in/c && tar -C .gold-in/b -cf - . | xz -9e --lzma2=preset=9e,dict=192MiB > .gold-in/c/bins.tar.xz
# (tok.test and corpus.jsonl may be left out: step 3 is then skipped; tokenizer.json too: it is then unpacked from
# the tree's tokenizer/testdata/qwen3-tokenizer.json.zst. scripts/gpu/unpack.py unpacks; gzip files, one a
# binary, as .gold-in/c/NAME.gz, do too.)
# Run there with .gold-in/c carried: OUT=dir bash scripts/gpu/final.sh. Logs end up in $OUT/logs.tgz.
# Shorter runs: TESTS_RUN, TESTS_S (step 1's test pattern and limit), MEMCHECK_RUN, MEMCHECK_S, SKIP_TOK=1 (step 3),
# BENCH_TOTAL_S (step 4), SKIP_HTTP=1 (step 5).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
mkdir -p "$OUT" bin .gold-in /tmp/final
python3 scripts/gpu/unpack.py .gold-in/c || exit 1
if [ ! -f bin/tok.test ] || [ ! -f .gold-in/corpus.jsonl ]; then SKIP_TOK=${SKIP_TOK:-1}; fi
L=/tmp/final
export PYTHONUNBUFFERED=1

echo "== 1. CUDA tests"
(cd tensor/cuda && timeout ${TESTS_S:-210} ../../bin/cuda.test -test.v -test.count 1 -test.run "${TESTS_RUN:-.}" > $L/cuda_tests.log 2>&1; echo "rc=$?" >> $L/cuda_tests.log)
grep -E "^(--- FAIL|ok|PASS|FAIL|rc=)" $L/cuda_tests.log | tail -8
grep -E "relative error [0-9.e-]+ \(cuda" $L/cuda_tests.log | head -4
(cd tensor/cuda && timeout ${MEMCHECK_S:-100} compute-sanitizer --tool memcheck --error-exitcode 3 ../../bin/cuda.test \
  -test.run "${MEMCHECK_RUN:-TestConformance|TestModelMatchesCPU|TestGEMM\$|TestFlashAttention|TestDeltaRuleFast|TestRMSNorm}" > $L/memcheck.log 2>&1; echo "rc=$?" >> $L/memcheck.log)
tail -3 $L/memcheck.log

echo "== 2. golden parity on CUDA"
timeout 90 bin/kev.test -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' -test.v > $L/golden_cuda.log 2>&1; echo "rc=$?" >> $L/golden_cuda.log
grep -E "worst|^(--- |ok|PASS|FAIL|rc=)" $L/golden_cuda.log | tail -6

echo "== 3. tokenizer speed, same host"
if [ -z "${SKIP_TOK:-}" ]; then
(cd tokenizer && timeout 90 ../bin/tok.test -test.run XXX -test.bench 'Corpus|2200' -test.cpu 1 -test.count 3 > $L/tok_go.log 2>&1)
grep -E "Benchmark" $L/tok_go.log | head -12
timeout 90 python3 scripts/golden/tokenizer_golden.py .gold-in/tokenizer.json .gold-in/corpus.jsonl /tmp/ids.jsonl.gz > $L/tok_hf.log 2>&1
grep -E "tokens/s" $L/tok_hf.log
else
  echo "skipped (SKIP_TOK set)"
fi

echo "== 4. bench.sh"
BENCH_TOTAL_S=${BENCH_TOTAL_S:-330} OUT=$OUT bash scripts/gpu/bench.sh > $L/bench.out 2>&1
sed -n '/== compare/,$p' $L/bench.out | tail -40

echo "== 5. HTTP: kev serve + kev loadtest"
if [ -n "${SKIP_HTTP:-}" ]; then
  echo "skipped (SKIP_HTTP set)"
elif [ -f /tmp/kev4b/kev/head.pt ]; then
  bin/kev serve -device cuda -checkpoint /tmp/kev4b/kev -base /tmp/kev4b/base -addr 127.0.0.1:8018 > $L/serve.log 2>&1 &
  spid=$!
  for i in $(seq 1 90); do python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8018/v1/models', timeout=2)" 2>/dev/null && break; sleep 1; done
  timeout 60 bin/kev loadtest -url http://127.0.0.1:8018 -levels 1,32,64 -duration 8s -out $OUT/http_bench.json > $L/loadtest.log 2>&1
  tail -4 $L/loadtest.log
  kill -TERM $spid; wait $spid; echo "serve exit $?"
else
  echo "no Kev-4B checkpoint: skipped"
fi
cp $OUT/*.log $L/ 2>/dev/null; rm -f $OUT/*.log
tar -C $L -czf $OUT/logs.tgz . ; ls $OUT
