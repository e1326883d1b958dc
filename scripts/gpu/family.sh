#!/usr/bin/env bash
# Kev's family on one GPU in one command: random checkpoints of the Qwen3.5-0.8B, -4B and -9B shapes (and, with
# FAMILY_27B=1, a layer-truncated Qwen3.8-27B), each loaded by `kev bench` (load seconds, host memory, device memory,
# first and steady model times of Kev's four serving cases, new and cached; a 16k-token state on the 4B), PyTorch's
# serving reference on the same files for parity (0.8B and 9B; scripts/golden/torch_reference.py), and one table.
#
# Build on the Go machine (CUDA headers and the libcuda stub, see the README):
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go build -tags cuda -o bin/kev ./examples/kev
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/cuda.test ./tensor/cuda
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/kev.test .
#   go run ./scripts/corpus -unpack .gold-in        # the Qwen3 tokenizer.json
# then on the GPU machine, from the repository root: OUT=dir bash scripts/gpu/family.sh
# BIN (default bin), PY (default scripts), TOKENIZER (default .gold-in/tokenizer.json), ROOT (default /tmp/family),
# FAMILY_TOTAL_S (default 280) override the defaults, and TESTROOT (default the repository) is where the test
# binaries run (they read testdata/golden there). Every step has a time limit taken from what is left.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$repo/.out}
BIN=${BIN:-$repo/bin}
PY=${PY:-$repo/scripts}
TOKENIZER=${TOKENIZER:-$repo/.gold-in/tokenizer.json}
ROOT=${ROOT:-/tmp/family}
TESTROOT=${TESTROOT:-$repo}
TOTAL=${FAMILY_TOTAL_S:-280}
CASES=$repo/scripts/golden/bench-cases.json
TOKCFG=$repo/tokenizer/testdata/qwen3-tokenizer_config.json
mkdir -p "$OUT" "$ROOT"
cd "$repo"
export PYTHONUNBUFFERED=1
. "$repo/scripts/gpu/steps.sh" # left, step
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/machine.log"
for f in kev cuda.test kev.test; do [ -x "$BIN/$f" ] || { cp "$BIN/$f" /tmp/$f && chmod +x /tmp/$f; }; done
bin() { if [ -x "$BIN/$1" ]; then echo "$BIN/$1"; else echo "/tmp/$1"; fi; }

# 16k-token state: the 2,200-token case's text seven times, same questions.
python3 - "$CASES" "$ROOT/cases16k.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
c = d["cases"]["5 questions, 2,200-token state"]
d["cases"]["5 questions, 16k-token state"] = {"state": "\n\n".join([c["state"]] * 7), "questions": c["questions"]}
json.dump(d, open(sys.argv[2], "w"))
PY

step "cuda tests (modules at open, ring uploads, fp16 refused)" 40 "$OUT/cuda_tests.log" \
  "$(bin cuda.test)" -test.run 'ModulesLoadedAtOpen|UploadLarge|FromHostF16Refused|PTXFresh|CubinFresh' -test.v
grep -E "^(--- |ok|FAIL|PASS)|modules:" "$OUT/cuda_tests.log" | head -12 | sed 's/^/   /'
kevtest=$(bin kev.test)
step "golden predictor on CUDA (streamed load)" 60 "$OUT/golden_cuda.log" \
  bash -c "cd '$TESTROOT' && '$kevtest' -test.run 'PredictorGoldenCUDA' -test.v"
grep -E "^(--- |ok|FAIL|PASS)" "$OUT/golden_cuda.log" | head -6 | sed 's/^/   /'

shapes=0.8b,4b,9b
step "make checkpoints ($shapes)" 120 "$OUT/make.log" \
  python3 "$PY/golden/make_kev4b.py" "$ROOT" --shapes "$shapes" --tokenizer "$TOKENIZER" --tokenizer-config "$TOKCFG"
grep -E "GB in|FAIL" "$OUT/make.log" | sed 's/^/   /'

bench() { # bench SHAPE CASES CAP
  local dir=$ROOT/$1
  [ -f "$dir/.complete" ] || { echo "== kev bench $1: no checkpoint"; return 1; }
  step "kev bench $1" "$3" "$OUT/kev_bench_$1.log" "$(bin kev)" bench -checkpoint "$dir/kev" -base "$dir/base" \
    -device cuda -cases "$2" -runs 10 -warmup 2 -clients "" -budget "$(($3 - 5))s" -out "$OUT/kev_bench_$1.json"
  grep -E "^kev bench: loaded|kev: loaded" "$OUT/kev_bench_$1.log" | sed 's/^/   /'
}
torchref() { # torchref SHAPE CAP
  local dir=$ROOT/$1
  [ -f "$dir/.complete" ] || return 1
  step "torch reference $1" "$2" "$OUT/torch_ref_$1.log" python3 "$PY/golden/torch_reference.py" "$dir" \
    --cases "$CASES" --out "$OUT/torch_ref_$1.json" --reps 5 --warmup 1 --budget-s "$(($2 - 15))"
  timeout 20 python3 "$PY/gpu/compare.py" --ours "$OUT/kev_bench_$1.json" --torch "$OUT/torch_ref_$1.json" \
    --json "$OUT/compare_$1.json" >"$OUT/compare_$1.txt" 2>&1
}
bench 4b "$ROOT/cases16k.json" 45
bench 0.8b "$CASES" 25
torchref 0.8b 45
bench 9b "$CASES" 40
torchref 9b 80
if [ "${FAMILY_27B:-0}" = 1 ]; then
  rm -rf "$ROOT/0.8b" "$ROOT/4b" "$ROOT/9b"
  step "make 27b (8 layers)" 90 "$OUT/make27.log" python3 "$PY/golden/make_kev4b.py" "$ROOT" --shapes 27b --layers 8 \
    --tokenizer "$TOKENIZER" --tokenizer-config "$TOKCFG"
  bench 27b "$CASES" 30
  torchref 27b 60
fi
timeout 20 python3 "$PY/gpu/family_table.py" "$OUT" | tee "$OUT/family.txt"
echo "== done in $SECONDS s"
