#!/usr/bin/env bash
# FP8 served beside bf16, one command on a Hopper GPU (about a minute and a half): the Kev-4B-shaped checkpoint served
# by kev bench in each type of VARIANTS (default "bfloat16 fp8": Kev's four cases, 1 and 64 clients), then
# kev eval's agreement of FP8 with bf16 on 400 generated requests. Build bin/kev as fp8.sh says; run from the
# repository root: OUT=dir bash scripts/gpu/fp8_serve.sh.
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
chmod +x bin/kev 2>/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/machine.log" 2>&1
[ -f bin/kev ] || { echo "no bin/kev"; exit 1; }
unpack_tokenizer "$TOKENIZER" || { echo "no $TOKENIZER: zstd or python3 with pyarrow needed"; exit 1; }
if [ ! -f "$KEV4B/.complete" ]; then
  timeout 150 python3 scripts/golden/make_kev4b.py "$KEV4B" --tokenizer "$TOKENIZER" >"$OUT/make_kev4b.log" 2>&1 && touch "$KEV4B/.complete"
fi
python3 scripts/gpu/make_eval_set.py -n 400 >/tmp/eval_set.jsonl
for dt in ${VARIANTS:-bfloat16 fp8}; do
  short=${dt/bfloat16/bf16}
  KEV_CUDA_GRAPHS=off timeout 90 bin/kev bench -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda \
    -dtype "$dt" -cases "$CASES" -runs 20 -warmup 3 -clients 1,64 -duration 8s -out "$OUT/kev_bench_$short.json" >"$OUT/kev_bench_$short.log" 2>&1
  grep -E "^kev bench: [0-9]+ (questions|clients)" "$OUT/kev_bench_$short.log" | sed "s/^/$short /"
  if [ "$dt" = fp8 ]; then
    timeout 90 bin/kev eval -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda -dtype bfloat16 -compare fp8 \
      -concurrency 32 -svg none -json -o "$OUT/fp8_eval_$short.json" /tmp/eval_set.jsonl >"$OUT/fp8_eval_$short.log" 2>&1
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compare"]; print(sys.argv[2], {k: c[k] for k in ("questions","max_delta","median_delta","argmax_agreement","clear_flips")})' \
      "$OUT/fp8_eval_$short.json" "$short" 2>&1
  fi
done
echo "done in $SECONDS s"
