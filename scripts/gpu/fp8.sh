#!/usr/bin/env bash
# FP8 beside bf16 on one Hopper GPU, in one command: the FP8 kernels' tests and their times beside the bf16 GEMMs,
# the golden checkpoints in FP8, and the Kev-4B-shaped random checkpoint served in bf16 and in FP8 (Kev's serving
# cases and 1 / 32 / 64 clients), with what FP8 does to the answers.
#
# Build on the Go machine, from the repository root (CUDA 12.x headers and the libcuda stub), any of:
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/cuda.test ./tensor/cuda   # kernels
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/kev.test .               # goldens
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go build -tags cuda -o bin/kev ./examples/kev         # serving
# then, from the repository root on the GPU machine (bin/kev also needs .gold-in/tokenizer.json, the Qwen3
# tokenizer, unpacked here from the tree's copy when zstd or python's pyarrow is there):
#   OUT=/some/dir bash scripts/gpu/fp8.sh
# A step whose binary is missing is skipped (so that the steps can be split over calls, the machine kept warm: the
# checkpoint stays in $KEV4B), and PARTS (default "kernels goldens serving") names the parts to run. Steps, each within what is left of BENCH_TOTAL_S (default 540 s):
#   1. bin/cuda.test: the FP8 tests (QuantRowsE4M3, MatMulFP8, tiles, batch invariance), then BenchmarkGEMMFP8
#      (KEVBENCH gemm-fp8 lines: bf16, fp8, fp8+quant at M = 40, 240, 2,392, 16,384)   -> $OUT/fp8_kernels.log
#   2. bin/kev.test: the golden checkpoints with DType FP8 against the fp32 reference    -> $OUT/fp8_goldens.log
#   3. make_kev4b.py (skipped when $KEV4B is complete), then bin/kev bench -device cuda -dtype bfloat16 and
#      -dtype fp8 on scripts/golden/bench-cases.json, graphs off (KEV_CUDA_GRAPHS=off), and with GRAPHS set bf16
#      again with graphs on   -> $OUT/kev_bench_bf16.json, kev_bench_fp8.json (kev_bench_bf16_graphs.json) and logs
#   4. fp8_compare.py: the two side by side, and the answers' agreement   -> $OUT/fp8_compare.txt, fp8_compare.json
#      VARIANTS (default "bfloat16 fp8") may add FP8 with a promotion interval, fp8:promoN (KEV_CUDA_FP8_PROMOTE=N,
#      N k tiles or all), all of K in the tensor cores on tiles N columns wide, fp8:wideN (KEV_CUDA_FP8_WIDE=N), and
#      the k loop that keeps products in flight, fp8:pipe (KEV_CUDA_FP8_PIPE=on), the narrow products on clusters
#      sharing X tiles, fp8:xc (KEV_CUDA_FP8_XC=on), or several joined (fp8:pipe:xc)
#      -> kev_bench_fp8_promoN.json, kev_bench_fp8_wideN.json; steps 4 and 5 then run for each FP8 variant
#   5. kev eval -dtype bfloat16 -compare fp8 on EVAL_N (default 400) labelled requests from make_eval_set.py: argmax
#      agreement, |Δp| and the flips outside near-ties over ~1,400 questions   -> $OUT/fp8_eval.json, fp8_eval.log;
#   6. for each pass budget in PASS_TOKENS (none by default): 64 clients, both dtypes, 15 s, -pass-tokens
#      -> $OUT/kev_bench_{bf16,fp8}_ptN.json
# Exit status: 0 when every step that ran succeeded, 1 when one failed, 2 when there is no GPU.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$root/.out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) # absolute: step 1 runs in tensor/cuda
KEV4B=${KEV4B:-/tmp/kev4b}
TOTAL=${BENCH_TOTAL_S:-540}
EVAL_N=${EVAL_N:-400}        # labelled requests for step 5 (0: none)
PASS_TOKENS=${PASS_TOKENS:-} # pass budgets for step 6, e.g. "16384 32768" (none by default)
GRAPHS=${GRAPHS:-}           # non-empty: step 3 also serves bf16 with KEV_CUDA_GRAPHS=on (kev_bench_bf16_graphs.json)
PARTS=" ${PARTS:-kernels goldens serving} " # kernels: step 1; goldens: step 2; serving: steps 3 to 6
NF8=$(echo ${VARIANTS:-fp8} | tr ' ' '\n' | grep -c '^fp8') # FP8 variants: one kev eval each in step 5
RESERVE=$(( (EVAL_N > 0 ? 60 * NF8 : 0) + 70 * $(echo $PASS_TOKENS | wc -w) ))  # seconds the benches leave for 5 and 6
CASES=scripts/golden/bench-cases.json
TOKENIZER=.gold-in/tokenizer.json
cd "$root"
export PYTHONUNBUFFERED=1
status=0
# shellcheck source=steps.sh
source scripts/gpu/steps.sh # left, step

