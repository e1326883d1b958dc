#!/bin/bash
# call 6: flash_segs_wg_d256_g4 with fewer instructions a tile and the copies right after the barrier (wg), and wgs
# (warpgroup 1's products after warpgroup 0's S), against call 4's binary (prev: wg1 = the one-after-the-other
# kernel of call 3); tests, BenchmarkFlashSegs, ncu durations and instructions
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test prev.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 60 $D/cuda.test -test.v -test.run 'TestFlashWG|TestSegmentsFast' > $L/attn_tests.log 2>&1; echo "attn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|alone|same bits" $L/attn_tests.log | sort -u | head -8 >> $S
for b in cuda prev; do
timeout 60 $D/$b.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench_$b.log 2>&1; echo "attn bench $b rc=$?" >> $S
grep KEVBENCH $L/attn_bench_$b.log | grep -v '" mma' >> $S
done
for kind in wg wgs; do
KEV_ATTN_KINDS=$kind KEV_ATTN_CASES="1x2392 new" timeout 60 ncu -k regex:flash_segs --launch-skip 3 --launch-count 1 --metrics gpu__time_duration.sum,smsp__inst_executed.sum $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/ncu_$kind.log 2>&1; echo "ncu $kind rc=$?" >> $S
grep -E "gpu__time|inst_executed" $L/ncu_$kind.log >> $S
done
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
