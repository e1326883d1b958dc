#!/bin/bash
# call 1: flash_segs_wg_d256_g4 — tests against the CPU and flash_attn_segs, batch invariance, BenchmarkFlashSegs, golden
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 60 $D/cuda.test -test.v -test.run 'TestFlashWG|TestSegmentsFast|TestFlashAttention|TestAttnCombineRows' > $L/attn_tests.log 2>&1; echo "attn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|alone|worst|error" $L/attn_tests.log | sort -u | head -12 >> $S
timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench.log 2>&1; echo "attn bench rc=$?" >> $S
grep KEVBENCH $L/attn_bench.log >> $S
cd $R
timeout 50 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
timeout 60 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestFlashWG' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
