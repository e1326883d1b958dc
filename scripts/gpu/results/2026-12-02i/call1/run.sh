#!/bin/bash
# call 1: precompute two value heads side by side; gdn_rows over the launch's tiles
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
for f in cuda.test kev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/machine.log 2>&1
cd $R/tensor/cuda
timeout 120 $D/cuda.test -test.v -test.run 'TestGDN|TestUpload' > $OUT/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)" $OUT/gdn_tests.log | head -5 >> $S
cd $R
timeout 90 $D/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $OUT/root_cuda.log 2>&1; echo "root cuda rc=$?" >> $S
grep -E "worst|^--- FAIL" $OUT/root_cuda.log | head -5 >> $S
cd $R/tensor/cuda
for b in new; do
  bin=$D/cuda.test; [ $b = base ] && bin=$D/cuda.base.test
  KEV_GDN_KINDS=tc timeout 100 $bin -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $OUT/gdn_bench_$b.log 2>&1; echo "gdn bench $b rc=$?" >> $S
done
for b in new; do
  bin=$D/cuda.test; [ $b = base ] && bin=$D/cuda.base.test
  KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 60 ncu -k regex:'gdn_' --launch-skip 3 --launch-count 6 --metrics gpu__time_duration.sum $bin -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $OUT/ncu_$b.log 2>&1; echo "ncu $b rc=$?" >> $S
done
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 120 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_small.log 2>&1; echo "pass small rc=$?" >> $S
echo "== table" >> $S
for b in base new; do grep KEVBENCH $OUT/gdn_bench_$b.log | sed "s/^/$b /" >> $S; done
for b in base new; do grep -E "gdn_|gpu__time_duration" $OUT/ncu_$b.log | grep -v "==PROF==" | paste - - | awk -v b=$b '{print b, $0}' | sed 's/  */ /g' | cut -c1-160 >> $S; done
grep -E "device_ms" $OUT/pass_small.log >> $S
grep -E "gdn" $OUT/pass_small.log | head -20 >> $S
cat $S
