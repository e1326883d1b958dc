#!/usr/bin/env python3
"""Side by side on the host CPU: `kev bench -device cpu` against torch_reference.py --device cpu, per case, thread
count and dtype, from the files scripts/cpu/bench.sh writes (ENGINE-DTYPE-THREADS.json: kev-fp32-16.json,
torch-bf16-4.json, ...).

    python3 scripts/cpu/compare.py --dir RESULTS [--dir MORE ...] --json compare.json --md compare.md

A file found in several folders is read from the last one given. Any file may be missing, partial (torch writes
after every case; kev bench's report may be marked interrupted) or unreadable: what is there is compared, the rest
is null in compare.json and "-" in compare.md.

compare.json: {"host": ..., "files": {job: {"path", "complete", "seconds", "error"}},
  "rows": [{"case", "threads", "engine": "torch"|"kev", "dtype": "fp32"|"bf16", "new_ms", "cached_ms" (medians),
            "new_p10_ms", "new_p90_ms", "cached_p10_ms", "cached_p90_ms", "runs", "cached_runs", "input_tokens", "first_ms" (the
            case's first request, its own state, untimed in the medians: all there is when the timed runs were cut),
            parity columns (max |dp| over the case's questions, argmax flips; null where they do not apply):
            kev fp32: "dp_vs_torch_fp32", "flips_vs_torch_fp32";
            kev bf16: "dp_vs_kev_fp32", "flips_vs_kev_fp32", "dp_vs_torch_bf16", "flips_vs_torch_bf16";
            torch bf16: "dp_vs_torch_fp32", "flips_vs_torch_fp32"}, ...],
  "speedups": [{"case", "threads", "dtype", "new": torch ms / kev ms, "cached": ...}],
  "parity": {"kev_fp32_vs_torch_fp32": {"max_abs_dp", "argmax_flips", "questions"}, "kev_bf16_vs_kev_fp32": ...,
             "kev_bf16_vs_torch_bf16": ..., "torch_bf16_vs_torch_fp32": ...}}   (over every case and thread count)
The probabilities compared are those of each case's own state (i = 0); flips count questions whose most likely
option differs (first index on ties). Speed-ups are torch ÷ kev: above 1, kev is faster.

Exit status: 0 when the files were written (even with no results yet), 2 for bad arguments.
"""

import argparse
import json
import math
import re
import sys
from pathlib import Path

ENGINES = ("torch", "kev")
DTYPES = ("fp32", "bf16")
JOB = re.compile(r"^(kev|torch)-(fp32|bf16)-([1-9][0-9]*)\.json$")
PARITY = {  # row (engine, dtype) -> [(column stem, reference engine, reference dtype)]
    ("kev", "fp32"): [("torch_fp32", "torch", "fp32")],
    ("kev", "bf16"): [("kev_fp32", "kev", "fp32"), ("torch_bf16", "torch", "bf16")],
    ("torch", "bf16"): [("torch_fp32", "torch", "fp32")],
    ("torch", "fp32"): [],
}
ALL_COLUMNS = ("torch_fp32", "kev_fp32", "torch_bf16")


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def find_files(dirs):
    """{(engine, dtype, threads): path}; a later folder's file replaces an earlier one's."""
    found = {}
    for d in dirs:
        p = Path(d)
        if not p.is_dir():
            continue
        for f in sorted(p.iterdir()):
            m = JOB.match(f.name)
            if m and f.is_file():
                found[(m.group(1), m.group(2), int(m.group(3)))] = f
    return found


