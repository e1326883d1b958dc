#!/bin/bash
# call 4: the pipelined kernel's copies issued after its products; BenchmarkFlashSegs; ncu --set full of
# flash_segs_wg_d256_g4 on 1 × 2,392 tokens (regions by sass_regions.py, details)
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L /tmp/rep
for f in cuda.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 30 $D/cuda.test -test.v -test.run 'TestFlashWG' > $L/attn_tests.log 2>&1; echo "attn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|alone|same bits|pipelined" $L/attn_tests.log | sort -u | head -8 >> $S
timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench.log 2>&1; echo "attn bench rc=$?" >> $S
grep KEVBENCH $L/attn_bench.log >> $S
for k in flash_segs_wg_d256_g4 flash_segs_wg1_d256_g4; do
  kind=wg; [ $k = flash_segs_wg1_d256_g4 ] && kind=wg1
  KEV_ATTN_KINDS=$kind KEV_ATTN_CASES="1x2392 new" timeout 150 ncu -k regex:$k --launch-skip 3 --launch-count 1 --set full --import-source no -f -o /tmp/rep/$k $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > /tmp/rep/$k.run.log 2>&1; echo "ncu full $k rc=$?" >> $S
  ncu --import /tmp/rep/$k.ncu-rep --page source --csv --print-source sass > /tmp/rep/$k.csv 2>/dev/null
  python3 $R/scripts/gpu/sass_regions.py /tmp/rep/$k.csv 30 > $OUT/regions_$k.txt 2>&1
  ncu --import /tmp/rep/$k.ncu-rep --page details > $OUT/details_$k.txt 2>&1
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|Executed Ipc Active" $OUT/details_$k.txt | head -8 >> $S
done
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
