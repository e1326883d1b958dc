#!/bin/bash
# call 2: scripts/gpu/final.sh on the tree whose new states' rows leave the last layer after its mixer
# (.gold-in/c/bins.tar.xz carried: kev, kev.test, cuda.test), then the pass GEMMs at M = 240 back to back, the
# serving passes' per-kernel profiles and the 64-request pass's (cut by its limit after its first repetition)
OUT=$OUT bash scripts/gpu/final.sh > $OUT/final.out 2>&1
cd tensor/cuda
KEV_PASSGEMM_M=240 timeout 40 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassGEMMs -test.benchtime 1x > $OUT/passgemm.log 2>&1
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 50 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_small.log 2>&1
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 85 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_64.log 2>&1
grep -E "device_ms|KEVBENCH" $OUT/passgemm.log | head -4
grep device_ms $OUT/pass_small.log | grep -v kept | sed 's/profiled_ms.*gemm=/gemm=/'
grep -E "device_ms|gdn" $OUT/pass_64.log | head -3
tail -45 $OUT/final.out
