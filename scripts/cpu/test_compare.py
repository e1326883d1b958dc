"""Checks compare.py on synthetic kev bench and torch_reference.py files. Runs with plain python3 (no torch needed):

    python3 scripts/cpu/test_compare.py
"""

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare  # noqa: E402

SHORT, LONG = "2 questions, short state", "5 questions, 2,200-token state"


def kev_doc(cases, dtype="float32", interrupted=False):
    """A kev bench report: cases maps name -> (new_ms, cached_ms, probabilities)."""
    lat, probs = {}, {}
    for name, (new, cached, p) in cases.items():
        lat[name] = {"tokens": 100, "state_tokens": 60, "new_ms": new, "cached_ms": cached,
                     "new": {"runs": 5, "model_ms": {"median": new, "p10": new * 0.9, "p90": new * 1.1}},
                     "cached": {"runs": 5, "model_ms": {"median": cached, "p10": cached * 0.9, "p90": cached * 1.2}}}
        probs[name] = {"probabilities": p}
    return {"command": "kev bench", "device": "cpu", "dtype": dtype, "gomaxprocs": 16,
            "host_cpu": {"model": "Test CPU", "features": ["avx512f"], "kernel": None},
            "latency": lat, "probabilities": probs, "interrupted": interrupted, "seconds": 12.5}


def torch_doc(cases, dtype="fp32", complete=True):
    out = []
    for name, (new, cached, p) in cases.items():
        out.append({"name": name, "input_tokens": 100, "probabilities": p,
                    "latency_new_ms": {"median": new, "p10": new - 1, "p90": new + 1, "runs": 5},
                    "latency_cached_ms": {"median": cached, "p10": cached - 1, "p90": cached + 1, "runs": 5}})
    return {"device": "cpu", "dtype": dtype, "cpu": "Test CPU", "complete": complete, "seconds": 99.0,
            "versions": {"torch": "2.11"}, "model": {"serving_form": "batched"}, "cases": out}


P = [[0.7, 0.3], [0.1, 0.5, 0.4]]


def shifted(p, d):
    return [[x + d for x in q] for q in p]


