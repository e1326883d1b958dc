#!/bin/bash
# call 3: qk_norm_rope_bf16 in a grid-stride loop (8354cda) and the convolution's rows eight a thread (CONV_RB 8):
# their tests, memcheck, golden, and the per-kernel profiles of the serving passes and of the 64-request pass
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
timeout 60 $D/cuda.test -test.v -test.count 1 -test.run 'TestKernelLaunchConstants|TestConvVecMatchesGeneric|TestConvManySegments|TestQKNormRopeBF16|TestModelMatchesCPU|TestForwardBatch|TestSegmentsFast' > $L/cuda_tests.log 2>&1; echo "cuda tests rc=$?" >> $S
grep -E "^(--- FAIL|ok|PASS|FAIL)" $L/cuda_tests.log | tail -6 >> $S
echo "passed: $(grep -c -- '--- PASS' $L/cuda_tests.log)" >> $S
timeout 40 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestConvVecMatchesGeneric|TestConvManySegments' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 90 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_small.log 2>&1; echo "pass small rc=$?" >> $S
cp $L/pass_small.log $OUT/
grep -E 'device_ms' $L/pass_small.log | grep -v kept | sed 's/profiled_ms.*gemm=/gemm=/' >> $S
grep -E 'new invariant.*(conv1d|qk_norm)' $L/pass_small.log >> $S
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 130 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_64.log 2>&1; echo "pass 64 rc=$?" >> $S
cp $L/pass_64.log $OUT/
grep -E 'device_ms' $L/pass_64.log | grep -v kept | sed 's/profiled_ms.*gemm=/gemm=/' >> $S
grep -E 'new invariant.*(conv1d|qk_norm)' $L/pass_64.log >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
