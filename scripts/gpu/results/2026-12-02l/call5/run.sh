#!/bin/bash
# call 5: scripts/gpu/final.sh on 877abe4 (.gold-in/c/bins.tar.xz carried: kev, kev.test, cuda.test; tokenizer.json
# unpacked from the tree's zstd copy), then the serving passes' per-kernel profile and the delta rule per layer
OUT=$OUT bash scripts/gpu/final.sh > $OUT/final.out 2>&1
cd tensor/cuda
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 95 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_64.log 2>&1
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 50 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_small.log 2>&1
KEV_GDN_KINDS=tc timeout 30 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $OUT/gdn_bench.log 2>&1
grep KEVBENCH $OUT/gdn_bench.log
grep device_ms $OUT/pass_small.log | grep -v kept | sed 's/profiled_ms.*gemm=/gemm=/'
grep -E "device_ms|gdn" $OUT/pass_64.log | head -3
tail -45 $OUT/final.out
