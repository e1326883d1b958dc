#!/bin/bash
# call 2: right-looking diagonal substitution in the precompute; gdn_rows issues copies under its products
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test cuda.prev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > $L/machine.log 2>&1
cd $R/tensor/cuda
timeout 120 $D/cuda.test -test.v -test.run 'TestGDN' > $L/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)" $L/gdn_tests.log | head -5 >> $S
for r in 1 2; do for b in prev new; do
  bin=$D/cuda.test; [ $b = prev ] && bin=$D/cuda.prev.test
  KEV_GDN_KINDS=tc timeout 100 $bin -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/gdn_bench_${b}_$r.log 2>&1; echo "gdn bench $b $r rc=$?" >> $S
done; done
for b in prev new; do
  bin=$D/cuda.test; [ $b = prev ] && bin=$D/cuda.prev.test
  KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 60 ncu -k regex:'gdn_' --launch-skip 4 --launch-count 2 --metrics gpu__time_duration.sum $bin -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > $L/ncu_$b.log 2>&1; echo "ncu $b rc=$?" >> $S
done
mkdir -p /tmp/rep
for k in gdn_prep_kh gdn_rows_t3; do
  KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 120 ncu -k regex:$k --launch-skip 2 --launch-count 1 --set full --import-source no -f -o /tmp/rep/$k $D/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > /tmp/rep/$k.run.log 2>&1; echo "ncu full $k rc=$?" >> $S
  ncu --import /tmp/rep/$k.ncu-rep --page source --csv --print-source sass > /tmp/rep/$k.csv 2>/dev/null
  python3 $R/scripts/gpu/sass_regions.py /tmp/rep/$k.csv 30 > $OUT/regions_$k.txt 2>&1
  ncu --import /tmp/rep/$k.ncu-rep --page details > $OUT/details_$k.txt 2>&1
done
echo "== table" >> $S
for r in 1 2; do for b in prev new; do grep KEVBENCH $L/gdn_bench_${b}_$r.log | sed "s/^/$b$r /" >> $S; done; done
for b in prev new; do grep -E "^  gdn_|gpu__time_duration" $L/ncu_$b.log | paste - - | awk -v b=$b '{print b, $1, $NF}' >> $S; done
head -30 $OUT/regions_gdn_prep_kh.txt >> $S
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
