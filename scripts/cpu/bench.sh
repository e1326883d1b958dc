#!/usr/bin/env bash
# kev against PyTorch on the host CPU: Kev's four serving cases on the Kev-0.8B-shaped random checkpoint, at 16 and
# 4 threads, fp32 and bf16. scripts/cpu/README.md says what it measures and what each file holds.
#
# Build on the Go machine, from the repository root (pure Go, no cuda tag):
#   go build -ldflags='-s -w' -o bin/kev ./examples/kev && go test -c -ldflags='-s -w' -o bin/cpu.test ./tensor/cpu
#   mkdir -p .gold-in && zstd -dc tokenizer/testdata/qwen3-tokenizer.json.zst > .gold-in/tokenizer.json
# then on the GPU machine (its host CPU; the GPU only makes the checkpoint), from the repository root, with bin/ and
# .gold-in/ carried, one command each, on one machine kept warm between them (the parts' results meet in $RES):
#   PART=16     OUT=dir bash scripts/cpu/bench.sh   the checkpoint (once, ~10 s), the machine log, the tensor/cpu
#                                                   tests, then 16 threads: torch and kev, fp32 then bf16
#   PART=4-fp32 OUT=dir bash scripts/cpu/bench.sh   4 threads, fp32 (PyTorch fp32 alone: ~20 s a 2,200-token request)
#   PART=4-bf16 OUT=dir bash scripts/cpu/bench.sh   4 threads, bf16 (PART=4 runs both, once kev is fast enough)
# Each part ends within BENCH_TOTAL_S (540 s) with the merge of every result so far: compare.json and compare.md.
#
# PART (default 16): 16 | 4 | 16-fp32 | 16-bf16 | 4-fp32 | 4-bf16 | prep (checkpoint, machine log, tests) | tests | merge
#   (merge only) | all (everything, for a machine without the ten-minute limit), several separated by spaces, or job
#   names ENGINE-DTYPE-THREADS ("torch-fp32-4 kev-fp32-4"). A job runs one engine (kev: kev bench; torch:
#   torch_reference.py) at one dtype on THREADS cores (taskset -c 0-(THREADS-1); GOMAXPROCS, or torch's intra- and
#   inter-op threads, = THREADS) over the four cases in the file's order (the 2,200-token one last), and leaves
#   ENGINE-DTYPE-THREADS.json.
# Environment: OUT (default .out), RES (results kept across parts, default /tmp/kev-cpubench), KEV08B (checkpoint
#   root, default /tmp/kev08b; the checkpoint is $KEV08B/0.8b), BENCH_TOTAL_S (the part's budget: 540 s; 3000 for
#   all), RUNS (5), WARMUP (1), TESTS (1: the tensor/cpu tests run in this part; default 1 where PART has 16, prep,
#   tests or all), TESTS_S (their limit, 120 s: a third for the kernel tests, the rest for -test.short), MERGE_DIRS
#   (more result folders to merge, e.g. earlier parts' $OUT), DRY=1 (print the commands and their limits, run
#   nothing); for scripts/cpu/test_bench.sh: CASES (the cases file), TORCH_REF (the reference script).
# Each job's limit is an equal share of what is left of the part, so a job that ends early leaves its time to the
# next ones (torch runs first, kev last). kev bench gets -budget and torch_reference.py --budget-s inside it: both
# shrink their runs and write their files before the limit; a job cut anyway leaves what it wrote (torch: every
# case it finished, and the first request of the one it was in; kev: its report, marked interrupted, on SIGTERM).
# torch_reference.py checks its serving form against full rows on states of at most 512 tokens at 16 threads and
# more, 128 below (the two short cases), to spend the 4-thread parts' time on the timed runs.
# Exit status: 0 when every step succeeded, 1 when one failed, 2 when a required file is missing.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/.out}
RES=${RES:-/tmp/kev-cpubench}
KEV08B=${KEV08B:-/tmp/kev08b}
CK=$KEV08B/0.8b
PART=${PART:-16}
TOTAL=${BENCH_TOTAL_S:-$(case " $PART " in *" all "*) echo 3000 ;; *) echo 540 ;; esac)}
RUNS=${RUNS:-5}
WARMUP=${WARMUP:-1}
TESTS_S=${TESTS_S:-120}
DRY=${DRY:-}
CASES=${CASES:-scripts/golden/bench-cases.json}
TORCH_REF=${TORCH_REF:-scripts/golden/torch_reference.py}
TOKENIZER=.gold-in/tokenizer.json
export PYTHONUNBUFFERED=1
status=0

