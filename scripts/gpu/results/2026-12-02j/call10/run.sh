#!/usr/bin/env bash
# call 10: the tree as committed (2e7ab79, attention on warpgroup products): Kev's serving cases side by side with
# PyTorch (bench.sh)
set -u
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
L=$OUT/logs; mkdir -p $L
mkdir -p $R/bin $R/.gold-in
python3 -c "
import lzma,os
for f,dst in [('kev','$R/bin/kev'),('tokenizer.json','$R/.gold-in/tokenizer.json')]:
    open(dst,'wb').write(lzma.open('$D/'+f+'.xz').read()); os.chmod(dst,0o755)
"
S=$L/summary.txt
cd $R
BENCH_TOTAL_S=300 OUT=$OUT/bench bash scripts/gpu/bench.sh > $L/bench_run.log 2>&1; echo "bench rc=$?" >> $S
echo "--- summary"; cat $S
grep -E 'kev bench:' $L/bench_run.log
cat $OUT/bench/compare.txt 2>/dev/null | head -12
cd $OUT && tar czf logs.tgz logs bench && rm -rf logs bench
