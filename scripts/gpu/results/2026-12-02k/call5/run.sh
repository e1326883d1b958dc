#!/bin/bash
# call 5: the tree of call 4: the 6-question cached pass's GEMMs back to back (M = 240) and the 64-request pass's
# per-kernel profile
python3 -c "
import lzma,tarfile
t=tarfile.open(fileobj=lzma.open('.gold-in/c/bins.tar.xz')); t.extract('cuda.test','/tmp/b')
"
chmod +x /tmp/b/cuda.test
cd tensor/cuda
KEV_PASSGEMM_M=240 timeout 45 /tmp/b/cuda.test -test.run '^$' -test.bench BenchmarkPassGEMMs -test.benchtime 1x > $OUT/passgemm.log 2>&1; echo "passgemm rc=$?"
grep -E "KEVBENCH" $OUT/passgemm.log | head -8
KEV_PROFILE_MODES=invariant KEV_PROFILE_CASES=64x6q-short timeout 125 /tmp/b/cuda.test -test.run '^$' -test.bench BenchmarkPassKernels -test.benchtime 1x > $OUT/pass_64.log 2>&1; echo "pass 64 rc=$?"
grep "new invariant" $OUT/pass_64.log | head -20
