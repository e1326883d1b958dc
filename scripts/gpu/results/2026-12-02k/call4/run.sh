#!/bin/bash
# call 4: scripts/gpu/final.sh on the tree as committed (.gold-in/c/bins.tar.xz carried: kev, kev.test, cuda.test;
# tokenizer.json unpacked from the tree's zstd copy), then the serving passes' per-kernel profile
OUT=$OUT bash scripts/gpu/final.sh > $OUT/final.out 2>&1
(cd tensor/cuda && KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 60 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_small.log 2>&1)
grep device_ms $OUT/pass_small.log | grep -v kept | sed 's/profiled_ms.*gemm=/gemm=/'
tail -45 $OUT/final.out
