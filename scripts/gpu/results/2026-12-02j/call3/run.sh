#!/bin/bash
# call 3: flash_segs_wg_d256_g4 pipelined (S of the next tile and P V of this one in flight together) against wg1
# (one after the other, same bits) and flash_attn_segs; idle warpgroups skip their products; tests, memcheck,
# racecheck, golden, BenchmarkFlashSegs, pass profiles
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 60 $D/cuda.test -test.v -test.run 'TestFlashWG|TestSegmentsFast|TestFlashAttention' > $L/attn_tests.log 2>&1; echo "attn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|alone|same bits|pipelined" $L/attn_tests.log | sort -u | head -8 >> $S
timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench.log 2>&1; echo "attn bench rc=$?" >> $S
grep KEVBENCH $L/attn_bench.log >> $S
timeout 60 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestFlashWG' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
timeout 90 compute-sanitizer --tool racecheck $D/cuda.test -test.run 'TestFlashWG' > $L/racecheck.log 2>&1; echo "racecheck rc=$?" >> $S
tail -2 $L/racecheck.log >> $S
cd $R
timeout 50 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 150 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_small.log 2>&1; echo "pass rc=$?" >> $S
grep -E 'device_ms' $L/pass_small.log | sed 's/profiled_ms.*attention=/attention=/' >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
