#!/usr/bin/env python3
"""The family table from scripts/gpu/family.sh's (or family_27b.sh's) results: per size, from kev bench's report
(kev_bench_<size>.json; the family's sizes in order, then any other label such as 27b-8l) and the comparison with
PyTorch (compare_<size>.json, when it exists).

    python3 scripts/gpu/family_table.py OUTDIR

Columns: load seconds; host memory after the load (RssAnon = anonymous, i.e. not file-backed, and VmRSS) and the
peak of RssAnon during the load; device memory held after the load (weights); model time, new / cached state, of
Kev's four serving cases (median); the first request of each case in the fresh process against its median (worst
ratio) and, where run, the 16k-token state; parity against PyTorch bf16 on the same checkpoint: max |dp| and argmax
flips over the cases' questions (own state and first new state).
"""

import json
import sys
from pathlib import Path

SIZES = ["0.8b", "4b", "9b", "27b"]
CASES = ["2 questions, short state", "6 questions, short state", "5 questions, 370-token state",
         "5 questions, 2,200-token state"]
LONG = "5 questions, 16k-token state"


def load(p):
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def gb(n):
    return f"{n / 1e9:.2f}" if n else "-"


def main():
    out = Path(sys.argv[1])
    print("| size | load s | RssAnon / VmRSS after load GB | RssAnon peak in load GB | device GB (weights) |"
          " 2 q short | 6 q short | 5 q 370 | 5 q 2,200 | first / median (worst case) | 16k state first / median |"
          " vs PyTorch bf16: max abs dp, flips |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    found = sorted(p.name[len("kev_bench_"):-len(".json")] for p in out.glob("kev_bench_*.json"))
    sizes = [s for s in SIZES if s in found] + [s for s in found if s not in SIZES]
    for size in sizes:
        b = load(out / f"kev_bench_{size}.json")
        if b is None:
            continue
        h = b.get("host_memory", {})
        m = b.get("memory", {})
        lat = b.get("latency", {})
        cells = []
        worst = None
        for c in CASES:
            v = lat.get(c)
            if not v:
                cells.append("-")
                continue
            cells.append(f"{v['new_ms']} / {v['cached_ms']} ms")
            if v.get("first_ms") and v.get("new_ms"):
                r = v["first_ms"] / v["new_ms"]
                if worst is None or r > worst[0]:
                    worst = (r, c, v["first_ms"], v["new_ms"])
        first = f"{worst[2]} / {worst[3]} ms ({worst[1]})" if worst else "-"
        lv = lat.get(LONG)
        long = f"{lv['first_ms']} / {lv['new_ms']} ms ({lv['state_tokens']} tokens)" if lv else "-"
        par = "-"
        cmp = load(out / f"compare_{size}.json")
        if cmp:
            worst_dp, flips, qs = 0.0, 0, 0
            for c in cmp.get("cases", []):
                for key in ("vs_bf16", "new_state_vs_bf16"):
                    d = c.get(key)
                    if isinstance(d, dict) and d.get("max_abs_dp") is not None:
                        worst_dp = max(worst_dp, d["max_abs_dp"])
                        flips += d.get("argmax_flips", 0)
                        qs += d.get("questions", 0)
            par = f"{worst_dp:.4f}, {flips} of {qs}"
        print(f"| {size} | {b.get('load_seconds', '-')} | {gb(h.get('rss_anon_bytes'))} / {gb(h.get('rss_bytes'))} |"
              f" {gb(h.get('load_peak_rss_anon_bytes'))} | {gb(m.get('resident_bytes'))} ({gb(m.get('weight_bytes'))}) |"
              f" {' | '.join(cells)} | {first} | {long} | {par} |")


if __name__ == "__main__":
    main()
