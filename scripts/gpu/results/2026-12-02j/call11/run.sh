#!/bin/bash
# call 11: the 64-request pass (64 requests × 6 questions, new) profiled per launch on the committed tree (2e7ab79)
D=$(cd "$(dirname "$0")" && pwd)
R=$(pwd)
S=$OUT/summary.txt
L=/tmp/logs; mkdir -p $L
python3 -c "import lzma;open('$D/cuda.test','wb').write(lzma.open('$D/cuda.test.xz').read())"; chmod +x $D/cuda.test
cd $R/tensor/cuda
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 230 $D/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $L/pass_64.log 2>&1; echo "pass 64 rc=$?" >> $S
cp $L/pass_64.log $OUT/
grep -E 'KEVPROF' $L/pass_64.log | head -14 >> $S
cat $S