if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/machine.log" 2>&1; then
  cat "$OUT/machine.log"
  echo "no GPU: nvidia-smi failed; nothing was run"
  exit 2
fi
cat "$OUT/machine.log"

# 1. the kernels
if [[ $PARTS != *" kernels "* ]]; then
  echo "== FP8 kernels: not in PARTS"
elif [ -f bin/cuda.test ]; then
  chmod +x bin/cuda.test 2>/dev/null
  (cd tensor/cuda && step "FP8 kernel tests and GEMM times" 240 "$OUT/fp8_kernels.log" sh -c \
    '../../bin/cuda.test -test.v -test.run "QuantRowsE4M3|FP8" && ../../bin/cuda.test -test.run "^$" -test.bench "^BenchmarkGEMMFP8$" -test.benchtime 1x') ||
    status=1
  grep -E "^KEVBENCH gemm-fp8" "$OUT/fp8_kernels.log" | sed 's/^/   /'
else
  echo "== FP8 kernels: skipped, no bin/cuda.test"
fi

# 2. the goldens
if [[ $PARTS != *" goldens "* ]]; then
  echo "== FP8 goldens: not in PARTS"
elif [ -f bin/kev.test ]; then
  chmod +x bin/kev.test 2>/dev/null
  step "FP8 goldens" 120 "$OUT/fp8_goldens.log" bin/kev.test -test.v -test.run 'TestPredictorGoldenCUDAFP8|TestPredictorCUDAFP8Replicas' ||
    status=1
  grep -E "worst \|Δp\||^(--- |ok|FAIL|PASS)" "$OUT/fp8_goldens.log" | sed 's/^/   /'
else
  echo "== FP8 goldens: skipped, no bin/kev.test"
fi

# 3. serving, bf16 then fp8, on one checkpoint
[[ $PARTS == *" serving "* ]] && [ -f bin/kev ] && unpack_tokenizer "$TOKENIZER"
if [[ $PARTS != *" serving "* ]]; then
  echo "== serving: not in PARTS"
elif [ -f bin/kev ] && [ -f "$TOKENIZER" ]; then
  chmod +x bin/kev 2>/dev/null
  if [ ! -f "$KEV4B/.complete" ]; then
    rm -rf "$KEV4B"
    step make_kev4b 150 "$OUT/make_kev4b.log" python3 scripts/golden/make_kev4b.py "$KEV4B" --tokenizer "$TOKENIZER" &&
      touch "$KEV4B/.complete" || status=1
  fi
  if [ -f "$KEV4B/.complete" ]; then
    variants=${VARIANTS:-bfloat16 fp8}
    [ -n "$GRAPHS" ] && variants="bfloat16 bfloat16:graphs ${variants#bfloat16 }"
    nv=$(echo $variants | wc -w)
    fp8s= # the FP8 variants' short names and switches, for steps 4 and 5
    for v in $variants; do
      dt=${v%%:*}
      short=${dt/bfloat16/bf16}
      genv=KEV_CUDA_GRAPHS=off
      [ "$v" = "$dt" ] || for sw in $(tr : ' ' <<<"${v#*:}"); do # fp8:pipe:xc: the switches in any order
        short=${short}_$sw
        case $sw in
        graphs) genv=KEV_CUDA_GRAPHS=on ;;
        promo*) genv="$genv KEV_CUDA_FP8_PROMOTE=${sw#promo}" ;;
        wide*) genv="$genv KEV_CUDA_FP8_PROMOTE=all KEV_CUDA_FP8_WIDE=${sw#wide}" ;;
        pipe) genv="$genv KEV_CUDA_FP8_PIPE=on" ;;
        xc) genv="$genv KEV_CUDA_FP8_XC=on" ;;
        esac
      done
      [ "$dt" = fp8 ] && fp8s="$fp8s $short=${genv// /,}"
      lim=$(( ($(left) - 15 - RESERVE) / nv ))
      nv=$((nv - 1))
      # shellcheck disable=SC2086
      step "kev bench -dtype $dt ($genv)" "$lim" "$OUT/kev_bench_$short.log" env $genv \
        bin/kev bench -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda -dtype "$dt" -cases "$CASES" \
        -runs 20 -warmup 3 -clients 1,32,64 -duration 8s -budget "$((lim > 30 ? lim - 15 : 15))s" \
        -out "$OUT/kev_bench_$short.json" || status=1
      grep -E "^kev bench: " "$OUT/kev_bench_$short.log" | sed 's/^/   /'
    done
    if [ -n "$GRAPHS" ]; then
      echo "== graphs on against off (bf16): the same probabilities, bit for bit, and the replays"
      python3 - "$OUT/kev_bench_bf16.json" "$OUT/kev_bench_bf16_graphs.json" <<'PY' 2>&1 | tee "$OUT/graphs_compare.txt"
