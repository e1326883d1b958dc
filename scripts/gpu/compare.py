#!/usr/bin/env python3
"""Side by side: `kev bench` (our engine) against the PyTorch serving reference (scripts/golden/torch_reference.py)
on the same checkpoint, cases and GPU.

    python3 scripts/gpu/compare.py --ours kev_bench.json --torch torch_ref.json [--json compare.json]

Per case: token counts on both sides (they must agree: both encode with the checkpoint's tokenizer), model-time
medians of new and cached states (ours / torch), and the probabilities of the case's own state (i = 0) and of its
first new state ("Ticket 1. ..."): max |dp| between ours and torch's bf16 (as served) and fp32 (exact), argmax flips
(first index on ties), and whether the rounded answers are the same as torch's bf16 answers. Then our concurrency
levels and both sides' memory. Either file may be missing or partial: what is there is printed, the rest is "-".

Exit status: 0 when the table was printed, 1 when neither file could be read, 2 for bad arguments.
"""

import argparse
import json
import math
import sys
from pathlib import Path


def load(path, what):
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        print(f"compare: {what} {path}: missing", file=sys.stderr)
    except (OSError, ValueError) as e:
        print(f"compare: {what} {path}: {e}", file=sys.stderr)
    return None


def finite_lists(p):
    """A list of per-question probability lists, or None when it is absent or malformed."""
    if not isinstance(p, list) or not all(isinstance(q, list) for q in p):
        return None
    return p


def argmax(q):
    best = None
    for i, v in enumerate(q):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if best is None or v > q[best]:
            best = i
    return best


def diff(ours, ref):
    """max |dp|, argmax flips and questions compared, or None when the shapes disagree."""
    ours, ref = finite_lists(ours), finite_lists(ref)
    if ours is None or ref is None or len(ours) != len(ref) or any(len(a) != len(b) for a, b in zip(ours, ref)):
        return None
    worst, flips = 0.0, 0
    for a, b in zip(ours, ref):
        for x, y in zip(a, b):
            if x is None or y is None:
                worst = math.inf
            else:
                worst = max(worst, abs(x - y))
        if argmax(a) != argmax(b):
            flips += 1
    return {"max_abs_dp": worst, "argmax_flips": flips, "questions": len(ours)}


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def fmt(x, spec=".1f"):
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def compare(ours, torch):
    ours = ours or {}
    torch = torch or {}
    tcases = {c.get("name"): c for c in torch.get("cases", []) if isinstance(c, dict)}
    names = list((ours.get("latency") or {}).keys())
    names += [n for n in (ours.get("probabilities") or {}) if n not in names]
    names += [n for n in tcases if n not in names]
    rows = []
    for name in names:
        lat = get(ours, "latency", name) or {}
        pr = get(ours, "probabilities", name) or {}
        tc = tcases.get(name, {})
        p0 = pr.get("probabilities")
        p1 = get(pr, "new_state_example", "probabilities")
        t_ans = tc.get("answers_bf16")
        same_answers = None
        if pr.get("answers") is not None and isinstance(t_ans, str):
            try:
                same_answers = pr["answers"] == json.loads(t_ans)
            except ValueError:
                pass
        rows.append({
            "name": name,
            "state_tokens": [lat.get("state_tokens"), tc.get("state_tokens")],
            "input_tokens": [lat.get("tokens"), tc.get("input_tokens")],
            "new_ms": [lat.get("new_ms"), get(tc, "latency_new_ms", "median")],
            "cached_ms": [lat.get("cached_ms"), get(tc, "latency_cached_ms", "median")],
            "new_p90_ms": [get(lat, "new", "model_ms", "p90"), get(tc, "latency_new_ms", "p90")],
            "cached_p90_ms": [get(lat, "cached", "model_ms", "p90"), get(tc, "latency_cached_ms", "p90")],
            "runs": [get(lat, "new", "runs"), get(tc, "latency_new_ms", "runs")],
            "vs_bf16": diff(p0, tc.get("probabilities_bf16")),
            "vs_fp32": diff(p0, tc.get("probabilities_fp32")),
            "vs_bf16_alog_fp32": diff(p0, tc.get("probabilities_bf16_alog_fp32")),
            "torch_bf16_vs_fp32": tc.get("max_abs_dp_bf16_vs_fp32"),
            "new_state_vs_bf16": diff(p1, get(tc, "new_state_example", "probabilities_bf16")),
            "new_state_tokens": [get(pr, "new_state_example", "state_tokens"), get(tc, "new_state_example", "state_tokens")],
            "same_answers_as_bf16": same_answers,
        })
    return {
        "ours": {k: ours.get(k) for k in ("run", "device", "dtype", "load_seconds", "memory", "memory_after", "graphs",
                                          "prefix_cache", "notes", "interrupted", "seconds")},
        "torch": {"gpu": torch.get("gpu"), "versions": torch.get("versions"),
                  "serving_form": get(torch, "model", "serving_form"),
                  "peak_gpu_memory_gb_bf16": get(torch, "model", "peak_gpu_memory_gb_bf16"),
                  "notes": torch.get("notes"), "seconds": torch.get("seconds")},
        "cases": rows,
        "concurrency": ours.get("concurrency") or [],
    }


def dp_cell(d):
    if d is None:
        return "-"
    return f"{fmt(d['max_abs_dp'], '.4f')}/{d['argmax_flips']}"


