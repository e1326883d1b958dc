#!/usr/bin/env bash
# Runs the CUDA test binaries on the GPU machine and summarises them.
#
# Build them first on a Go machine (CUDA 12.x headers and the libcuda stub; see tools in the GPU notes):
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/cuda.test  ./tensor/cuda
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go test -c -tags cuda -o bin/cudrv.test ./internal/cudrv
# then, from the repository root on the GPU machine (no Go needed):
#   OUT=/some/dir bash scripts/gpu/run_kernels.sh
#
# Steps, each with its own time limit so that the whole run stays under six minutes:
#   1. every bin/NAME.test: the tests (-test.v)                           -> $OUT/NAME.log
#   2. every bin/NAME.test: the benchmarks (-test.benchtime 1x; each benchmark takes its own median; for cuda
#      BenchmarkPass splits a Kev-4B pass's wall, issue and device time and writes CPU profiles of its 6-row
#      case)                                                              -> $OUT/NAME.bench.log, $OUT/pass-rows6-{hop,run}.prof
#   3. compute-sanitizer memcheck on the tests (for cuda a subset: the backend conformance suite, the bf16
#      paths, the small model and the kernel tests)                       -> $OUT/NAME.memcheck.log
#   4. with KEV_TORCH=1 and torch present: the GEMM shapes through torch (cuBLAS) -> $OUT/torch_gemm.log
# A short table comes last. Exit status: non-zero if any test binary or memcheck run failed.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$root/.out}
mkdir -p "$OUT"
cd "$root"
status=0

echo "== machine"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1 || echo "nvidia-smi failed"
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version 2>&1 | tail -1
  echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
} | tee "$OUT/machine.log"

# Package directory of each binary: tests read files relative to it.
pkgdir() {
  case "$1" in
    cuda) echo tensor/cuda ;;
    cudrv) echo internal/cudrv ;;
    *) echo . ;;
  esac
}

