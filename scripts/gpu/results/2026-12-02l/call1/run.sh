#!/bin/bash
# call 1: gdn_rows's [Xᵀ Pᵀ] as one product of width 16E a k step and part of S₀ (a), and T and M copied only in
# the blocks on and below the diagonal (ab), against the tree before them (old)
S=$OUT/summary.txt
python3 -c "
import lzma,tarfile
t=tarfile.open(fileobj=lzma.open('.gold-in/c1/bins.tar.xz')); t.extractall('/tmp/b')
"
chmod +x /tmp/b/*
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/machine.log 2>&1
R=$(pwd)
cd tensor/cuda
timeout 150 /tmp/b/cuda.test.ab -test.v -test.run 'TestGDN' > /tmp/gdn_tests.log 2>&1; echo "gdn tests ab rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)" /tmp/gdn_tests.log | head -5 >> $S
grep -E "^--- (PASS|FAIL)" /tmp/gdn_tests.log > $OUT/gdn_tests.txt
cd $R
timeout 90 /tmp/b/kev.test -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > /tmp/root.log 2>&1; echo "root golden rc=$?" >> $S
grep -E "^(--- |FAIL|ok|PASS)|worst|flips" /tmp/root.log | head -12 >> $S
cd tensor/cuda
for r in 1 2; do for b in old a ab; do
  KEV_GDN_KINDS=tc timeout 40 /tmp/b/cuda.test.$b -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > /tmp/gdn_bench_${b}_$r.log 2>&1; echo "gdn bench $b $r rc=$?" >> $S
done; done
for b in ab old; do
  KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 115 /tmp/b/cuda.test.$b -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_64_$b.log 2>&1; echo "pass 64 $b rc=$?" >> $S
done
timeout 60 compute-sanitizer --tool memcheck /tmp/b/cuda.test.ab -test.run 'TestGDNRows' > /tmp/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -3 /tmp/memcheck.log >> $S
cat /tmp/gdn_bench_*.log > $OUT/gdn_bench.log
echo "== table" >> $S
for r in 1 2; do for b in old a ab; do grep KEVBENCH /tmp/gdn_bench_${b}_$r.log | sed "s/^KEVBENCH gdn /$b$r /" >> $S; done; done
for b in ab old; do grep -E "new invariant\" device|gdn" $OUT/pass_64_$b.log | head -3 | sed "s/^/$b /" >> $S; done
cat $S
