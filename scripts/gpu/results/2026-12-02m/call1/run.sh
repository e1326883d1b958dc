#!/bin/bash
# call 1: the new states' rows leave the last layer after its mixer (b) against 877abe4 (a): CUDA model tests,
# golden and batch invariance, the serving passes' profiles side by side
S=$OUT/summary.txt
python3 -c "
import lzma,tarfile
t=tarfile.open(fileobj=lzma.open('.gold-in/d1/bins.tar.xz')); t.extractall('/tmp/b')
"
chmod +x /tmp/b/*
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/machine.log 2>&1
R=$(pwd)
cd tensor/cuda
timeout 150 /tmp/b/cuda.test.b -test.v -test.run 'TestForwardBatchedMatchesCPU|TestAttnModelMatchesCPU|TestForwardBatchInvariant|TestPassGraphs' > $OUT/model_tests.log 2>&1; echo "model tests b rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)" $OUT/model_tests.log | head -8 >> $S
cd $R
timeout 120 /tmp/b/kev.test.b -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > $OUT/root.log 2>&1; echo "root golden b rc=$?" >> $S
grep -E "^(--- |FAIL|ok|PASS)|worst|flips" $OUT/root.log | head -12 >> $S
cd tensor/cuda
for b in a b a b; do
  KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,5q-370,5q-2200r200 timeout 60 /tmp/b/cuda.test.$b -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x >> $OUT/pass_small_$b.log 2>&1; echo "pass small $b rc=$?" >> $S
done
echo "== table" >> $S
for b in a b; do grep -E "device_ms" $OUT/pass_small_$b.log | sed 's/ profiled_ms=[0-9.]* / /' | sed "s/^/$b /" >> $S; done
cat $S
