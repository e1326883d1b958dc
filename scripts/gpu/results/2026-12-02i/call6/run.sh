#!/bin/bash
# call 6: gdn_rows's warpgroups decoupled (mbarrier ring), warpgroup 1 one product behind
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test cuda.prev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 100 $D/cuda.test -test.v -test.run 'TestGDN' > $L/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|panic" $L/gdn_tests.log | sort -u | tail -8 >> $S
for r in 1 2; do for b in prev new; do
  bin=$D/cuda.test; [ $b = prev ] && bin=$D/cuda.prev.test
  KEV_GDN_KINDS=tc timeout 60 $bin -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/gdn_bench_${b}_$r.log 2>&1; echo "gdn bench $b $r rc=$?" >> $S
done; done
KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 60 ncu -k regex:'gdn_rows' --launch-skip 2 --launch-count 1 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active $D/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/ncu_new.log 2>&1; echo "ncu rc=$?" >> $S
timeout 120 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestGDNRows' > $L/memcheck.log 2>&1; echo "memcheck rc=$?" >> $S
tail -2 $L/memcheck.log >> $S
echo "== table" >> $S
for r in 1 2; do for b in prev new; do grep KEVBENCH $L/gdn_bench_${b}_$r.log | grep -E "64 req|6x40|2x40|2392" | sed "s/^/$b$r /" >> $S; done; done
grep -E "^  gdn_|gpu__time|inst_exec|tensor" $L/ncu_new.log | awk '{print $1, $NF}' >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
