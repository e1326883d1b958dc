#!/bin/bash
# call 2: the residual vectors of the GEMM epilogues loaded ahead (chunked tiles: 4 k tiles before the last;
# stream-K whole tiles: a row's at once): tests, memcheck, golden, the 370- and 2,200-token passes and the
# 64-request pass profiled with KEV_GEMM_RESIDUAL on and off (same bits)
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
python3 -c "
import lzma,tarfile
tarfile.open(fileobj=lzma.open('$D/bins.tar.xz')).extractall('$D')
"
chmod +x $D/cuda.test $D/kev.test
cd $R
timeout 50 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
timeout 100 $D/cuda.test -test.v -test.count 1 -test.run 'TestMatMulAddRMSNormFused|TestGEMM$|TestGEMMStreamK|TestGEMMBatchInvariant|TestGEMMPlanInvariant|TestConformance|TestModelMatchesCPU|TestForwardBatch' > $L/cuda_tests.log 2>&1; echo "cuda tests rc=$?" >> $S
grep -E "^(--- FAIL|ok|PASS|FAIL)" $L/cuda_tests.log | tail -6 >> $S
echo "passed: $(grep -c -- '--- PASS' $L/cuda_tests.log)" >> $S
timeout 60 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestMatMulAddRMSNormFused|TestGEMMStreamKLayouts' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
for r in on off; do
KEV_GEMM_RESIDUAL=$r KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=5q-370,5q-2200r200 timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_small_$r.log 2>&1; echo "pass small $r rc=$?" >> $S
cp $L/pass_small_$r.log $OUT/
grep -E 'device_ms' $L/pass_small_$r.log | grep -v kept | sed 's/profiled_ms.*gemm=/gemm=/' >> $S
done
for r in on off; do
KEV_GEMM_RESIDUAL=$r KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 130 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_64_$r.log 2>&1; echo "pass 64 $r rc=$?" >> $S
cp $L/pass_64_$r.log $OUT/
grep -E 'device_ms' $L/pass_64_$r.log | grep -v kept | sed 's/profiled_ms.*gemm=/gemm=/' >> $S
done
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
