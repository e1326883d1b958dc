#!/bin/bash
# call 2: the tree of 1 commit after call 1 (gdn_rows's [Xᵀ Pᵀ] merged): delta-rule tests, then Nsight Compute's
# source-level samples of gdn_rows_e5 and gdn_prep_kh on the 64-request layer
S=$OUT/summary.txt
python3 -c "import lzma;open('/tmp/cuda.test','wb').write(lzma.open('.gold-in/c2/cuda.test.xz').read())"
chmod +x /tmp/cuda.test
R=$(pwd)
cd tensor/cuda
timeout 150 /tmp/cuda.test -test.v -test.run 'TestGDN' > /tmp/gdn_tests.log 2>&1; echo "gdn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)" /tmp/gdn_tests.log | head -5 >> $S
mkdir -p /tmp/rep
for k in gdn_rows_e5 gdn_prep_kh; do
  KEV_GDN_KINDS=tc KEV_GDN_CASES="64 requests 13+6x40" timeout 150 ncu -k regex:$k --launch-skip 2 --launch-count 1 --set full --import-source no -f -o /tmp/rep/$k /tmp/cuda.test -test.run '^$' -test.bench BenchmarkGDN -test.benchtime 1x > /tmp/rep/$k.run.log 2>&1; echo "ncu full $k rc=$?" >> $S
  ncu --import /tmp/rep/$k.ncu-rep --page source --csv --print-source sass > /tmp/rep/$k.csv 2>/dev/null
  python3 $R/scripts/gpu/sass_regions.py /tmp/rep/$k.csv 40 > $OUT/regions_$k.txt 2>&1
  ncu --import /tmp/rep/$k.ncu-rep --page details > $OUT/details_$k.txt 2>&1
  xz -6 -c /tmp/rep/$k.csv > $OUT/$k.csv.xz
done
head -20 $OUT/regions_gdn_rows_e5.txt >> $S
grep -E "Duration|Registers|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput" $OUT/details_*.txt >> $S
cat $S