declare -A result
shopt -s nullglob
bins=(bin/*.test)
if [ ${#bins[@]} -eq 0 ]; then echo "no bin/*.test: build them first (see the top of this script)"; exit 2; fi
memcheck_run() {
  case "$1" in
    cuda) echo 'TestConformance|TestBF16Ops|TestModelMatchesCPU|TestRun$|TestRunExclusive|TestGEMM$|TestRMSNorm|TestEmbedding|TestSwiGLU|TestSigmoidGate|TestGEMMArgErrors|TestDeltaRuleFast|TestFlashAttention|TestSegmentsFast|TestForwardBatchedMatchesCPU' ;;
    *) echo . ;;
  esac
}
for b in "${bins[@]}"; do
  name=$(basename "$b" .test)
  exe="$root/$b"
  if [ ! -x "$exe" ]; then cp "$exe" "/tmp/$name.test" && chmod +x "/tmp/$name.test" && exe="/tmp/$name.test"; fi
  dir=$(pkgdir "$name")
  echo "== $name: tests (in $dir)"
  (cd "$dir" && timeout 130 "$exe" -test.v -test.run . -test.bench '^$' -test.timeout 120s) > "$OUT/$name.log" 2>&1
  rc=$?
  grep -E "^(device:|--- FAIL|FAIL|ok|PASS)|relative error|: pool" "$OUT/$name.log" | head -60
  result[$name]="rc=$rc pass=$(grep -c -- '--- PASS' "$OUT/$name.log") fail=$(grep -c -- '--- FAIL' "$OUT/$name.log")"
  [ $rc -eq 0 ] || { status=1; echo "-- $name tests exited $rc; last lines:"; tail -30 "$OUT/$name.log"; }
done
for b in "${bins[@]}"; do
  name=$(basename "$b" .test)
  exe="$root/$b"; [ -x "$exe" ] || exe="/tmp/$name.test"
  dir=$(pkgdir "$name")
  echo "== $name: benchmarks"
  (cd "$dir" && KEV_PASS_PROFILE="$OUT" timeout 130 "$exe" -test.run '^$' -test.bench . -test.benchtime 1x -test.timeout 120s) > "$OUT/$name.bench.log" 2>&1
  brc=$?
  result[$name]+=" bench_rc=$brc"
  [ $brc -eq 0 ] || { echo "-- $name benchmarks exited $brc; last lines:"; tail -20 "$OUT/$name.bench.log"; }
done
for b in "${bins[@]}"; do
  name=$(basename "$b" .test)
  exe="$root/$b"; [ -x "$exe" ] || exe="/tmp/$name.test"
  dir=$(pkgdir "$name")
  if command -v compute-sanitizer >/dev/null; then
    echo "== $name: compute-sanitizer memcheck ($(memcheck_run "$name"))"
    (cd "$dir" && timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 "$exe" -test.run "$(memcheck_run "$name")" -test.bench '^$' -test.timeout 90s) > "$OUT/$name.memcheck.log" 2>&1
    mrc=$?
    grep -E "^(--- FAIL|FAIL|ok|PASS)" "$OUT/$name.memcheck.log" | head -10
    tail -3 "$OUT/$name.memcheck.log"
    result[$name]+=" memcheck_rc=$mrc"
    [ $mrc -eq 0 ] || status=1
  else
    result[$name]+=" memcheck=unavailable"
  fi
done

if [ "${KEV_TORCH:-0}" = 1 ] && command -v python3 >/dev/null && python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "== torch (cuBLAS) on the same GEMM shapes"
  PYTHONUNBUFFERED=1 timeout 120 python3 - > "$OUT/torch_gemm.log" 2>&1 <<'PY'
import torch
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
dev = "cuda"
for M in (1, 16, 64, 256, 1024, 2048):
    for N, K in ((12352, 2560), (10240, 2560), (18432, 2560), (2560, 9216), (2560, 4096)):
        xb, wb = 2 * M * K, 2 * N * K
        sets = max(2, min(16, -(-(256 << 20) // (xb + wb))))
        xs = [torch.empty(M, K, device=dev, dtype=torch.bfloat16).uniform_(-1, 1) for _ in range(sets)]
        ws = [torch.empty(N, K, device=dev, dtype=torch.bfloat16).uniform_(-0.02, 0.02) for _ in range(sets)]
        y = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
        for i in range(3):
            torch.matmul(xs[i % sets], ws[i % sets].t(), out=y)
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(26)]
        for i in range(25):
            ev[i].record()
            torch.matmul(xs[i % sets], ws[i % sets].t(), out=y)
        ev[25].record()
        torch.cuda.synchronize()
        t = sorted(ev[i].elapsed_time(ev[i + 1]) / 1e3 for i in range(25))[12]
        print(f"KEVBENCH torch M={M} N={N} K={K} us={t*1e6:.2f} GB/s={(xb+wb+2*M*N)/t/1e9:.0f} TFLOP/s={2*M*N*K/t/1e12:.1f}")
        del xs, ws, y
PY
  [ $? -eq 0 ] || echo "torch comparison failed: see $OUT/torch_gemm.log"
fi

echo
echo "== summary"
for k in "${!result[@]}"; do printf '%-8s %s\n' "$k" "${result[$k]}"; done
cat "$OUT"/*.log 2>/dev/null | grep -h "^KEVBENCH" | grep -v " torch " | grep -v " gemm " | sed 's/^KEVBENCH //'
printf '\n%-6s %-6s %-5s | %-9s %-6s %-9s %-7s | %-9s %-7s\n' M N K "kev us" "GB/s" "TFLOP/s" "config" "torch us" "TFLOP/s"
grep -h "^KEVBENCH gemm " "$OUT"/cuda.bench.log 2>/dev/null | while read -r _ _ m n k tile splits us gbs tfs; do
  key="$m $n $k"
  tl=$(grep -h "^KEVBENCH torch $key " "$OUT/torch_gemm.log" 2>/dev/null | head -1)
  tus=$(echo "$tl" | sed -n 's/.* us=\([^ ]*\).*/\1/p'); ttf=$(echo "$tl" | sed -n 's/.*TFLOP\/s=\([^ ]*\).*/\1/p')
  printf '%-6s %-6s %-5s | %-9s %-6s %-9s %-7s | %-9s %-7s\n' "${m#M=}" "${n#N=}" "${k#K=}" "${us#us=}" "${gbs#GB/s=}" \
    "${tfs#TFLOP/s=}" "${tile#tile=}/${splits#splits=}" "${tus:--}" "${ttf:--}"
done
exit $status
