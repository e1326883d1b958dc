#!/usr/bin/env bash
# The FP8 products' promotion interval, one command on a Hopper GPU: the default kernels (an fp32 add every 128
# codes) beside the experimental ones (every 256 codes, KEV_CUDA_FP8_PROMO=256): their tests against the reference,
# BenchmarkGEMMFP8 (the planned tile widths, 128-column tiles, the 256-code kernels, and every width when
# KEV_FP8_WIDTHS=all, the default here), then the Kev-4B-shaped checkpoint served in FP8 both ways
# and bf16, and kev eval's agreement with bf16 both ways. Build bin/cuda.test and bin/kev as fp8.sh says; run from
# the repository root: OUT=dir bash scripts/gpu/fp8_promo.sh (a part whose binary is missing is skipped; PARTS=kernels
# or PARTS=serving runs one part; VARIANTS="bfloat16 fp8" serves those alone).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
KEV4B=${KEV4B:-/tmp/kev4b}
TOKENIZER=.gold-in/tokenizer.json
CASES=scripts/golden/bench-cases.json
# shellcheck source=steps.sh
source scripts/gpu/steps.sh # unpack_tokenizer
chmod +x bin/cuda.test bin/kev 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/machine.log" 2>&1
PARTS=${PARTS:-kernels serving}
if [[ " $PARTS " == *" kernels "* ]] && [ -f bin/cuda.test ]; then
(cd tensor/cuda && timeout 120 ../../bin/cuda.test -test.v -test.run 'TestGEMMFP8Promo256|TestMatMulFP8BatchInvariant|TestGEMMFP8Tiles|TestMatMulFP8$' >"$OUT/promo_tests.log" 2>&1
  echo "tests exit $?" >>"$OUT/promo_tests.log"
  KEV_FP8_WIDTHS=${KEV_FP8_WIDTHS:-all} timeout 180 ../../bin/cuda.test -test.run '^$' -test.bench '^BenchmarkGEMMFP8$' -test.benchtime 1x >"$OUT/gemmfp8.log" 2>&1)
grep -E "^(--- |FAIL|ok|PASS|tests exit)|largest relative" "$OUT/promo_tests.log"
grep -E "path=(bf16|fp8|fp8-bn128|fp8-promo256) " "$OUT/gemmfp8.log"
fi
[[ " $PARTS " == *" serving "* ]] && [ -f bin/kev ] || { echo "done in $SECONDS s (no serving)"; exit 0; }
unpack_tokenizer "$TOKENIZER" || { echo "no $TOKENIZER: zstd or python3 with pyarrow needed"; exit 1; }
if [ ! -f "$KEV4B/.complete" ]; then
  timeout 150 python3 scripts/golden/make_kev4b.py "$KEV4B" --tokenizer "$TOKENIZER" >"$OUT/make_kev4b.log" 2>&1 && touch "$KEV4B/.complete"
fi
python3 scripts/gpu/make_eval_set.py -n 400 >/tmp/eval_set.jsonl
for v in ${VARIANTS:-bfloat16 fp8 fp8:256}; do
  dt=${v%%:*} promo=128 short=${v/bfloat16/bf16}
  [ "$v" != "$dt" ] && promo=256
  short=${short/:/_}
  KEV_CUDA_FP8_PROMO=$promo KEV_CUDA_GRAPHS=off timeout 90 bin/kev bench -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda \
    -dtype "$dt" -cases "$CASES" -runs 20 -warmup 3 -clients 1,64 -duration 8s -out "$OUT/kev_bench_$short.json" >"$OUT/kev_bench_$short.log" 2>&1
  grep -E "^kev bench: [0-9]+ (questions|clients)" "$OUT/kev_bench_$short.log" | sed "s/^/$short /"
  if [ "$dt" = fp8 ]; then
    KEV_CUDA_FP8_PROMO=$promo timeout 90 bin/kev eval -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda -dtype bfloat16 -compare fp8 \
      -concurrency 32 -svg none -json -o "$OUT/fp8_eval_$short.json" /tmp/eval_set.jsonl >"$OUT/fp8_eval_$short.log" 2>&1
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compare"]; print(sys.argv[2], {k: c[k] for k in ("questions","max_delta","median_delta","argmax_agreement","clear_flips")})' \
      "$OUT/fp8_eval_$short.json" "$short" 2>&1
  fi
done
echo "done in $SECONDS s"
