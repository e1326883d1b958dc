#!/bin/bash
# call 8 (final tree): golden and batch invariance, the delta-rule tests, memcheck, BenchmarkGDN, per-launch
# profiles of the 64-request pass and of the serving passes
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $L/machine.log 2>&1
cd $R
timeout 40 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL|^(ok|PASS|FAIL)" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
timeout 40 $D/cuda.test -test.v -test.run 'TestGDN' > $L/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ" $L/gdn_tests.log | sort -u | tail -6 >> $S
timeout 50 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestGDNRows|TestGDNSegments' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -1 $L/memcheck.log >> $S
KEV_GDN_KINDS=tc timeout 30 $D/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $OUT/gdn_bench.log 2>&1; echo "gdn bench rc=$?" >> $S
KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 30 ncu -k regex:'gdn_' --launch-skip 4 --launch-count 2 --metrics gpu__time_duration.sum,smsp__inst_executed.sum $D/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/ncu.log 2>&1; echo "ncu rc=$?" >> $S
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 200 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_64.log 2>&1; echo "pass 64 rc=$?" >> $S
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 90 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_small.log 2>&1; echo "pass small rc=$?" >> $S
echo "== table" >> $S
grep KEVBENCH $OUT/gdn_bench.log >> $S
grep -E "^  gdn_|gpu__time|inst_exec" $L/ncu.log | awk '{print $1, $NF}' >> $S
grep -E "device_ms" $OUT/pass_64.log $OUT/pass_small.log | sed 's/^.*KEVPROF/KEVPROF/' | grep -v new-kept >> $S
grep -E "gdn" $OUT/pass_64.log | head -4 >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
