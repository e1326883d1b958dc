#!/usr/bin/env bash
# bench.sh end to end on this machine, without torch or a GPU: the real bin/kev on the tiny-a test checkpoint (in
# the place of the Kev-0.8B one) and scripts/cpu/testdata/fake_torch_reference.py in the place of
# torch_reference.py: parts 16 and 4 with 2 timed runs, a part whose first job is cut at its limit, and prep's
# tests; then checks the files each part leaves and compare.json.
# From the repository root, after `go build -o bin/kev ./examples/kev` (and `go test -c -o bin/cpu.test
# ./tensor/cpu` for prep; without it prep is not run):
#   bash scripts/cpu/test_bench.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
[ -x bin/kev ] || { echo "test_bench.sh: build bin/kev first (go build -o bin/kev ./examples/kev)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ck/0.8b"
ln -s "$root/testdata/golden/tiny-a/kev" "$tmp/ck/0.8b/kev"
ln -s "$root/testdata/golden/tiny-a/base" "$tmp/ck/0.8b/base"
touch "$tmp/ck/0.8b/.complete"
export RES=$tmp/res KEV08B=$tmp/ck TORCH_REF=scripts/cpu/testdata/fake_torch_reference.py RUNS=2 WARMUP=1
export BENCH_TOTAL_S=300
for part in 16 4; do
  if ! OUT=$tmp/out$part PART=$part bash scripts/cpu/bench.sh >"$tmp/part$part.log" 2>&1; then
    cat "$tmp/part$part.log"
    echo "FAIL: PART=$part exited non-zero"
    exit 1
  fi
done
# A job cut at its limit: the fake reference stops for a minute after its first case; the part's 70 s give it 25 s.
if ! OUT=$tmp/outcut PART="torch-fp32-2 kev-fp32-2" BENCH_TOTAL_S=70 FAKE_SLEEP_S=60 bash scripts/cpu/bench.sh \
  >"$tmp/partcut.log" 2>&1; then
  grep -q "TIMED OUT" "$tmp/partcut.log" || { cat "$tmp/partcut.log"; echo "FAIL: the cut part failed otherwise"; exit 1; }
else
  cat "$tmp/partcut.log"
  echo "FAIL: the cut part exited 0"
  exit 1
fi
# prep: the tensor/cpu test binary, when it was built
if [ -x bin/cpu.test ]; then
  OUT=$tmp/outprep PART=prep bash scripts/cpu/bench.sh >"$tmp/partprep.log" 2>&1 || { cat "$tmp/partprep.log"; echo "FAIL: PART=prep"; exit 1; }
  tar -xzf "$tmp/outprep/logs.tgz" -C "$tmp" logs/cpu_test_kernels.log logs/cpu_test_short.log
  grep -q "^--- PASS: TestMatMulKernelsAgree" "$tmp/logs/cpu_test_kernels.log" && grep -q "^PASS" "$tmp/logs/cpu_test_short.log" ||
    { cat "$tmp/partprep.log"; echo "FAIL: PART=prep ran no kernel tests"; exit 1; }
fi
python3 - "$tmp" <<'PY'
import json, sys, tarfile
from pathlib import Path
tmp = Path(sys.argv[1])
failed = []
def check(cond, what):
    if not cond:
        failed.append(what)
        print("FAIL:", what)
for part in ("16", "4"):
    out = tmp / ("out" + part)
    files = ["logs.tgz", "compare.json", "compare.md"] + [f"{e}-{d}-{part}.json" for e in ("kev", "torch") for d in ("fp32", "bf16")]
    # what comes back from the GPU machine's $OUT: at most 8 files
    check(sorted(f.name for f in out.iterdir()) == sorted(files), f"PART={part}: {sorted(f.name for f in out.iterdir())}")
    with tarfile.open(out / "logs.tgz") as t:
        logs = set(t.getnames())
    for f in [f"machine-{part}.log", "compare.log"] + [f"{e}-{d}-{part}.log" for e in ("kev", "torch") for d in ("fp32", "bf16")]:
        check("logs/" + f in logs, f"PART={part}: logs.tgz lacks {f}: {sorted(logs)}")
    k = json.loads((out / f"kev-bf16-{part}.json").read_text())
    check(k["dtype"] == "bfloat16" and k["host_cpu"]["gomaxprocs"] == int(part) and k["concurrency"] == [],
          f"kev-bf16-{part}.json: dtype {k['dtype']}, gomaxprocs {k['host_cpu']['gomaxprocs']}, concurrency {k['concurrency']}")
# the second part's merge sees both parts (through RES)
c = json.loads((tmp / "out4" / "compare.json").read_text())
cases = json.loads(Path("scripts/golden/bench-cases.json").read_text())["cases"]
check(c["cases"] == list(cases), f"cases {c['cases']}")
check(c["threads"] == [16, 4], f"threads {c['threads']}")
check(len(c["rows"]) == 4 * 2 * 4, f"{len(c['rows'])} rows, want 32")
check(all(f["complete"] and not f["error"] for f in c["files"].values()) and len(c["files"]) == 8, f"files {c['files']}")
for r in c["rows"]:
    what = f"{r['engine']} {r['dtype']} {r['threads']} {r['case']}"
    check(isinstance(r["new_ms"], (int, float)) and r["new_ms"] > 0 and r["cached_ms"] > 0 and r["runs"] == 2, f"{what}: {r}")
    if r["engine"] == "kev" and r["dtype"] == "fp32":
        check(r["dp_vs_torch_fp32"] is not None and 0 < r["dp_vs_torch_fp32"] < 1, f"{what}: dp vs torch {r['dp_vs_torch_fp32']}")
    if r["engine"] == "kev" and r["dtype"] == "bf16":
        # kev's own bf16 against its fp32 on the same model: close, not equal
        check(r["dp_vs_kev_fp32"] is not None and 0 < r["dp_vs_kev_fp32"] < 0.2, f"{what}: bf16 vs fp32 {r['dp_vs_kev_fp32']}")
        check(r["dp_vs_torch_bf16"] is not None, f"{what}: no dp vs torch bf16")
check(len(c["speedups"]) == 4 * 2 * 2 and all(s["new"] > 0 and s["cached"] > 0 for s in c["speedups"]), f"speedups {c['speedups']}")
md = (tmp / "out4" / "compare.md").read_text()
check(md.count("| 16 |") == 3 * 4 and md.count("| 4 |") == 3 * 4, "compare.md: want 4 rows a thread count in each of its 3 tables")
# the cut job: its first case is there, the file says it is incomplete, and kev ran after it
c = json.loads((tmp / "outcut" / "compare.json").read_text())
t = c["files"].get("torch-fp32-2") or {}
check(t.get("complete") is False and not t.get("error"), f"cut torch job: {t}")
rows = [(r["engine"], r["case"]) for r in c["rows"] if r["threads"] == 2]
check(rows.count(("torch", list(cases)[0])) == 1 and sum(1 for e, _ in rows if e == "torch") == 1, f"cut: rows {rows}")
check(sum(1 for e, _ in rows if e == "kev") == 4, f"cut: kev rows {rows}")
check("torch-fp32-2 (partial)" in (tmp / "outcut" / "compare.md").read_text(), "cut: compare.md does not say partial")
if failed:
    sys.exit(1)
print("test_bench.sh: PART=16 and PART=4 left every file; compare.json has 32 rows with parity and speed-ups")
PY