# jobs: the job names a PART stands for, in the order they run (fp32 first: the parity baseline).
jobs() {
  case $1 in
  all) echo "$(jobs 16) $(jobs 4)" ;;
  prep) ;;
  16 | 4) echo "$(jobs "$1-fp32") $(jobs "$1-bf16")" ;;
  16-fp32 | 16-bf16 | 4-fp32 | 4-bf16) echo "torch-${1#*-}-${1%-*} kev-${1#*-}-${1%-*}" ;;
  tests | merge) ;;
  *) echo "$1" ;;
  esac
}

JOBS=""
for p in $PART; do JOBS="$JOBS $(jobs "$p")"; done
JOBS=$(echo $JOBS)
for j in $JOBS; do
  if ! [[ $j =~ ^(kev|torch)-(fp32|bf16)-[1-9][0-9]*$ ]]; then
    echo "PART=$PART: $j is neither a part (prep, 16, 4, 16-fp32, 16-bf16, 4-fp32, 4-bf16, tests, merge, all) nor a job (kev|torch-fp32|bf16-THREADS)"
    exit 2
  fi
done
PREP=$(case " $PART " in *" prep "* | *" 16 "* | *" all "*) echo 1 ;; *) echo 0 ;; esac)
TESTS=${TESTS:-$(case " $PART " in *" tests "*) echo 1 ;; *) echo $PREP ;; esac)}
MAKE_CK=$PREP
[ -n "$JOBS" ] && MAKE_CK=1

dry_spent=0 # DRY: the limits printed so far, as if every step ran to its limit
left() { echo $((TOTAL - SECONDS - dry_spent)); }
# run_step NAME LIMIT LOG CMD...: CMD under timeout (TERM at LIMIT, KILL 20 s later), output to LOG; DRY prints it.
run_step() {
  local name=$1 lim=$2 log=$3
  shift 3
  if [ -n "$DRY" ]; then
    printf '== %s (limit %s s) > %s\n  ' "$name" "$lim" "$log"
    printf '%q ' "$@"
    echo
    dry_spent=$((dry_spent + lim))
    return 0
  fi
  if [ "$lim" -lt 15 ]; then
    echo "== $name: skipped, $(left) s left of the part"
    return 124
  fi
  echo "== $name (limit ${lim} s, $(left) s left of the part)"
  local t0=$SECONDS
  timeout -k 20 "$lim" "$@" >"$log" 2>&1
  local rc=$?
  echo "   exit $rc after $((SECONDS - t0)) s; log $log"
  if [ $rc -ne 0 ]; then
    { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && echo "   TIMED OUT"
    tail -15 "$log" | sed 's/^/   | /'
  fi
  return $rc
}

mkdir -p "$OUT" "$RES/logs" "$KEV08B"
OUT=$(cd "$OUT" && pwd) RES=$(cd "$RES" && pwd) KEV08B=$(cd "$KEV08B" && pwd)
LOGS=$RES/logs # outside $OUT until the end, where they become one file: $OUT/logs.tgz
partname=$(echo $PART | tr ' ' _)
CK=$KEV08B/0.8b
echo "== part $PART: jobs ${JOBS:-none}; tests $TESTS; results in $OUT (kept across parts in $RES)"

# ---- the machine
if [ -z "$DRY" ]; then
  {
    date -u
    echo "part $PART, jobs: $JOBS"
    lscpu
    echo
    lscpu -e 2>/dev/null
    echo
    grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512[a-z0-9_]*|amx[a-z0-9_]*)$' | tr '\n' ' '
    echo
    free -g
    nproc
    env | grep -E '^(KEV_|GOMAXPROCS|GODEBUG|OMP_|MKL_|ONEDNN_|DNNL_)' || true
    [ "$PREP" = 1 ] && timeout 60 python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__, "threads", torch.get_num_threads(), "capability", torch.backends.cpu.get_cpu_capability()); print(torch.__config__.show())' 2>&1 | tail -30
  } >"$LOGS/machine-$partname.log" 2>&1
  grep -E '^(Model name|CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|NUMA node\(s\)):' "$LOGS/machine-$partname.log" | sed 's/^/   /'
  grep -E '^(avx|fma|amx)' "$LOGS/machine-$partname.log" | sed 's/^/   flags: /'