import json, sys
off, on = (json.load(open(f)) for f in sys.argv[1:3])
same = diff = 0
for case, v in off["probabilities"].items():
    w = on["probabilities"].get(case, {})
    for key in ("probabilities",):
        a, b = v.get(key), w.get(key)
        if a == b: same += 1
        else: diff += 1; print("   differs:", case)
    a, b = v.get("new_state_example", {}).get("probabilities"), w.get("new_state_example", {}).get("probabilities")
    if a == b: same += 1
    else: diff += 1; print("   differs (new state):", case)
print("   cases with equal probabilities: %d, differing: %d; graphs: %s" % (same, diff, on.get("graphs")))
for case in off["latency"]:
    a, b = off["latency"][case], on["latency"].get(case, {})
    print("   %-32s off %s / %s   on %s / %s" % (case, a.get("new_ms"), a.get("cached_ms"), b.get("new_ms"), b.get("cached_ms")))
for a, b in zip(off.get("concurrency") or [], on.get("concurrency") or []):
    print("   %d clients: off %.1f req/s (p50 %.1f, p99 %.1f)   on %.1f req/s (p50 %.1f, p99 %.1f)" % (
        a["clients"], a["rps"], a["p50_ms"], a["p99_ms"], b["rps"], b["p50_ms"], b["p99_ms"]))
sys.exit(1 if diff else 0)
PY
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    fi
    for f in $fp8s; do
      short=${f%%=*}
      sfx=${short#fp8}
      echo "== compare ($short)"
      timeout -k 2 20 python3 scripts/gpu/fp8_compare.py "$OUT/kev_bench_bf16.json" "$OUT/kev_bench_$short.json" \
        --json "$OUT/fp8_compare$sfx.json" 2>&1 | tee "$OUT/fp8_compare$sfx.txt"
      [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
    done
    # 5. many questions: FP8 against bf16 (near-ties by bf16's top two) on EVAL_N labelled requests (make_eval_set.py)
    if [ "$EVAL_N" -gt 0 ]; then
      python3 scripts/gpu/make_eval_set.py -n "$EVAL_N" >"$OUT/eval_set.jsonl"
      for f in $fp8s; do
        short=${f%%=*} fenv=${f#*=}
        sfx=${short#fp8}
        # shellcheck disable=SC2086
        step "kev eval -dtype bf16 -compare fp8 ($EVAL_N requests, ${fenv//,/ })" 120 "$OUT/fp8_eval$sfx.log" \
          env ${fenv//,/ } bin/kev eval -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda -dtype bfloat16 -compare fp8 \
          -concurrency 32 -svg none -json -o "$OUT/fp8_eval$sfx.json" "$OUT/eval_set.jsonl" || status=1
        python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["compare"]; print("   ", {k: c[k] for k in ("questions","max_delta","median_delta","argmax_agreement","clear_flips")})' \
          "$OUT/fp8_eval$sfx.json" 2>/dev/null
      done
      rm -f "$OUT/eval_set.jsonl"
    fi
    # 6. 64 clients with other pass budgets (-pass-tokens), both dtypes
    for pt in $PASS_TOKENS; do
      for dt in bfloat16 fp8; do
        short=${dt/bfloat16/bf16}
        step "kev bench -dtype $dt -pass-tokens $pt, 64 clients" 60 "$OUT/kev_bench_${short}_pt$pt.log" \
          bin/kev bench -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda -dtype "$dt" -cases "$CASES" \
          -case "6 questions, short state" -runs 3 -warmup 1 -clients 64 -duration 15s -pass-tokens "$pt" \
          -out "$OUT/kev_bench_${short}_pt$pt.json" || status=1
        python3 -c 'import json,sys; [print("   ", {k: c[k] for k in ("clients","rps","p50_ms","p99_ms","mean_batch")}) for c in json.load(open(sys.argv[1]))["concurrency"]]' \
          "$OUT/kev_bench_${short}_pt$pt.json" 2>/dev/null
      done
    done
  fi
else
  echo "== serving: skipped, no bin/kev or no $TOKENIZER"
fi
echo "== done in $SECONDS s, exit $status"
exit $status
