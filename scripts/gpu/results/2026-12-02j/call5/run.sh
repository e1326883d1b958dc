#!/bin/bash
# call 5: flash_segs_wg_d256_g4 with fewer instructions a tile (descriptors by offset, masks only on partial tiles,
# the scale in the exponent, rescaling skipped where 1, copies under S), and wgs (warpgroup 1 after warpgroup 0's S);
# tests, memcheck, racecheck, golden, BenchmarkFlashSegs, ncu durations/instructions, pass profiles
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 60 $D/cuda.test -test.v -test.run 'TestFlashWG|TestSegmentsFast|TestFlashAttention' > $L/attn_tests.log 2>&1; echo "attn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|alone|same bits" $L/attn_tests.log | sort -u | head -8 >> $S
grep -E "relative error" $L/attn_tests.log | grep -E "batched_test.go:(3|4)" | head -3 >> $S
timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench.log 2>&1; echo "attn bench rc=$?" >> $S
grep KEVBENCH $L/attn_bench.log >> $S
timeout 60 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestFlashWG' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
timeout 90 compute-sanitizer --tool racecheck $D/cuda.test -test.run 'TestFlashWG' > $L/racecheck.log 2>&1; echo "racecheck rc=$?" >> $S
tail -1 $L/racecheck.log >> $S
for kind in wg wgs; do
KEV_ATTN_KINDS=$kind KEV_ATTN_CASES="1x2392 new" timeout 60 ncu -k regex:flash_segs --launch-skip 3 --launch-count 1 --metrics gpu__time_duration.sum,smsp__inst_executed.sum $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/ncu_$kind.log 2>&1; echo "ncu $kind rc=$?" >> $S
grep -E "gpu__time|inst_executed" $L/ncu_$kind.log >> $S
done
cd $R
timeout 50 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=5q-370,5q-2200r200 timeout 100 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_small.log 2>&1; echo "pass rc=$?" >> $S
grep -E 'device_ms' $L/pass_small.log | sed 's/profiled_ms.*attention=/attention=/' >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
