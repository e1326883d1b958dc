#!/bin/bash
# call 3: gdn_rows without divisions in its copies' cursor, 32-bit offsets in a chunk's rows and new (zero) states
# set without loads (c), against the tree of call 2 (a)
S=$OUT/summary.txt
python3 -c "
import lzma,tarfile
t=tarfile.open(fileobj=lzma.open('.gold-in/c3/bins.tar.xz')); t.extractall('/tmp/b')
"
chmod +x /tmp/b/*
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $OUT/machine.log 2>&1
R=$(pwd)
cd tensor/cuda
timeout 150 /tmp/b/cuda.test.c -test.v -test.run 'TestGDN' > /tmp/gdn_tests.log 2>&1; echo "gdn tests c rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)" /tmp/gdn_tests.log | head -5 >> $S
cd $R
timeout 90 /tmp/b/kev.test.c -test.v -test.run 'TestPredictorGoldenCUDA|TestBatchInvariantCUDA' > /tmp/root.log 2>&1; echo "root golden c rc=$?" >> $S
grep -E "^(--- |FAIL|ok|PASS)|worst|flips" /tmp/root.log | head -12 >> $S
cd tensor/cuda
for r in 1 2; do for b in a c; do
  KEV_GDN_KINDS=tc timeout 40 /tmp/b/cuda.test.$b -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > /tmp/gdn_bench_${b}_$r.log 2>&1; echo "gdn bench $b $r rc=$?" >> $S
done; done
for b in c a; do
  KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 100 /tmp/b/cuda.test.$b -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_64_$b.log 2>&1; echo "pass 64 $b rc=$?" >> $S
done
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=6q-short,6q-kev257,5q-370,5q-2200r200 timeout 60 /tmp/b/cuda.test.c -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_small_c.log 2>&1; echo "pass small c rc=$?" >> $S
timeout 70 compute-sanitizer --tool memcheck /tmp/b/cuda.test.c -test.run 'TestGDNRows' > /tmp/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -2 /tmp/memcheck.log >> $S
cat /tmp/gdn_bench_*.log > $OUT/gdn_bench.log
echo "== table" >> $S
for r in 1 2; do for b in a c; do grep KEVBENCH /tmp/gdn_bench_${b}_$r.log | grep -E "64 requests|6x40|2x40|1x2392" | sed "s/^KEVBENCH gdn /$b$r /" >> $S; done; done
for b in c a; do grep -E "new invariant\" device|gdn" $OUT/pass_64_$b.log | head -3 | sed "s/^/$b /" >> $S; done
grep -E "device_ms" $OUT/pass_small_c.log | sed 's/ profiled_ms.*//' >> $S
cat $S