def normalise(engine, doc):
    """One engine's file as {"cases": [names in order], case: {"new", "cached", "new_p10", ..., "runs", "tokens",
    "p"}}, "complete", "seconds", "host"}."""
    out = {"cases": [], "by": {}, "complete": None, "seconds": doc.get("seconds"), "host": None}
    if engine == "kev":
        out["complete"] = not doc.get("interrupted", False) and "seconds" in doc
        out["host"] = {"cpu": get(doc, "host_cpu", "model"), "gomaxprocs": doc.get("gomaxprocs"),
                       "features": get(doc, "host_cpu", "features"), "kernel": get(doc, "host_cpu", "kernel"),
                       "dtype": doc.get("dtype"), "go": doc.get("go")}
        lat, probs = doc.get("latency") or {}, doc.get("probabilities") or {}
        for name in list(lat) + [n for n in probs if n not in lat]:
            l = lat.get(name) or {}
            out["cases"].append(name)
            out["by"][name] = {
                "new": l.get("new_ms"), "cached": l.get("cached_ms"),
                "new_p10": get(l, "new", "model_ms", "p10"), "new_p90": get(l, "new", "model_ms", "p90"),
                "cached_p10": get(l, "cached", "model_ms", "p10"), "cached_p90": get(l, "cached", "model_ms", "p90"),
                "runs": get(l, "new", "runs"), "cached_runs": get(l, "cached", "runs"), "tokens": l.get("tokens"),
                "first": l.get("first_ms"),
                "p": get(probs, name, "probabilities"),
            }
    else:
        out["complete"] = bool(doc.get("complete"))
        out["host"] = {"cpu": doc.get("cpu"), "threads": doc.get("threads"), "dtype": doc.get("dtype"),
                       "torch": get(doc, "versions", "torch"), "transformers": get(doc, "versions", "transformers"),
                       "cpu_capability": get(doc, "versions", "cpu_capability"),
                       "serving_form": get(doc, "model", "serving_form")}
        for c in doc.get("cases") or []:
            if not isinstance(c, dict) or "name" not in c:
                continue
            n, k = c.get("latency_new_ms") or {}, c.get("latency_cached_ms") or {}
            out["cases"].append(c["name"])
            out["by"][c["name"]] = {
                "new": n.get("median"), "cached": k.get("median"), "new_p10": n.get("p10"), "new_p90": n.get("p90"),
                "cached_p10": k.get("p10"), "cached_p90": k.get("p90"), "runs": n.get("runs"),
                "cached_runs": k.get("runs"),
                "tokens": c.get("input_tokens"), "first": c.get("latency_first_ms"), "p": c.get("probabilities"),
            }
    return out


def argmax(q):
    best = None
    for i, v in enumerate(q):
        if not isinstance(v, (int, float)) or math.isnan(v):
            continue
        if best is None or v > q[best]:
            best = i
    return best


def diff(a, b):
    """{"max_abs_dp", "argmax_flips", "questions"} between two per-question probability lists, or None when either is
    missing or their shapes differ; a missing value (null) makes max_abs_dp infinite."""
    if not isinstance(a, list) or not isinstance(b, list) or len(a) != len(b):
        return None
    worst, flips = 0.0, 0
    for qa, qb in zip(a, b):
        if not isinstance(qa, list) or not isinstance(qb, list) or len(qa) != len(qb):
            return None
        for x, y in zip(qa, qb):
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
                worst = math.inf
            else:
                worst = max(worst, abs(x - y))
        if argmax(qa) != argmax(qb):
            flips += 1
    return {"max_abs_dp": worst, "argmax_flips": flips, "questions": len(a)}


def ratio(a, b):
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or b <= 0:
        return None
    return a / b