def print_table(r, out=sys.stdout):
    o, t = r["ours"], r["torch"]
    w = lambda s="": print(s, file=out)
    w("=" * 132)
    w(f"ours: {o.get('device') or '-'} {o.get('dtype') or '-'}, loaded in {fmt(o.get('load_seconds'))} s"
      f"{'; INTERRUPTED' if o.get('interrupted') else ''}    "
      f"torch: {t.get('gpu') or '-'}, serving form {t.get('serving_form') or '-'}, "
      f"torch {get(t, 'versions', 'torch') or '-'}")
    w("model ms: ours/torch median (ratio ours÷torch); |dp| cells are max |dp| / argmax flips of the i = 0 probabilities")
    w(f"{'case':32s} {'tokens':>11s} {'new ms':>17s} {'x':>5s} {'cached ms':>17s} {'x':>5s} "
      f"{'vs bf16':>12s} {'vs fp32':>12s} {'torch16v32':>10s} {'Ticket 1':>12s} {'answers':>7s}")
    mismatched = []
    for c in r["cases"]:
        st, it = c["state_tokens"], c["input_tokens"]
        if None not in it and it[0] != it[1] or None not in st and st[0] != st[1]:
            mismatched.append(c["name"])
        tok = f"{fmt(it[0], 'd')}/{fmt(it[1], 'd')}"
        nm, cm = c["new_ms"], c["cached_ms"]
        ans = {True: "same", False: "DIFF", None: "-"}[c["same_answers_as_bf16"]]
        w(f"{c['name'][:32]:32s} {tok:>11s} {fmt(nm[0]) + '/' + fmt(nm[1]):>17s} {fmt(ratio(*nm), '.2f'):>5s} "
          f"{fmt(cm[0]) + '/' + fmt(cm[1]):>17s} {fmt(ratio(*cm), '.2f'):>5s} {dp_cell(c['vs_bf16']):>12s} "
          f"{dp_cell(c['vs_fp32']):>12s} {fmt(c['torch_bf16_vs_fp32'], '.4f'):>10s} "
          f"{dp_cell(c['new_state_vs_bf16']):>12s} {ans:>7s}")
    if mismatched:
        w(f"TOKEN COUNTS DIFFER (ours/torch) for: {', '.join(mismatched)}")
    diffs = [c for c in r["cases"] if c["vs_bf16"]]
    if diffs:
        worst16 = max(c["vs_bf16"]["max_abs_dp"] for c in diffs)
        flips16 = sum(c["vs_bf16"]["argmax_flips"] for c in diffs)
        qs = sum(c["vs_bf16"]["questions"] for c in diffs)
        d32 = [c["vs_fp32"] for c in r["cases"] if c["vs_fp32"]]
        worst32 = max((d["max_abs_dp"] for d in d32), default=None)
        flips32 = sum(d["argmax_flips"] for d in d32)
        w(f"probabilities over {qs} questions: max |dp| vs torch bf16 {fmt(worst16, '.4f')} ({flips16} argmax flips), "
          f"vs torch fp32 {fmt(worst32, '.4f')} ({flips32} flips)")

    if r["concurrency"]:
        w()
        w("ours, concurrent in-process clients (6-question case, a new ticket per request)")
        w(f"{'clients':>7s} {'requests':>8s} {'errors':>6s} {'rps':>8s} {'p50 ms':>8s} {'p99 ms':>8s} "
          f"{'model p50':>9s} {'mean batch':>10s}")
        for lv in r["concurrency"]:
            w(f"{fmt(lv.get('clients'), 'd'):>7s} {fmt(lv.get('requests'), 'd'):>8s} {fmt(lv.get('errors'), 'd'):>6s} "
              f"{fmt(lv.get('rps')):>8s} {fmt(lv.get('p50_ms')):>8s} {fmt(lv.get('p99_ms')):>8s} "
              f"{fmt(lv.get('model_p50_ms')):>9s} {fmt(lv.get('mean_batch')):>10s}")
    w()
    mem, mem2 = o.get("memory") or {}, o.get("memory_after") or {}
    w(f"memory: ours {mem.get('kind') or '-'} {fmt(mem.get('resident_gb'), '.2f')} GB after load, "
      f"{fmt(mem2.get('resident_gb'), '.2f')} GB at the end (weights {fmt((mem.get('weight_bytes') or 0) / 1e9, '.2f')} GB); "
      f"torch bf16 peak {fmt(t.get('peak_gpu_memory_gb_bf16'), '.2f')} GB")
    g = o.get("graphs")
    pc = o.get("prefix_cache") or {}
    w(f"ours: graphs {json.dumps(g)}; prefix cache hits {pc.get('hits', '-')}, misses {pc.get('misses', '-')}, "
      f"oom retries {pc.get('oom_retries', '-')}")
    for side, notes in (("ours", o.get("notes")), ("torch", t.get("notes"))):
        for n in notes or []:
            w(f"note ({side}): {n}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", type=Path, required=True, help="kev bench's report")
    ap.add_argument("--torch", type=Path, required=True, help="torch_reference.py's output")
    ap.add_argument("--json", type=Path, help="also write the comparison here")
    a = ap.parse_args()
    ours, torch = load(a.ours, "ours"), load(a.torch, "torch")
    if ours is None and torch is None:
        print("compare: nothing to compare", file=sys.stderr)
        return 1
    r = compare(ours if isinstance(ours, dict) else None, torch if isinstance(torch, dict) else None)
    print_table(r)
    if a.json:
        a.json.write_text(json.dumps(r, indent=1, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