fi
ncpu=$(nproc 2>/dev/null || echo 1)

# ---- binaries and inputs
kev=$root/bin/kev
cputest=$root/bin/cpu.test
need_kev=0
for j in $JOBS; do [[ $j == kev-* ]] && need_kev=1; done
if [ -z "$DRY" ]; then
  for b in kev cputest; do
    f=${!b}
    if [ -f "$f" ] && [ ! -x "$f" ]; then cp "$f" "/tmp/$(basename "$f")" && chmod +x "/tmp/$(basename "$f")" && printf -v "$b" %s "/tmp/$(basename "$f")"; fi
  done
  if [ $need_kev = 1 ] && [ ! -f "$kev" ]; then
    echo "no bin/kev: build it first (see the top of this script)"
    exit 2
  fi
fi

# ---- 1. the checkpoint (once)
if [ "$MAKE_CK" = 1 ]; then
  if [ -f "$CK/.complete" ]; then
    echo "== checkpoint: $CK is complete from an earlier run"
  elif [ -n "$DRY" ]; then
    run_step make_kev4b 120 "$LOGS/make_kev08b.log" python3 scripts/golden/make_kev4b.py "$KEV08B" --shapes 0.8b --tokenizer "$TOKENIZER"
  else
    if [ ! -f "$TOKENIZER" ]; then
      mkdir -p .gold-in
      zstd -dc tokenizer/testdata/qwen3-tokenizer.json.zst >"$TOKENIZER.tmp" 2>/dev/null ||
        python3 -c 'import pyarrow, shutil, sys
with pyarrow.input_stream("tokenizer/testdata/qwen3-tokenizer.json.zst", compression="zstd") as z, open(sys.argv[1], "wb") as f:
    shutil.copyfileobj(z, f)' "$TOKENIZER.tmp" 2>/dev/null
      if [ -s "$TOKENIZER.tmp" ]; then mv "$TOKENIZER.tmp" "$TOKENIZER"; else
        rm -f "$TOKENIZER.tmp"
        echo "no $TOKENIZER, and neither zstd nor pyarrow here to unpack the tree's copy: carry it (see the top)"
        exit 2
      fi
    fi
    rm -rf "$CK"
    run_step "make_kev4b --shapes 0.8b" "$(($(left) - 240 < 120 ? $(left) - 240 : 120))" "$LOGS/make_kev08b.log" \
      python3 scripts/golden/make_kev4b.py "$KEV08B" --shapes 0.8b --tokenizer "$TOKENIZER" || status=1
    grep -E "^(NOTE|FAIL)|parameters|seconds" "$LOGS/make_kev08b.log" | tail -4 | sed 's/^/   /'
    if [ ! -f "$CK/.complete" ]; then
      echo "   no checkpoint: the jobs are skipped"
      JOBS=""
      status=1
    fi
  fi
fi

