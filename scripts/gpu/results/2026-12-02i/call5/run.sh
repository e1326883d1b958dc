#!/bin/bash
# call 5: call 4 (precompute with __expf, tiles above the diagonal skipped) + gdn_rows products 8 tokens wide
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test cuda.prev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 120 $D/cuda.test -test.v -test.run 'TestGDN|TestDelta|TestModelMatchesCPU|TestForward' > $L/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|rms error" $L/gdn_tests.log | sort -u | tail -8 >> $S
for r in 1 2; do for b in prev new; do
  bin=$D/cuda.test; [ $b = prev ] && bin=$D/cuda.prev.test
  KEV_GDN_KINDS=tc timeout 100 $bin -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/gdn_bench_${b}_$r.log 2>&1; echo "gdn bench $b $r rc=$?" >> $S
done; done
for b in prev new; do
  bin=$D/cuda.test; [ $b = prev ] && bin=$D/cuda.prev.test
  KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 60 ncu -k regex:'gdn_' --launch-skip 4 --launch-count 2 --metrics gpu__time_duration.sum,smsp__inst_executed.sum $bin -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/ncu_$b.log 2>&1; echo "ncu $b rc=$?" >> $S
done
echo "== table" >> $S
for r in 1 2; do for b in prev new; do grep KEVBENCH $L/gdn_bench_${b}_$r.log | grep -E "64 req|6x40|2392" | sed "s/^/$b$r /" >> $S; done; done
for b in prev new; do grep -E "^  gdn_|gpu__time_duration|inst_executed" $L/ncu_$b.log | awk -v b=$b '{print b, $1, $NF}' >> $S; done
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
