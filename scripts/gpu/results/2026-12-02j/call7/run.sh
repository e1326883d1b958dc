#!/bin/bash
# call 7: which of the four instruction cuts slowed flash_segs_wg_d256_g4 — wgf0 (none; the scale in the exponent),
# wgf1 (copies with fixed columns), wgf2 (descriptors by offset), wgf4 (masks only on partial tiles), wgf8
# (rescaling skipped where 1), wg (all) — and call 4's wg1 (prev), twice each
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test prev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 30 $D/cuda.test -test.v -test.run 'TestFlashWG' > $L/attn_tests.log 2>&1; echo "attn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)" $L/attn_tests.log | sort -u | head -4 >> $S
for rep in 1 2; do
KEV_ATTN_CASES="1x2392 new,5x40 on 2200,64 requests 13+6x40" timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench_$rep.log 2>&1; echo "attn bench $rep rc=$?" >> $S
grep KEVBENCH $L/attn_bench_$rep.log | grep -v '" mma' >> $S
KEV_ATTN_KINDS=wg1 KEV_ATTN_CASES="1x2392 new,5x40 on 2200,64 requests 13+6x40" timeout 60 $D/prev.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_prev_$rep.log 2>&1; echo "prev $rep rc=$?" >> $S
grep KEVBENCH $L/attn_prev_$rep.log >> $S
done
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
