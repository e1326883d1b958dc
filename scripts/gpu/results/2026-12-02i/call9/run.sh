#!/bin/bash
# call 9: the precompute without its loop over groups of value heads (one group: P = NH): tests, golden, memcheck, BenchmarkGDN
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R
timeout 40 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
timeout 40 $D/cuda.test -test.v -test.run 'TestGDN|TestModelMatchesCPU' > $L/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ" $L/gdn_tests.log | sort -u | tail -6 >> $S
timeout 50 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestGDNRows|TestGDNSegments' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
KEV_GDN_KINDS=tc timeout 30 $D/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/gdn_bench.log 2>&1; echo "gdn bench rc=$?" >> $S
grep KEVBENCH $L/gdn_bench.log >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
