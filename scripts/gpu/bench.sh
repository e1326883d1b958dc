#!/usr/bin/env bash
# Our engine against PyTorch on Kev's serving cases, on one GPU, in one command.
#
# Build on the Go machine, from the repository root (CUDA 12.x headers and the libcuda stub):
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go build -tags cuda -o bin/kev ./examples/kev
# then, from the repository root on the GPU machine (no Go needed; bin/kev and .gold-in/tokenizer.json, the Qwen3
# tokenizer, must be there):
#   OUT=/some/dir bash scripts/gpu/bench.sh
#
# Steps, each with its own time limit taken from what is left of the whole run's (BENCH_TOTAL_S, default 530 s),
# so that the run ends within nine minutes even when a step fails; a failed step does not stop the next ones:
#   1. make_kev4b.py: the Kev-4B-shaped random checkpoint in $KEV4B (default /tmp/kev4b; skipped when a previous
#      run completed it)                                                    -> $OUT/make_kev4b.log
#   2. bin/kev bench -device cuda on it (its own -budget, so that it writes its report before the limit)
#                                                                           -> $OUT/kev_bench.json, kev_bench.log
#   3. torch_reference.py on the same checkpoint and cases (--budget-s 200 or what is left)
#                                                                           -> $OUT/torch_ref.json, torch_ref.log
#   4. compare.py: the side-by-side table                                  -> $OUT/compare.txt, compare.json
# Exit status: 0 when every step succeeded, 1 when one failed, 2 when there is no GPU or a required file is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$root/.out}
KEV4B=${KEV4B:-/tmp/kev4b}
# The checkpoint maker: make_kev4b.py (Qwen3.5, the default) or make_kev_qwen3.py (Kev-4B@qwen3, attention-only; use
# another KEV4B directory for it, e.g. KEV4B=/tmp/kevq3).
MAKE_SCRIPT=${MAKE_SCRIPT:-scripts/golden/make_kev4b.py}
TOTAL=${BENCH_TOTAL_S:-530}
CASES=scripts/golden/bench-cases.json
TOKENIZER=.gold-in/tokenizer.json
mkdir -p "$OUT"
cd "$root"
export PYTHONUNBUFFERED=1
status=0

# left: seconds of the whole run still to spend.
left() { echo $((TOTAL - SECONDS)); }
# limit CAP RESERVE: a step's time limit, at most CAP, leaving RESERVE seconds for the steps after it.
limit() {
  local l=$(($(left) - $2))
  [ "$l" -gt "$1" ] && l=$1
  echo "$l"
}
# step NAME LIMIT LOG CMD...: runs CMD under timeout (TERM at LIMIT, KILL 5 s later), output to LOG.
step() {
  local name=$1 lim=$2 log=$3
  shift 3
  if [ "$lim" -lt 10 ]; then
    echo "== $name: skipped, $(left) s left of the run"
    return 124
  fi
  echo "== $name (limit ${lim} s)"
  local t0=$SECONDS
  timeout -k 5 "$lim" "$@" >"$log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s; log $log"
  if [ $rc -ne 0 ]; then
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "   TIMED OUT"
    tail -25 "$log" | sed 's/^/   | /'
  fi
  return $rc
}

echo "== machine"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/machine.log" 2>&1; then
  cat "$OUT/machine.log"
  echo "no GPU: nvidia-smi failed; nothing was run"
  exit 2
fi
cat "$OUT/machine.log"
kev=$root/bin/kev
if [ ! -f "$kev" ]; then
  echo "no bin/kev: build it first (see the top of this script)"
  exit 2
fi
if [ ! -x "$kev" ]; then cp "$kev" /tmp/kev && chmod +x /tmp/kev && kev=/tmp/kev; fi
if [ ! -f "$TOKENIZER" ]; then
  echo "no $TOKENIZER: the Qwen3 tokenizer.json the checkpoint is built with"
  exit 2
fi
timeout 60 python3 -c 'import torch, transformers, peft, safetensors, tokenizers; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "gpu", torch.cuda.is_available())' \
  2>&1 | tail -1 | tee -a "$OUT/machine.log"

# 1. the checkpoint
if [ -f "$KEV4B/.complete" ]; then
  echo "== make_kev4b: $KEV4B is complete from an earlier run"
else
  rm -rf "$KEV4B"
  # after it: ours (at least 60 s), torch (at least 90 s), compare
  if step make_kev4b "$(limit 150 180)" "$OUT/make_kev4b.log" \
    python3 "$MAKE_SCRIPT" "$KEV4B" --tokenizer "$TOKENIZER"; then
    touch "$KEV4B/.complete"
  else
    status=1
  fi
  grep -E "^(NOTE|FAIL|ERROR)|shards|parameters|seconds" "$OUT/make_kev4b.log" | tail -5 | sed 's/^/   /'
fi

# 2. our engine: the budget ends 15 s before the limit, so that the report is written in time
if [ -f "$KEV4B/.complete" ]; then
  lim=$(limit 170 130)
  step "kev bench (ours)" "$lim" "$OUT/kev_bench.log" \
    "$kev" bench -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda -cases "$CASES" \
    -runs 20 -warmup 3 -clients 1,32,64 -duration 8s -budget "$((lim > 30 ? lim - 15 : 15))s" -out "$OUT/kev_bench.json" ||
    status=1
  grep -E "^kev bench: " "$OUT/kev_bench.log" | sed 's/^/   /'
else
  echo "== kev bench (ours): skipped, no checkpoint"
  status=1
fi

# 3. PyTorch: its own budget ends 20 s before the limit
if [ -f "$KEV4B/.complete" ]; then
  lim=$(limit 225 25)
  budget=$((lim - 25))
  [ $budget -gt 200 ] && budget=200
  step "torch reference" "$lim" "$OUT/torch_ref.log" \
    python3 scripts/golden/torch_reference.py "$KEV4B" --cases "$CASES" --out "$OUT/torch_ref.json" --budget-s "$budget" ||
    status=1
else
  echo "== torch reference: skipped, no checkpoint"
fi

# 4. side by side
echo "== compare ($(left) s of the run left)"
timeout -k 2 20 python3 scripts/gpu/compare.py --ours "$OUT/kev_bench.json" --torch "$OUT/torch_ref.json" \
  --json "$OUT/compare.json" 2>&1 | tee "$OUT/compare.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== done in $SECONDS s, exit $status"
exit $status
