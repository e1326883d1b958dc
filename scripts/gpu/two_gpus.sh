#!/usr/bin/env bash
# One server over every GPU of the host against the same server on one GPU, in one command on a machine with two
# (or more) GPUs: Kev's 6-question case over HTTP at 64 and 128 clients (p50, p99, req/s), the answers of both
# servers to the same 64 bodies compared bit for bit, and each GPU's memory and utilisation sampled during the load.
# Build on the Go machine first (CUDA headers and the libcuda stub, see the README), from the repository root:
#   CGO_LDFLAGS=-L/usr/lib/x86_64-linux-gnu/stubs go build -tags cuda -o bin/kev ./examples/kev
#   go run ./scripts/corpus -unpack .gold-in        # the Qwen3 tokenizer.json the checkpoint is built with
# Run there from the repository root: OUT=dir bash scripts/gpu/two_gpus.sh (KEV4B: where the Kev-4B-shaped
# checkpoint is made, default /tmp/kev4b; DURATION: seconds per level, default 10).
set -u
OUT=${OUT:-.out}
KEV4B=${KEV4B:-/tmp/kev4b}
DURATION=${DURATION:-10}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
[ "$(wc -l < "$OUT/gpus.txt")" -ge 2 ] || { echo "fewer than two GPUs: nothing to compare"; exit 2; }
if [ ! -f "$KEV4B/.complete" ]; then
  python3 scripts/golden/make_kev4b.py "$KEV4B" --tokenizer .gold-in/tokenizer.json > "$OUT/make_kev4b.log" 2>&1 &&
    touch "$KEV4B/.complete" || { tail -5 "$OUT/make_kev4b.log"; exit 1; }
fi
# answers PORT FILE: the answers of the server on PORT to 64 fixed bodies of the 6-question case, latency removed.
answers() {
  python3 - "$1" "$2" <<'PY'
import json, sys, urllib.request
port, out = sys.argv[1], sys.argv[2]
case = json.load(open("scripts/golden/bench-cases.json"))["cases"]["6 questions, short state"]
got = []
for i in range(64):
    body = dict(case, state=f"Ticket {i}. " + case["state"])
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/systemone", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=60))
    r.get("usage", {}).pop("latency_ms", None)
    got.append(r["answers"])
json.dump(got, open(out, "w"), sort_keys=True)
PY
}
# run NAME DEVICE PORT: serve on DEVICE, sample the GPUs, load at 64 and 128 clients, record the answers.
run() {
  local name=$1 device=$2 port=$3
  bin/kev serve -device "$device" -checkpoint "$KEV4B/kev" -base "$KEV4B/base" -addr 127.0.0.1:$port \
    > "$OUT/serve_$name.log" 2>&1 &
  local spid=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:$port/readyz > /dev/null && break; sleep 1; done
  echo "== $name ($device): ready after $i s"
  nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv,noheader -lms 500 > "$OUT/gpu_$name.csv" &
  local smi=$!
  bin/kev loadtest -url http://127.0.0.1:$port -levels 64,128 -duration ${DURATION}s -out "$OUT/http_$name.json" \
    > "$OUT/loadtest_$name.log" 2>&1
  echo "   loadtest exit $?"; tail -4 "$OUT/loadtest_$name.log" | sed 's/^/   /'
  kill $smi
  answers $port "$OUT/answers_$name.json"
  curl -s http://127.0.0.1:$port/metrics | grep '^kev_replica' > "$OUT/metrics_$name.txt"
  kill -TERM $spid; wait $spid
}
run one cuda:0 8021
run all cuda:all 8022
echo "== answers equal, one GPU vs all: $(cmp -s "$OUT/answers_one.json" "$OUT/answers_all.json" && echo yes || echo NO)"
python3 - "$OUT" <<'PY'
import csv, json, sys, collections
out = sys.argv[1]
for name in ("one", "all"):
    rep = json.load(open(f"{out}/http_{name}.json"))
    for lv in rep.get("levels", []):
        print(f"{name:4} clients {lv.get('concurrency')}: {lv.get('rps')} req/s, p50 {lv.get('p50_ms')} ms, p99 {lv.get('p99_ms')} ms, errors {lv.get('errors')}")
    use = collections.defaultdict(list)
    for row in csv.reader(open(f"{out}/gpu_{name}.csv")):
        if len(row) == 3:
            use[row[0].strip()].append((int(row[1].split()[0]), int(row[2].split()[0])))
    for gpu, xs in sorted(use.items()):
        print(f"{name:4} GPU {gpu}: memory up to {max(m for m, _ in xs)} MiB, utilisation mean {sum(u for _, u in xs) / len(xs):.0f} %")
PY
