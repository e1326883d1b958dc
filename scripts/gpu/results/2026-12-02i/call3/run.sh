#!/bin/bash
# call 3: norms from the diagonals of K Kᵀ and Q Qᵀ; (fk·Δ) only for segments
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $L/machine.log 2>&1
cd $R/tensor/cuda
timeout 120 $D/cuda.test -test.v -test.run 'TestGDN|TestDelta|TestModelMatchesCPU|TestForward' > $L/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|rms error" $L/gdn_tests.log | sort -u | tail -14 >> $S
cd $R
timeout 90 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $L/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL" $L/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
KEV_GDN_KINDS=tc timeout 100 $D/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/gdn_bench.log 2>&1; echo "gdn bench rc=$?" >> $S
KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 60 ncu -k regex:'gdn_' --launch-skip 4 --launch-count 2 --metrics gpu__time_duration.sum $D/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/ncu.log 2>&1; echo "ncu rc=$?" >> $S
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 120 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_small.log 2>&1; echo "pass small rc=$?" >> $S
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 200 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_64.log 2>&1; echo "pass 64 rc=$?" >> $S
echo "== table" >> $S
grep KEVBENCH $L/gdn_bench.log >> $S
grep -E "^  gdn_|gpu__time_duration" $L/ncu.log | paste - - | awk '{print $1, $NF}' >> $S
grep -E "device_ms" $OUT/pass_small.log $OUT/pass_64.log | sed 's/^.*KEVPROF/KEVPROF/' >> $S
grep -E "gdn" $OUT/pass_64.log | head -6 >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