def compare(dirs):
    files = find_files(dirs)
    runs, info = {}, {}
    for (engine, dtype, threads), path in sorted(files.items()):
        job = f"{engine}-{dtype}-{threads}"
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as e:
            info[job] = {"path": str(path), "complete": False, "seconds": None, "error": str(e)}
            continue
        runs[(engine, dtype, threads)] = normalise(engine, doc)
        r = runs[(engine, dtype, threads)]
        info[job] = {"path": str(path), "complete": r["complete"], "seconds": r["seconds"], "error": None}

    names = []
    for key in sorted(runs, key=lambda k: (ENGINES.index(k[0]), DTYPES.index(k[1]), -k[2])):
        names += [n for n in runs[key]["cases"] if n not in names]
    threads_all = sorted({k[2] for k in runs}, reverse=True)

    rows, speedups = [], []
    totals = {f"{e}_{d}_vs_{stem}": None for (e, d), refs in PARITY.items() for stem, _, _ in refs}
    for name in names:
        for t in threads_all:
            for engine in ENGINES:
                for dtype in DTYPES:
                    r = runs.get((engine, dtype, t))
                    c = r["by"].get(name) if r else None
                    if c is None:
                        continue
                    row = {"case": name, "threads": t, "engine": engine, "dtype": dtype,
                           "new_ms": c["new"], "cached_ms": c["cached"],
                           "new_p10_ms": c["new_p10"], "new_p90_ms": c["new_p90"],
                           "cached_p10_ms": c["cached_p10"], "cached_p90_ms": c["cached_p90"],
                           "runs": c["runs"], "cached_runs": c["cached_runs"], "input_tokens": c["tokens"],
                           "first_ms": c["first"]}
                    for stem in ALL_COLUMNS:
                        row[f"dp_vs_{stem}"] = row[f"flips_vs_{stem}"] = None
                    for stem, re_, rd in PARITY[(engine, dtype)]:
                        ref = runs.get((re_, rd, t))
                        d = diff(c["p"], ref["by"].get(name, {}).get("p")) if ref else None
                        if d is None:
                            continue
                        row[f"dp_vs_{stem}"], row[f"flips_vs_{stem}"] = d["max_abs_dp"], d["argmax_flips"]
                        key = f"{engine}_{dtype}_vs_{stem}"
                        tot = totals[key] or {"max_abs_dp": 0.0, "argmax_flips": 0, "questions": 0}
                        totals[key] = {"max_abs_dp": max(tot["max_abs_dp"], d["max_abs_dp"]),
                                       "argmax_flips": tot["argmax_flips"] + d["argmax_flips"],
                                       "questions": tot["questions"] + d["questions"]}
                    rows.append(row)
            for dtype in DTYPES:
                tr, kr = runs.get(("torch", dtype, t)), runs.get(("kev", dtype, t))
                tc = tr["by"].get(name) if tr else None
                kc = kr["by"].get(name) if kr else None
                if tc and kc:
                    speedups.append({"case": name, "threads": t, "dtype": dtype, "new": ratio(tc["new"], kc["new"]),
                                     "cached": ratio(tc["cached"], kc["cached"])})
    host = {f"{k[0]}-{k[1]}-{k[2]}": v["host"] for k, v in sorted(runs.items())}
    return {"host": host, "files": info, "rows": rows, "speedups": speedups, "parity": totals,
            "cases": names, "threads": threads_all}


def fmt(x, spec=".1f"):
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return format(x, spec)