class Compare(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = Path(self.tmp.name)
        self.later = self.dir / "later"
        self.later.mkdir()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, doc, where=None):
        path = (where or self.dir) / name
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))

    def run_compare(self):
        return compare.compare([self.dir, self.later])

    def test_full(self):
        flipped = [[0.3, 0.7], [0.1, 0.5, 0.4]]  # question 1's argmax moves: one flip, |dp| 0.4
        self.write("torch-fp32-16.json", torch_doc({SHORT: (200.0, 20.0, P), LONG: (3000.0, 40.0, P)}))
        self.write("kev-fp32-16.json", kev_doc({SHORT: (100.0, 40.0, shifted(P, 1e-4)), LONG: (1500.0, 10.0, P)}))
        self.write("torch-bf16-16.json", torch_doc({SHORT: (50.0, 5.0, shifted(P, 0.01))}, "bf16", complete=False))
        self.write("kev-bf16-16.json", kev_doc({SHORT: (25.0, 10.0, flipped)}, "bfloat16"))
        self.write("torch-fp32-4.json", torch_doc({SHORT: (800.0, 80.0, P)}))
        r = self.run_compare()
        self.assertEqual(r["cases"], [SHORT, LONG])
        self.assertEqual(r["threads"], [16, 4])
        rows = {(x["case"], x["threads"], x["engine"], x["dtype"]): x for x in r["rows"]}
        self.assertEqual(len(rows), 7)
        k32 = rows[(SHORT, 16, "kev", "fp32")]
        self.assertEqual((k32["new_ms"], k32["cached_ms"], k32["runs"]), (100.0, 40.0, 5))
        self.assertAlmostEqual(k32["dp_vs_torch_fp32"], 1e-4, places=9)
        self.assertEqual(k32["flips_vs_torch_fp32"], 0)
        self.assertIsNone(k32["dp_vs_kev_fp32"])
        k16 = rows[(SHORT, 16, "kev", "bf16")]
        self.assertAlmostEqual(k16["dp_vs_kev_fp32"], 0.4001, places=9)
        self.assertEqual(k16["flips_vs_kev_fp32"], 1)
        self.assertAlmostEqual(k16["dp_vs_torch_bf16"], 0.41, places=9)
        t16 = rows[(SHORT, 16, "torch", "bf16")]
        self.assertAlmostEqual(t16["dp_vs_torch_fp32"], 0.01, places=9)
        self.assertEqual(t16["flips_vs_torch_fp32"], 0)
        self.assertIsNone(rows[(SHORT, 4, "torch", "fp32")]["dp_vs_torch_fp32"])
        self.assertNotIn((SHORT, 4, "kev", "fp32"), rows)

        sp = {(x["case"], x["threads"], x["dtype"]): x for x in r["speedups"]}
        self.assertEqual(sp[(SHORT, 16, "fp32")]["new"], 2.0)
        self.assertEqual(sp[(SHORT, 16, "fp32")]["cached"], 0.5)
        self.assertEqual(sp[(LONG, 16, "fp32")]["cached"], 4.0)
        self.assertEqual(sp[(SHORT, 16, "bf16")]["new"], 2.0)
        self.assertEqual(len(sp), 3)

        par = r["parity"]
        self.assertEqual(par["kev_fp32_vs_torch_fp32"]["questions"], 4)
        self.assertEqual(par["kev_fp32_vs_torch_fp32"]["argmax_flips"], 0)
        self.assertEqual(par["kev_bf16_vs_kev_fp32"]["argmax_flips"], 1)
        self.assertFalse(r["files"]["torch-bf16-16"]["complete"])
        self.assertTrue(r["files"]["kev-fp32-16"]["complete"])

        md = compare.markdown(r)
        self.assertIn("| 2 questions, short state | 16 | 200.0 | 100.0 | 2.00× | 50.0 | 25.0 | 2.00× | 5 |", md)
        self.assertIn("| 2 questions, short state | 4 | 800.0 | - | - | - | - | - | 5 |", md)
        self.assertIn("| 5 questions, 2,200-token state | 16 | 40.0 | 10.0 | 4.00× | - | - | - | 5 |", md)
        self.assertIn("| 2 questions, short state | 16 | 1.00e-04 / 0 | 4.00e-01 / 1 | 4.10e-01 / 1 | 1.00e-02 / 0 |", md)
        self.assertIn("torch-bf16-16 (partial)", md)
        self.assertIn("CPU: Test CPU.", md)
        self.assertIn("torch 2.11 (CPU capability -), transformers -, serving form batched.", md)
        self.assertIn("CPU features avx512f, kernel -.", md)

    def test_later_folder_wins_and_bad_files(self):
        self.write("kev-fp32-4.json", kev_doc({SHORT: (10.0, 1.0, P)}))
        self.write("kev-fp32-4.json", kev_doc({SHORT: (20.0, 2.0, P)}), self.later)
        self.write("torch-fp32-4.json", "{not json")
        self.write("torch-bf16-4.json", "[1, 2]")
        self.write("notes.json", kev_doc({SHORT: (1.0, 1.0, P)}))  # not a job's file: ignored
        self.write("kev-fp16-4.json", kev_doc({SHORT: (1.0, 1.0, P)}))
        r = self.run_compare()
        self.assertEqual([(x["engine"], x["new_ms"]) for x in r["rows"]], [("kev", 20.0)])
        self.assertEqual(sorted(r["files"]), ["kev-fp32-4", "torch-bf16-4", "torch-fp32-4"])
        self.assertIn("not a JSON object", r["files"]["torch-bf16-4"]["error"])
        self.assertIsNotNone(r["files"]["torch-fp32-4"]["error"])
        self.assertIsNone(r["rows"][0]["dp_vs_torch_fp32"])
        self.assertEqual(r["speedups"], [])

    def test_shapes_and_nulls(self):
        self.write("torch-fp32-16.json", torch_doc({SHORT: (10.0, 1.0, P)}))
        self.write("kev-fp32-16.json", kev_doc({SHORT: (10.0, 1.0, [[0.7, None], [0.1, 0.5, 0.4]])}))
        self.write("kev-bf16-16.json", kev_doc({SHORT: (10.0, 1.0, [[0.7, 0.3]])}, "bfloat16"))
        self.write("kev-fp32-4.json", kev_doc({SHORT: (10.0, 1.0, P)}, interrupted=True))
        r = self.run_compare()
        rows = {(x["threads"], x["engine"], x["dtype"]): x for x in r["rows"]}
        self.assertEqual(rows[(16, "kev", "fp32")]["dp_vs_torch_fp32"], float("inf"))
        self.assertIsNone(rows[(16, "kev", "bf16")]["dp_vs_kev_fp32"])  # 1 question against 2
        self.assertFalse(r["files"]["kev-fp32-4"]["complete"])
        self.assertIn("inf / 0", compare.markdown(r))

    def test_command_writes_valid_json(self):
        self.write("kev-fp32-16.json", kev_doc({SHORT: (10.0, 1.0, [[None, 1.0]])}))
        self.write("torch-fp32-16.json", torch_doc({SHORT: (10.0, 1.0, [[0.5, 0.5]])}))
        js, md = self.dir / "c.json", self.dir / "c.md"
        p = subprocess.run([sys.executable, str(HERE / "compare.py"), "--dir", str(self.dir), "--dir",
                            str(self.dir / "absent"), "--json", str(js), "--md", str(md)], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(js.read_text())
        kev = [x for x in doc["rows"] if x["engine"] == "kev"]
        self.assertEqual(kev[0]["dp_vs_torch_fp32"], "inf")
        self.assertEqual(md.read_text(), p.stdout)

    def test_first_request_only(self):
        # kev cut during the long case: its first request and probabilities are there, no timed runs.
        doc = kev_doc({SHORT: (10.0, 1.0, P)}, interrupted=True)
        doc["latency"][LONG] = {"tokens": 2400, "state_tokens": 2300, "first_ms": 22888.0, "first_hit": False}
        doc["probabilities"][LONG] = {"probabilities": P}
        self.write("kev-fp32-16.json", doc)
        t = torch_doc({SHORT: (20.0, 2.0, P), LONG: (6000.0, 900.0, P)})
        t["cases"][1]["latency_first_ms"] = 7000.0
        self.write("torch-fp32-16.json", t)
        r = self.run_compare()
        rows = {(x["case"], x["engine"]): x for x in r["rows"]}
        self.assertEqual((rows[(LONG, "kev")]["new_ms"], rows[(LONG, "kev")]["first_ms"]), (None, 22888.0))
        self.assertEqual(rows[(LONG, "torch")]["first_ms"], 7000.0)
        self.assertEqual(rows[(LONG, "kev")]["dp_vs_torch_fp32"], 0.0)
        md = compare.markdown(r)
        self.assertIn("| 5 questions, 2,200-token state | 16 | 6000.0 | (22888.0) | - | - | - | - | 5 |", md)
        self.assertIn("(x): the case's first request only", md)
        self.assertIn("kev-fp32-16 (partial)", md)

    def test_runs_differ(self):
        # kev cut during the cached runs of a case: 5 new runs, 2 cached
        doc = kev_doc({SHORT: (10.0, 1.0, P)}, interrupted=True)
        doc["latency"][SHORT]["cached"]["runs"] = 2
        self.write("kev-fp32-16.json", doc)
        self.write("torch-fp32-16.json", torch_doc({SHORT: (20.0, 2.0, P)}))
        r = self.run_compare()
        rows = {x["engine"]: x for x in r["rows"]}
        self.assertEqual((rows["kev"]["runs"], rows["kev"]["cached_runs"]), (5, 2))
        md = compare.markdown(r)
        self.assertIn("| 2 questions, short state | 16 | 20.0 | 10.0 | 2.00× | - | - | - | 5 |", md)
        self.assertIn("| 2 questions, short state | 16 | 2.0 | 1.0 | 2.00× | - | - | - | 5/2/-/- |", md)

    def test_empty(self):
        r = self.run_compare()
        self.assertEqual((r["rows"], r["speedups"], r["cases"]), ([], [], []))
        self.assertIn("No results yet.", compare.markdown(r))


if __name__ == "__main__":
    unittest.main()
