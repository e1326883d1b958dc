#!/bin/bash
# call 3: scripts/gpu/final.sh again on call 2's binaries (.gold-in/c/bins.tar.xz carried), on the machine this call
# gets, then the pass GEMMs at M = 240 back to back, the delta rule a layer and the serving passes' profile
OUT=$OUT bash scripts/gpu/final.sh > $OUT/final.out 2>&1
cd tensor/cuda
KEV_PASSGEMM_M=240 timeout 40 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassGEMMs -test.benchtime 1x > /tmp/passgemm.log 2>&1
KEV_GDN_KINDS=tc timeout 30 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > /tmp/gdn_bench.log 2>&1
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,5q-2200r200 timeout 40 ../../bin/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > /tmp/pass_small.log 2>&1
{ grep -E "device_ms|KEVBENCH" /tmp/passgemm.log | head -4; grep KEVBENCH /tmp/gdn_bench.log; grep device_ms /tmp/pass_small.log; } > $OUT/benches.txt
cat $OUT/benches.txt
tail -45 $OUT/final.out
