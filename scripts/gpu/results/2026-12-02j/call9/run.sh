#!/bin/bash
# call 9: the final flash_segs_wg_d256_g4 (call 8's wgf31 form): the whole CUDA test suite, memcheck, racecheck,
# golden and batch invariance, BenchmarkFlashSegs, profiles of the serving passes with it and with KEV_FLASH_WG=off
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R
timeout 50 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
timeout 150 $D/cuda.test -test.v -test.count 1 > $L/cuda_tests.log 2>&1; echo "cuda tests rc=$?" >> $S
grep -E "^(--- FAIL|ok|PASS|FAIL)" $L/cuda_tests.log | tail -6 >> $S
grep -c "^--- PASS" $L/cuda_tests.log >> $S
timeout 90 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestFlashWG|TestSegmentsFast|TestModelMatchesCPU|TestAttnModelMatchesCPU' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
timeout 60 compute-sanitizer --tool racecheck $D/cuda.test -test.run 'TestFlashWG' > $L/racecheck.log 2>&1; echo "racecheck rc=$?" >> $S
tail -1 $L/racecheck.log >> $S
timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench.log 2>&1; echo "attn bench rc=$?" >> $S
grep KEVBENCH $L/attn_bench.log >> $S
for wg in on off; do
KEV_FLASH_WG=$wg KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 150 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_wg_$wg.log 2>&1; echo "pass wg=$wg rc=$?" >> $S
cp $L/pass_wg_$wg.log $OUT/
grep -E 'device_ms' $L/pass_wg_$wg.log | sed 's/profiled_ms.*attention=/attention=/' >> $S
done
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
