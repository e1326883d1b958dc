#!/usr/bin/env python3
"""A stand-in for torch_reference.py --device cpu in scripts/cpu/test_bench.sh, where there is no torch: same flags
(refargs.py), the same output format, uniform probabilities over each question's options and made-up times
(new state 10 ms × threads-dependent factor, cached 2 ms). It writes the file after every case (then sleeps FAKE_SLEEP_S
seconds, default 0), incomplete until the end, as the real script does."""

import json
import os
import sys
import time
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
sys.path.insert(0, str(GOLDEN))

import kevref  # noqa: E402
import refargs  # noqa: E402


def dist(ms, runs):
    return {"median": ms, "p10": ms, "p90": ms, "min": ms, "max": ms, "runs": runs, "all": [ms] * runs}


def main():
    a = refargs.parse(description=__doc__)
    if a.device != "cpu":
        sys.exit("fake_torch_reference.py: --device cpu only")
    t0 = time.time()
    cases = json.loads(a.cases.read_text())["cases"]
    names = refargs.select_cases(list(cases), a.case)
    scale = 16 / max(a.threads, 1) * (0.5 if a.dtype == "bf16" else 1.0)
    doc = {"checkpoint": str(a.ckpt), "device": "cpu", "dtype": a.dtype, "cpu": "Fake CPU",
           "threads": {"intra_op": a.threads, "inter_op": a.threads, "affinity_cpus": None, "asked": a.threads},
           "versions": {"torch": "fake"}, "model": {"serving_form": "batched"}, "complete": False, "notes": [],
           "cases": []}
    for name in names:
        _, questions, _ = kevref.to_record(cases[name])
        p = [[1.0 / len(q["options"])] * len(q["options"]) for q in questions]
        doc["cases"].append({"name": name, "input_tokens": 0, "probabilities": p, "probabilities_" + a.dtype: p,
                             "latency_first_ms": 20.0 * scale, "latency_new_ms": dist(10.0 * scale, a.reps),
                             "latency_cached_ms": dist(2.0 * scale, a.reps)})
        doc["seconds"] = round(time.time() - t0, 1)
        a.out.write_text(json.dumps(doc))
        time.sleep(float(os.environ.get("FAKE_SLEEP_S", "0")))  # a slow machine: the job's limit cuts it here
    doc["complete"] = True
    a.out.write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
