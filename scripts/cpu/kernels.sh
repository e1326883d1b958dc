#!/usr/bin/env bash
# The CPU kernels beside PyTorch's on the host: the multiply-add ceiling at each thread count, the GEMMs at 1, 4 and
# 16 threads (ours with jobs claimed as threads come free, and with one contiguous run a thread; PyTorch's at the same
# shapes), the long-state operations, and whole 24-layer Kev-0.8B-shaped passes with each operation's share.
#
# Build on the Go machine, from the repository root:
#   go test -c -ldflags='-s -w' -o bin/cpu.test ./tensor/cpu && go test -c -ldflags='-s -w' -o bin/layers.test ./layers
# then on the GPU machine, from the repository root, with bin/ carried:
#   OUT=dir bash scripts/cpu/kernels.sh
# Environment: OUT (default .out), THREADS (the thread counts, default "1 4 16"), BENCHTIME (-test.benchtime of the
# GEMMs, default 10x), PASS (1: the whole-pass breakdown, default 1).
# Files in $OUT: kernels.log (everything), torch_gemm.jsonl, pass4.prof (the 4-thread 2-question pass: go tool pprof
# bin/layers.test pass4.prof).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
THREADS=${THREADS:-1 4 16}
BENCHTIME=${BENCHTIME:-10x}
PASS=${PASS:-1}
mkdir -p "$OUT"
log=$OUT/kernels.log
status=0
cpus() { echo "0-$(($1 - 1))"; }
{
  echo "== $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo)"
  for t in $THREADS; do
    echo "== FMA ceiling, $t threads"
    KEV_GEMM_THREADS=$t taskset -c "$(cpus "$t")" bin/cpu.test -test.run '^$' -test.bench 'BenchmarkFMAPeak' \
      -test.benchtime 20x || status=1
  done
  for t in $THREADS; do
    echo "== GEMM fp32, $t threads, jobs claimed"
    GOMAXPROCS=$t KEV_GEMM_THREADS=$t taskset -c "$(cpus "$t")" bin/cpu.test -test.run '^$' \
      -test.bench 'BenchmarkGEMM$/.*/M(40|58|240|2392)$' -test.benchtime "$BENCHTIME" || status=1
  done
  echo "== GEMM fp32, 16 threads, one contiguous run a thread"
  KEV_GEMM_SCHED=static KEV_GEMM_THREADS=16 bin/cpu.test -test.run '^$' -test.bench 'BenchmarkGEMM$/.*/M(240|2392)$' \
    -test.benchtime "$BENCHTIME" || status=1
  echo "== PyTorch GEMMs"
  for t in $THREADS; do
    taskset -c "$(cpus "$t")" python3 scripts/cpu/torch_gemm.py --threads "$t" --dtypes fp32 || status=1
  done | tee "$OUT/torch_gemm.jsonl"
  python3 scripts/cpu/torch_gemm.py --threads 16 --dtypes bf16 | tee -a "$OUT/torch_gemm.jsonl" || status=1
  echo "== bf16 GEMM, 16 threads"
  KEV_GEMM_THREADS=16 bin/cpu.test -test.run '^$' -test.bench 'BenchmarkGEMMBF16' -test.benchtime "$BENCHTIME" || status=1
  echo "== long-state operations, 16 threads"
  bin/cpu.test -test.run '^$' -test.bench 'Attention|DeltaRule|Conv2200' -test.benchtime 5x || status=1
  if [ "$PASS" = 1 ]; then
    for dt in fp32 bf16; do
      echo "== one 24-layer pass, $dt weights, 16 threads"
      KEV_PASS_DTYPE=$dt bin/layers.test -test.run '^$' -test.bench 'BenchmarkPass08B/(new2200|short280)' \
        -test.benchtime 3x || status=1
    done
    echo "== the 2-question cached ticket (58 rows), fp32 weights, 4 threads; CPU profile in pass4.prof"
    KEV_PASS_DTYPE=fp32 GOMAXPROCS=4 taskset -c "$(cpus 4)" bin/layers.test -test.run '^$' \
      -test.bench 'BenchmarkPass08B/cached58' -test.benchtime 10x -test.cpu 4 -test.cpuprofile "$OUT/pass4.prof" || status=1
  fi
} 2>&1 | tee "$log"
exit $status
