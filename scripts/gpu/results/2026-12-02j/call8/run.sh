#!/bin/bash
# call 8: flash_segs_wg_d256_g4 = S scaled before the maxima (as call 3's kernel) + masks only on partial tiles (20);
# variants wgf16 (call 3's form), wgf31 (every cut), wgf4, wgf22, wgf17; tests, memcheck, pass profiles (the golden test was left out: with kev.test the carried files were over the limit)
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 60 $D/cuda.test -test.v -test.run 'TestFlashWG|TestSegmentsFast|TestFlashAttention|TestAttnModelMatchesCPU|TestModelMatchesCPU' > $L/attn_tests.log 2>&1; echo "tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|alone|same bits" $L/attn_tests.log | sort -u | head -8 >> $S
KEV_ATTN_CASES="1x2392 new,5x40 on 2200,6x40 on 13,64 requests 13+6x40" timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench.log 2>&1; echo "attn bench rc=$?" >> $S
grep KEVBENCH $L/attn_bench.log >> $S
timeout 60 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestFlashWG|TestSegmentsFast' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 150 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_small.log 2>&1; echo "pass rc=$?" >> $S
cp $L/pass_small.log $OUT/
grep -E 'device_ms' $L/pass_small.log | sed 's/profiled_ms.*attention=/attention=/' >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
