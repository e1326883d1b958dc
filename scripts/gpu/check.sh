#!/usr/bin/env bash
# The CUDA tests of the whole tree and the Qwen3-4B-shaped (attention-only) bench against PyTorch, in one command on
# the GPU machine (about three minutes).
#   1. tensor/cuda tests: conformance suite, the tensor-core delta rule, model vs CPU (Qwen3.5, Qwen3, Qwen2), batch
#      invariance, modules loaded at open, ring uploads
#   2. root tests on CUDA: golden parity (every fixture), batch invariance, two replicas on one GPU, a small request
#      beside a 50,000-question one
#   3. bench.sh with scripts/golden/make_kev_qwen3.py: Kev's four cases, ours and PyTorch's packed form side by side
# Build on the Go machine first (CUDA headers and the libcuda stub, see the README), from the repository root:
#   export CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs
#   go build -tags cuda -o bin/kev ./examples/kev && go test -c -tags cuda -o bin/kev.test . \
#     && go test -c -tags cuda -o bin/cuda.test ./tensor/cuda && go run ./scripts/corpus -unpack .gold-in
# (gzip bin/* and .gold-in/tokenizer.json into GZ=dir, or tar them into GZ/bins.tar.xz as scripts/gpu/final.sh says,
# when the tree that travels is limited; scripts/gpu/unpack.py unpacks them here).
# Run there from the repository root: OUT=dir bash scripts/gpu/check.sh. Logs end up in $OUT/logs.tgz.
set -u
T0=$SECONDS
OUT=${OUT:-.out}
mkdir -p bin .gold-in "$OUT/q3" /tmp/check
L=/tmp/check
if [ -n "${GZ:-}" ]; then
  python3 scripts/gpu/unpack.py "$GZ" || exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== 1. tensor/cuda tests"
(cd tensor/cuda && timeout 110 ../../bin/cuda.test -test.count 1 -test.v -test.run 'TestConformance|TestGDN|TestModelMatchesCPU|TestAttnModelMatchesCPU|TestForwardBatchInvariant|TestSegmentsFast|TestModulesLoadedAtOpen|TestUploadLarge|TestFromHostRows|TestGEMMBatchInvariant' > $L/cuda_tests.log 2>&1; echo "rc=$?" >> $L/cuda_tests.log)
grep -E "^(--- FAIL|ok|PASS|FAIL|rc=)" $L/cuda_tests.log | tail -6
echo "== 2. root CUDA tests (golden parity, batch invariance, replicas, big requests)"
timeout 150 bin/kev.test -test.count 1 -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA|TestReplicasCUDA|TestBigRequestDoesNotStarveCUDA' > $L/root_cuda.log 2>&1; echo "rc=$?" >> $L/root_cuda.log
grep -E "worst|^(--- |ok|PASS|FAIL|rc=)" $L/root_cuda.log | tail -12
echo "== 3. Qwen3-4B-shaped bench (at $((SECONDS-T0)) s)"
left=$((540 - (SECONDS - T0)))
[ $left -gt 360 ] && left=360
KEV4B=/tmp/kevq3 MAKE_SCRIPT=scripts/golden/make_kev_qwen3.py BENCH_TOTAL_S=$left OUT=$OUT/q3 bash scripts/gpu/bench.sh > $L/q3_bench.out 2>&1
grep -E '^==|exit|load|Rss' $L/q3_bench.out | head -30
cp $OUT/q3/*.log $L/ 2>/dev/null; rm -f $OUT/q3/*.log
tar -C $L -czf $OUT/logs.tgz .
echo "== compare"
tail -30 $OUT/q3/compare.txt 2>/dev/null
echo "done in $((SECONDS-T0)) s"