def markdown(r):
    """The tables of compare.md: per case and thread count, torch and kev medians at fp32 and bf16 with kev's
    speed-up (torch ÷ kev), new states then cached ones; then parity."""
    by = {(x["case"], x["threads"], x["engine"], x["dtype"]): x for x in r["rows"]}
    sp = {(x["case"], x["threads"], x["dtype"]): x for x in r["speedups"]}
    out = []
    first_only = False
    cpus = sorted({h.get("cpu") for h in r["host"].values() if h and h.get("cpu")})
    out.append(f"CPU: {', '.join(cpus) or '-'}. Model ms, median of the timed runs (runs: their number; one a column, "
               "torch fp32 / kev fp32 / torch bf16 / kev bf16, where they differ); speed-up = torch ÷ kev (above 1: kev is faster). Kev-0.8B-shaped random "
               "checkpoint.")
    hosts = [h for h in r["host"].values() if h]
    torch_h = next((h for h in hosts if "torch" in h), None)
    kev_h = next((h for h in hosts if "gomaxprocs" in h), None)
    if torch_h:
        out.append(f"torch {torch_h.get('torch') or '-'} (CPU capability {torch_h.get('cpu_capability') or '-'}), "
                   f"transformers {torch_h.get('transformers') or '-'}, serving form {torch_h.get('serving_form') or '-'}.")
    if kev_h:
        out.append(f"kev: {kev_h.get('go') or '-'}, CPU features {' '.join(kev_h.get('features') or []) or '-'}, "
                   f"kernel {kev_h.get('kernel') or '-'}.")
    out.append("")
    for kind, title in (("new", "new state (state pass + question rows + head)"),
                        ("cached", "cached state (question rows + head)")):
        out.append(f"**{title}**")
        out.append("")
        out.append("| case | threads | torch fp32 | kev fp32 | speed-up | torch bf16 | kev bf16 | speed-up | runs |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name in r["cases"]:
            for t in r["threads"]:
                cells = [name, str(t)]
                runs = []
                any_value = False
                for dtype in DTYPES:
                    for engine in ENGINES:
                        x = by.get((name, t, engine, dtype))
                        v = x.get(f"{kind}_ms") if x else None
                        any_value |= v is not None
                        n = x.get("runs" if kind == "new" else "cached_runs") if x else None
                        runs.append("-" if n is None else str(n))
                        if v is None and kind == "new" and x and x.get("first_ms") is not None:
                            cells.append(f"({fmt(x['first_ms'])})")
                            any_value, first_only = True, True
                            continue
                        cells.append(fmt(v))
                    s = sp.get((name, t, dtype))
                    x = s.get(kind) if s else None
                    cells.append("-" if x is None else fmt(x, ".2f" if x >= 0.1 else ".3f") + "×")
                if not any_value:
                    continue
                present = {n for n in runs if n != "-"}
                cells.append(present.pop() if len(present) == 1 else "/".join(runs))
                out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out.append("**parity** (probabilities of each case's own state: max |Δp| / argmax flips)")
    out.append("")
    out.append("| case | threads | kev fp32 vs torch fp32 | kev bf16 vs kev fp32 | kev bf16 vs torch bf16 "
               "| torch bf16 vs torch fp32 |")
    out.append("|---|---:|---:|---:|---:|---:|")

    def cell(x, stem):
        if not x or x.get(f"dp_vs_{stem}") is None:
            return "-"
        return f"{fmt(x[f'dp_vs_{stem}'], '.2e')} / {x[f'flips_vs_{stem}']}"

    for name in r["cases"]:
        for t in r["threads"]:
            k32, k16 = by.get((name, t, "kev", "fp32")), by.get((name, t, "kev", "bf16"))
            t16 = by.get((name, t, "torch", "bf16"))
            cells = [cell(k32, "torch_fp32"), cell(k16, "kev_fp32"), cell(k16, "torch_bf16"), cell(t16, "torch_fp32")]
            if all(c == "-" for c in cells):
                continue
            out.append(f"| {name} | {t} | " + " | ".join(cells) + " |")
    out.append("")
    if first_only:
        out.append("(x): the case's first request only; its timed runs did not fit in the time the job had.")
    missing = [j for j, i in r["files"].items() if i["error"] or not i["complete"]]
    if missing:
        out.append("Incomplete or unreadable: " + ", ".join(
            f"{j} ({r['files'][j]['error'] or 'partial'})" for j in missing) + ".")
    if not r["files"]:
        out.append("No results yet.")
    return "\n".join(out) + "\n"


def finite(x):
    """x with every infinite or NaN float replaced by the string "inf" or "nan" (JSON has no such numbers)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else "inf"
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", action="append", required=True, help="a folder of ENGINE-DTYPE-THREADS.json files; repeatable")
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--md", type=Path, required=True)
    a = ap.parse_args(argv)
    r = compare(a.dir)
    a.json.write_text(json.dumps(finite(r), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    md = markdown(r)
    a.md.write_text(md, encoding="utf-8")
    print(md, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
