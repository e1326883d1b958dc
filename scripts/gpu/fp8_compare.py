#!/usr/bin/env python3
"""FP8 beside bf16: two `kev bench -device cuda` reports of the same checkpoint and cases (-dtype bfloat16 and
-dtype fp8), side by side: model ms new / cached per case, requests per second at each client count, and what FP8
does to the answers — max and median |Δp| against bf16, argmax agreement, the flips, and those of them where bf16's
top two are further apart than twice the median |Δp| (FP8's usual move). A question's own |Δp| cannot tell: a flip
moves the top two by at least half their gap, so every flip is within 2·|Δp| of its own question.

    python3 scripts/gpu/fp8_compare.py BF16.json FP8.json [--json OUT.json]
"""

import argparse
import json
import sys


def questions(report):
    """Yields (case, question index, probabilities) of a kev bench report."""
    for case, v in report.get("probabilities", {}).items():
        for i, p in enumerate(v.get("probabilities") or []):
            yield case, i, p


def compare(bf16, fp8):
    rows = []
    for case, lb in bf16.get("latency", {}).items():
        lf = fp8.get("latency", {}).get(case)
        if lf is None:
            continue
        rows.append({"case": case, "bf16_new_ms": lb.get("new_ms"), "bf16_cached_ms": lb.get("cached_ms"),
                     "fp8_new_ms": lf.get("new_ms"), "fp8_cached_ms": lf.get("cached_ms")})
    rps = []
    conc8 = {c["clients"]: c for c in fp8.get("concurrency") or []}
    for c in bf16.get("concurrency") or []:
        f = conc8.get(c["clients"])
        if f:
            rps.append({"clients": c["clients"], "bf16_rps": c.get("rps"), "fp8_rps": f.get("rps"),
                        "bf16_p99_ms": c.get("p99_ms"), "fp8_p99_ms": f.get("p99_ms")})
    p8 = {(c, i): p for c, i, p in questions(fp8)}
    dps, flipped = [], []  # every question's max |Δp|; each flip's bf16 top-two gap
    agree = 0
    for case, i, pb in questions(bf16):
        pf = p8.get((case, i))
        if pf is None or len(pf) != len(pb):
            continue
        dps.append(max(abs(a - b) for a, b in zip(pb, pf)))
        if pb.index(max(pb)) == pf.index(max(pf)):
            agree += 1
            continue
        top = sorted(pb, reverse=True)
        flipped.append(top[0] - top[1] if len(top) > 1 else 0.0)
    med = sorted(dps)[len(dps) // 2] if dps else 0.0
    return {"latency": rows, "concurrency": rps,
            "parity": {"questions": len(dps), "argmax_agree": agree, "flips": len(flipped),
                       "flips_outside_near_ties": sum(g > 2 * med for g in flipped),
                       "max_abs_dp": max(dps, default=0.0), "median_abs_dp": med}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bf16")
    ap.add_argument("fp8")
    ap.add_argument("--json")
    a = ap.parse_args()
    with open(a.bf16) as f:
        bf16 = json.load(f)
    with open(a.fp8) as f:
        fp8 = json.load(f)
    r = compare(bf16, fp8)
    print("| case | bf16 new / cached ms | fp8 new / cached ms |")
    print("|---|---|---|")
    fmt = lambda v: "-" if v is None else f"{v:,.2f}"
    for x in r["latency"]:
        print(f"| {x['case']} | {fmt(x['bf16_new_ms'])} / {fmt(x['bf16_cached_ms'])} | "
              f"{fmt(x['fp8_new_ms'])} / {fmt(x['fp8_cached_ms'])} |")
    for x in r["concurrency"]:
        print(f"{x['clients']} clients: bf16 {fmt(x['bf16_rps'])} req/s (p99 {fmt(x['bf16_p99_ms'])} ms), "
              f"fp8 {fmt(x['fp8_rps'])} req/s (p99 {fmt(x['fp8_p99_ms'])} ms)")
    p = r["parity"]
    if p["questions"]:
        print(f"answers: {p['argmax_agree']} of {p['questions']} questions with bf16's argmax "
              f"({100 * p['argmax_agree'] / p['questions']:.1f} %); {p['flips']} flips, "
              f"{p['flips_outside_near_ties']} where bf16's top two are more than 2 × the median |dp| apart; "
              f"|dp| max {p['max_abs_dp']:.4f}, median {p['median_abs_dp']:.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0 if p["questions"] else 1


if __name__ == "__main__":
    sys.exit(main())
