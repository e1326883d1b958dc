#!/bin/bash
# call 7: scripts/gpu/final.sh again on 877abe4's binaries (.gold-in/c/bins.tar.xz carried), on the machine this call
# gets: call 5's machine ran the 2,200-token pass ~2.5 % slower than call 3's with the same kernels
OUT=$OUT bash scripts/gpu/final.sh > $OUT/final.out 2>&1
tail -40 $OUT/final.out