# ---- 2. the tensor/cpu tests, where the AVX-512 and AMX code paths run
if [ "$TESTS" = 1 ]; then
  if [ -z "$DRY" ] && [ ! -f "$cputest" ]; then
    echo "== tensor/cpu tests: skipped, no bin/cpu.test"
  else
    tl=$(($(left) - 20 < TESTS_S ? $(left) - 20 : TESTS_S))
    lim=$((tl / 3))
    cd tensor/cpu
    run_step "cpu.test GEMM|Kernel|BF16|AMX" "$lim" "$LOGS/cpu_test_kernels.log" \
      "$cputest" -test.run 'GEMM|Kernel|BF16|AMX' -test.v -test.count 1 || status=1
    [ -z "$DRY" ] && grep -E "^(--- FAIL|--- SKIP|ok|PASS|FAIL)" "$LOGS/cpu_test_kernels.log" | tail -8 | sed 's/^/   /'
    run_step "cpu.test -test.short" "$((tl - lim))" "$LOGS/cpu_test_short.log" \
      "$cputest" -test.short -test.count 1 || status=1
    cd "$root"
    [ -z "$DRY" ] && grep -E "^(--- FAIL|ok|PASS|FAIL)" "$LOGS/cpu_test_short.log" | tail -5 | sed 's/^/   /'
  fi
fi

# ---- 3. the jobs
merge() {
  local dirs=("--dir" "$RES" "--dir" "$OUT")
  for d in ${MERGE_DIRS:-}; do dirs=("--dir" "$d" "${dirs[@]}"); done
  if [ -n "$DRY" ]; then
    echo "== merge"
    printf '  %q ' python3 scripts/cpu/compare.py "${dirs[@]}" --json "$OUT/compare.json" --md "$OUT/compare.md"
    echo
    return 0
  fi
  timeout -k 2 30 python3 scripts/cpu/compare.py "${dirs[@]}" --json "$OUT/compare.json" --md "$OUT/compare.md" \
    >"$LOGS/compare.log" 2>&1 || { status=1; cat "$LOGS/compare.log"; }
}
reserve=20 # the merge at the end, slack
set -- $JOBS
while [ $# -gt 0 ]; do
  job=$1
  shift
  engine=${job%%-*}
  rest=${job#*-}
  dtype=${rest%-*}
  threads=${rest#*-}
  lim=$((($(left) - reserve) / ($# + 1)))
  pin=(taskset -c "0-$((threads - 1))")
  if [ "$threads" -gt "$ncpu" ]; then
    echo "== $job: only $ncpu CPUs here, running on all of them"
    pin=()
  elif ! command -v taskset >/dev/null; then
    echo "== $job: no taskset here, running unpinned"
    pin=()
  fi
  out=$OUT/$job.json
  if [ "$engine" = kev ]; then
    run_step "$job" "$lim" "$LOGS/$job.log" env GOMAXPROCS="$threads" "${pin[@]}" "$kev" bench \
      -checkpoint "$CK/kev" -base "$CK/base" -device cpu -dtype "$dtype" -cases "$CASES" -runs "$RUNS" \
      -warmup "$WARMUP" -clients "" -budget "$((lim > 40 ? lim - 15 : lim * 2 / 3))s" -out "$out" || status=1
    [ -z "$DRY" ] && grep -E "^kev bench: (host|[0-9] questions)" "$LOGS/$job.log" | sed 's/^/   /'
  else
    run_step "$job" "$lim" "$LOGS/$job.log" env OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" \
      "${pin[@]}" python3 "$TORCH_REF" "$CK" --device cpu --dtype "$dtype" --threads "$threads" \
      --cases "$CASES" --reps "$RUNS" --warmup "$WARMUP" --budget-s "$((lim > 60 ? lim - 25 : lim * 2 / 3))" \
      --check-max-tokens "$([ "$threads" -ge 16 ] && echo 512 || echo 128)" --out "$out" ||
      status=1
    [ -z "$DRY" ] && grep -E "^\[.*\] [0-9] questions.*: new state|^NOTE" "$LOGS/$job.log" | sed 's/^/   /'
  fi
  [ -z "$DRY" ] && [ -f "$out" ] && cp "$out" "$RES/"
  merge
done

# ---- 4. side by side (after every job too, so a part cut short leaves a table)
[ -z "$JOBS" ] && merge
if [ -z "$DRY" ]; then
  cat "$OUT/compare.md" 2>/dev/null
  tar -C "$RES" -czf "$OUT/logs.tgz" logs
fi
echo "== part $PART done in $SECONDS s, exit $status"
exit $status
