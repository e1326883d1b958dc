#!/usr/bin/env bash
# The Kev-27B v2 shape (Qwen3.8-27B: 64 layers, 48 Gated DeltaNet + 16 gated attention, hidden 5120, 51 GB of bf16)
# on one GPU in one command, most valuable first, every step with a time limit:
#   1. the warm-up test on the GPU (Load's warm-up leaves Stats and the cache untouched, answers bit-identical);
#   2. the full 27B: written once (make_kev4b.py --shapes 27b, values of every 16th tensor read back), loaded by
#      `kev bench` (load seconds, host RssAnon after the load and its peak, device memory, Kev's four cases new /
#      cached, the first request of each case against its median), then deleted;
#   3. the 27B cut to its first 8 layers (same widths): kev bench and PyTorch bf16 on the same files (max |dp|,
#      argmax flips; scripts/golden/torch_reference.py);
#   4. the 9B shape's load, measured again, then the 4B's first request, if time is left;
#   5. the table (family_table.py).
#
# Build on the Go machine (CUDA headers and the libcuda stub, see the README):
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go build -tags cuda -o bin/kev ./examples/kev
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/kev.test .
#   go run ./scripts/corpus -unpack .gold-in        # the Qwen3 tokenizer.json
# then on the GPU machine, from the repository root: OUT=dir bash scripts/gpu/family_27b.sh
# BIN (default bin), TOKENIZER (default .gold-in/tokenizer.json), FAMILY_TOTAL_S (default 318) override the
# defaults; DTYPE=fp8 serves the checkpoints in FP8 (Hopper; device memory and Kev's cases of the 27B in FP8). The checkpoints go where 56 GB are free: ROOT if set, else /dev/shm/family, else a tmpfs mounted for the
# run, else /tmp/family; without any, the full 27B is skipped.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$repo/.out}
BIN=${BIN:-$repo/bin}
PY=$repo/scripts
TOKENIZER=${TOKENIZER:-$repo/.gold-in/tokenizer.json}
TOTAL=${FAMILY_TOTAL_S:-318}
CASES=$repo/scripts/golden/bench-cases.json
TOKCFG=$repo/tokenizer/testdata/qwen3-tokenizer_config.json
mkdir -p "$OUT"
cd "$repo"
export PYTHONUNBUFFERED=1
. "$repo/scripts/gpu/steps.sh" # left, step
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.log"
free -g | tee -a "$OUT/machine.log"
avail() { df -B1 --output=avail "$1" 2>/dev/null | tail -1 | tr -d ' '; }
# Memory first (no disk write-back to wait for, and the 64 GB disk stays free), then the disk.
fits() { local a; mkdir -p "$1" && a=$(avail "$1") && echo "$1: ${a:-?} bytes free" | tee -a "$OUT/machine.log" &&
  [ -n "$a" ] && [ "$a" -ge 56000000000 ]; }
if [ -z "${ROOT:-}" ]; then
  if fits /dev/shm/family; then
    ROOT=/dev/shm/family
  elif mkdir -p /tmp/familyram && mount -t tmpfs -o size=58g tmpfs /tmp/familyram 2>/dev/null && fits /tmp/familyram; then
    ROOT=/tmp/familyram # a memory file system of our own
  elif fits /tmp/family; then
    ROOT=/tmp/family
  fi
fi
ROOT=${ROOT:-}
for f in kev kev.test; do
  [ -x "$BIN/$f" ] || { cp "$BIN/$f" /tmp/$f && chmod +x /tmp/$f; }
done
bin() { if [ -x "$BIN/$1" ]; then echo "$BIN/$1"; else echo "/tmp/$1"; fi; }

step "warm-up and golden predictor on CUDA" 35 "$OUT/cuda_tests.log" \
  "$(bin kev.test)" -test.run 'TestWarmUpCUDA|TestPredictorGoldenCUDA' -test.v
grep -E "^(--- |ok|FAIL|PASS)" "$OUT/cuda_tests.log" | head -16 | sed 's/^/   /'

mk() { # mk LABEL DIR CAP ARGS...: one checkpoint into DIR/<shape>
  local label=$1 dir=$2 cap=$3
  shift 3
  step "make $label" "$cap" "$OUT/make_$label.log" env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "$PY/golden/make_kev4b.py" "$dir" --tokenizer "$TOKENIZER" \
    --tokenizer-config "$TOKCFG" "$@"
  grep -E "GB in|saved base|verified|FAIL" "$OUT/make_$label.log" | sed 's/^/   /'
}
bench() { # bench LABEL DIR CAP RUNS
  local label=$1 dir=$2 cap=$3
  [ -f "$dir/.complete" ] || { echo "== kev bench $label: no checkpoint"; return 1; }
  step "kev bench $label" "$cap" "$OUT/kev_bench_$label.log" "$(bin kev)" bench -checkpoint "$dir/kev" \
    -base "$dir/base" -device cuda -dtype "${DTYPE:-bfloat16}" -cases "$CASES" -runs "$4" -warmup 1 -clients "" \
    -budget "$(($3 - 8))s" -out "$OUT/kev_bench_$label.json"
  grep -E "^kev bench: loaded|kev: loaded" "$OUT/kev_bench_$label.log" | sed 's/^/   /'
}
torchref() { # torchref LABEL DIR CAP
  local label=$1 dir=$2
  [ -f "$dir/.complete" ] || return 1
  step "torch reference $label" "$3" "$OUT/torch_ref_$label.log" python3 "$PY/golden/torch_reference.py" "$dir" \
    --cases "$CASES" --out "$OUT/torch_ref_$label.json" --reps 3 --warmup 1 --budget-s "$(($3 - 20))"
  timeout 20 python3 "$PY/gpu/compare.py" --ours "$OUT/kev_bench_$label.json" --torch "$OUT/torch_ref_$label.json" \
    --json "$OUT/compare_$label.json" >"$OUT/compare_$label.txt" 2>&1
  tail -12 "$OUT/compare_$label.txt" | sed 's/^/   /'
}

if [ -n "$ROOT" ]; then
  echo "== checkpoints in $ROOT"
  mk 27b "$ROOT" 150 --shapes 27b --verify-every 16
  du -sb "$ROOT/27b" 2>/dev/null | sed 's/^/   bytes: /'
  bench 27b "$ROOT/27b" 60 10
  rm -rf "$ROOT/27b"
else
  echo "== full 27B skipped: no place with 56 GB free"
  ROOT=/tmp/family
fi
mk 27b-8l "$ROOT/l8" 45 --shapes 27b --layers 8
bench 27b-8l "$ROOT/l8/27b" 25 5
torchref 27b-8l "$ROOT/l8/27b" 60
rm -rf "$ROOT/l8"
mk 9b "$ROOT" 40 --shapes 9b --verify-every 4
bench 9b "$ROOT/9b" 30 3
rm -rf "$ROOT/9b"
mk 4b "$ROOT" 25 --shapes 4b --verify-every 4
bench 4b "$ROOT/4b" 20 5
rm -rf "$ROOT/4b"
timeout 20 python3 "$PY/gpu/family_table.py" "$OUT" | tee "$OUT/family.txt"
mountpoint -q /tmp/familyram && umount /tmp/familyram
echo "== done in $SECONDS s"
