#!/usr/bin/env bash
# Where the host's time goes around the device's in Kev's serving cases (about a minute on the GPU machine):
# kev bench on the Kev-4B-shaped checkpoint with a Go CPU profile and an execution trace of the timed requests.
# Build on the Go machine as scripts/gpu/bench.sh says (bin/kev, .gold-in/tokenizer.json), run there:
#   OUT=dir bash scripts/gpu/hostprof.sh        (DTYPE=fp8: the FP8 weights; CLIENTS=64: a load run too)
# then read the files back here: go tool pprof -top bin/kev dir/cpu.pprof; go tool trace dir/exec.trace
# (blocked and running time of the device thread against the batcher's and the clients').
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
KEV4B=${KEV4B:-/tmp/kev4b}
mkdir -p "$OUT"
if [ ! -f "$KEV4B/.complete" ]; then
  timeout 150 python3 scripts/golden/make_kev4b.py "$KEV4B" --tokenizer .gold-in/tokenizer.json > "$OUT/make_kev4b.log" 2>&1 &&
    touch "$KEV4B/.complete"
fi
timeout 120 bin/kev bench -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -device cuda -dtype "${DTYPE:-bfloat16}" \
  -cases scripts/golden/bench-cases.json \
  -runs 20 -warmup 3 -clients "${CLIENTS:-}" -duration 5s -out "$OUT/kev_bench.json" \
  -cpuprofile "$OUT/cpu.pprof" -trace "$OUT/exec.trace" > "$OUT/kev_bench.log" 2>&1
echo "kev bench exit $?"
grep -E '^kev bench: ' "$OUT/kev_bench.log"
ls -la "$OUT"
