#!/bin/bash
# call 2: flash_segs_wg_d256_g4 timed (BenchmarkFlashSegs fixed), the 2,200-token pass profiled with it and without
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
for f in cuda.test; do python3 -c "import lzma,sys;open('$D/$f','wb').write(lzma.open('$D/$f.xz').read())"; chmod +x $D/$f; done
cd $R/tensor/cuda
timeout 30 $D/cuda.test -test.v -test.run 'TestFlashWG' > $L/attn_tests.log 2>&1; echo "attn tests rc=$?" >> $S
grep -E "^(--- FAIL|FAIL|ok|PASS)|differ|alone|same bits" $L/attn_tests.log | sort -u | head -6 >> $S
timeout 60 $D/cuda.test -test.run '^$' -test.bench BenchmarkFlashSegs -test.benchtime 1x > $L/attn_bench.log 2>&1; echo "attn bench rc=$?" >> $S
grep KEVBENCH $L/attn_bench.log >> $S
for wg in off on; do
KEV_FLASH_WG=$wg KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=5q-2200r200,6q-short timeout 100 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_wg_$wg.log 2>&1; echo "pass wg=$wg rc=$?" >> $S
grep -E 'device_ms|flash' $L/pass_wg_$wg.log | grep -v cached >> $S
done
tar czf $OUT/logs.tgz -C /tmp logs
cat $S
