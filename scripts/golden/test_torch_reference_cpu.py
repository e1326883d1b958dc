"""Checks torch_reference.py's CPU run (main_cpu) without torch: torch, transformers and the other packages are
stand-ins, and so are the model, the serving form and the requests' encodings; what runs for real is main_cpu's
own work: the case selection, the warm-ups, the timed runs and their budget, the probabilities it records and the
output file it rewrites after each case. Runs with plain python3:

    python3 scripts/golden/test_torch_reference_cpu.py
"""

import io
import json
import sys
import tempfile
import time
import types
import unittest
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kevref  # noqa: E402


def stand_ins():
    """Modules torch_reference.py imports, as stand-ins: only the CPU run's calls return real values."""
    mods = {}
    for name in ("torch", "safetensors", "tokenizers", "peft", "transformers"):
        m = mock.MagicMock(name=name)
        m.__version__ = "stand-in"
        mods[name] = m
    t = mods["torch"]
    t.get_num_threads.return_value = 4
    t.get_num_interop_threads.return_value = 4
    t.backends.mkldnn.is_available.return_value = True
    t.backends.cpu.get_cpu_capability.return_value = "AVX512"
    t.cuda.synchronize.side_effect = AssertionError("torch.cuda.synchronize on the CPU")
    mf = types.ModuleType("make_fixtures")
    mf.NOTES = []

    class Failed(Exception):
        pass

    def fail(msg):
        raise Failed(msg)

    mf.Failed = Failed
    mf.fail = fail
    mf.expect = lambda cond, msg: None if cond else fail(msg)
    mf.log = lambda msg: None
    mf.note = lambda msg: mf.NOTES.append(msg)
    mods["make_fixtures"] = mf
    mods["safetensors.torch"] = mods["safetensors"]
    return mods


MODS = stand_ins()
with mock.patch.dict(sys.modules, MODS):
    sys.modules.pop("torch_reference", None)
    import torch_reference as tr  # noqa: E402

CASES = json.loads((HERE / "bench-cases.json").read_text())["cases"]
STATE_TOKENS = {name: 31 if "short" in name else 367 if "370" in name else 2192 for name in CASES}


def fake_encode(name, i):
    """A request's encoding as load_requests gives it, with made-up token ids of the case's lengths."""
    state_text, questions, meta = kevref.to_record({"state": tr.ticket(CASES[name]["state"], i),
                                                   "questions": CASES[name]["questions"]})
    n0 = STATE_TOKENS[name] + (4 if i else 0)
    rows = []
    for q in questions:
        k = len(q["options"])
        rows.append({"ids": list(range(10 + 2 * k)), "decide": n0 + 5, "opts": [n0 + 6 + 2 * j for j in range(k)]})
    return {"state_text": state_text, "questions": questions, "meta": meta, "state_ids": list(range(n0)), "rows": rows}


def fake_load_requests(ckpt, cases_path, n_new, names=None):
    names = list(CASES) if names is None else names
    encs = {n: fake_encode(n, 0) for n in names}
    news = {n: [fake_encode(n, i) for i in range(1, n_new + 1)] for n in names}
    return {"cases": CASES}, names, encs, news, {"state": 1}, 0


def probs(enc, shift=0.0):
    """Made-up probabilities, one list per question, that depend on the request."""
    out = []
    for r in enc["rows"]:
        k = len(r["opts"])
        w = [1.0 + ((len(enc["state_ids"]) + j) % 3) + shift for j in range(k)]
        out.append([x / sum(w) for x in w])
    return out


class FakeServer:
    """The serving form's stand-in: records every request, sleeps a little per state token."""

    calls = []
    fail_at = None

    def __init__(self, tm, head, dp, temperature, pad_id):
        self.mode = "batched"
        self.hybrid = True

    def _call(self, kind, enc):
        FakeServer.calls.append((kind, enc["state_text"][:12]))
        if FakeServer.fail_at is not None and len(FakeServer.calls) >= FakeServer.fail_at:
            raise KeyboardInterrupt("cut")
        time.sleep(len(enc["state_ids"]) * 2e-6)

    def new(self, enc):
        self._call("new", enc)
        return probs(enc), ("cache", enc["state_text"])

    def cached(self, enc, cache):
        self._call("cached", enc)
        assert cache == ("cache", enc["state_text"]), "cached run on another request's cache"
        return probs(enc)

    def full(self, enc):
        self._call("full", enc)
        return probs(enc)


def fake_choose_mode(server, encs):
    p = {n: probs(e, 0.5) for n, e in encs.items()}
    return "batched", p, dict(p), {n: 1e-7 for n in encs}


class MainCPU(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = Path(self.tmp.name) / "out.json"
        FakeServer.calls, FakeServer.fail_at = [], None
        MODS["make_fixtures"].NOTES.clear()
        self.patches = [mock.patch.dict(sys.modules, MODS)] + [
            mock.patch.object(tr, name, value) for name, value in (
                ("load_requests", fake_load_requests), ("Server", FakeServer), ("choose_mode", fake_choose_mode),
                ("load_text_model", lambda base: (mock.MagicMock(), "stand-in model")),
                ("merge_lora", lambda tm, kev: {"modules": 0}),
                ("load_head", lambda kev, d: (None, 8, 1.0, {"head_dim": 8})),
                ("to_bf16", lambda tm: ({}, {"parameters": "bfloat16"})))]
        self.patches.append(mock.patch("sys.stdout", io.StringIO()))  # the scripts' tables
        for p in self.patches:
            p.start()

    def tearDown(self):
        for p in reversed(self.patches):
            p.stop()
        self.tmp.cleanup()
        tr.DEV = "cuda"

    def run_cpu(self, *flags):
        args = tr.refargs.parse(["/ckpt", "--cases", str(HERE / "bench-cases.json"), "--out", str(self.out),
                                 "--device", "cpu", *flags])
        tr.main_cpu(args)
        return json.loads(self.out.read_text())

    def test_fp32_all_cases(self):
        doc = self.run_cpu("--threads", "4")
        self.assertEqual(tr.DEV, "cpu")
        MODS["torch"].set_num_threads.assert_called_with(4)
        MODS["torch"].set_num_interop_threads.assert_called_with(4)
        self.assertEqual((doc["device"], doc["dtype"], doc["complete"]), ("cpu", "fp32", True))
        self.assertEqual(doc["threads"]["intra_op"], 4)
        self.assertEqual([c["name"] for c in doc["cases"]], list(CASES))
        # checked against full rows: the states of at most 512 tokens (three of the four cases)
        self.assertEqual(doc["model"]["serving_form_checked_on"], list(CASES)[:3])
        for c in doc["cases"]:
            enc = fake_encode(c["name"], 0)
            self.assertEqual(c["probabilities"], probs(enc))
            self.assertEqual(c["probabilities_fp32"], probs(enc))
            self.assertEqual(c["latency_new_ms"]["runs"], 5)
            self.assertEqual(c["latency_cached_ms"]["runs"], 5)
            self.assertGreater(c["latency_first_ms"], 0)
            self.assertTrue(c["new_state_example"]["state_text"].startswith("Ticket 1. "))
            self.assertEqual(c["new_state_example"]["probabilities"], probs(fake_encode(c["name"], 1)))
            self.assertEqual(c["checks"]["cached_again_vs_fresh_max_abs_dp"], 0.0)
            self.assertEqual(c["checks"]["fp32_cached_vs_full_rows_max_abs_dp"],
                             None if STATE_TOKENS[c["name"]] > 512 else 1e-7)
            self.assertEqual(c["input_tokens"], len(enc["state_ids"]) + sum(len(r["ids"]) for r in enc["rows"]))
            json.loads(c["answers"])
        # per case: the own state (the new-state warm-up), 1 cached warm-up, tickets 1..5, 5 cached runs
        calls = [k for k, _ in FakeServer.calls]
        self.assertEqual(calls, (["new", "cached"] + ["new"] * 5 + ["cached"] * 5) * 4)
        own = CASES[list(CASES)[0]]["state"][:12]
        self.assertEqual([s for _, s in FakeServer.calls[:12]],
                         [own, own] + [f"Ticket {i}. " + own[:2] for i in range(1, 6)] + [own] * 5)

    def test_bf16_warmups_and_selection(self):
        doc = self.run_cpu("--dtype", "bf16", "--case", "4", "--case", "2", "--runs", "3", "--warmup", "2",
                           "--check-max-tokens", "100")
        self.assertEqual(doc["dtype"], "bf16")
        self.assertEqual(doc["model"]["bf16"], {"parameters": "bfloat16"})
        names = list(CASES)
        self.assertEqual([c["name"] for c in doc["cases"]], [names[1], names[3]])
        short, long = doc["cases"]
        self.assertEqual(short["probabilities_bf16"], probs(fake_encode(names[1], 0)))
        # fp32 from the check, on the case it ran on, against this run's bf16
        self.assertEqual(short["probabilities_fp32"], probs(fake_encode(names[1], 0), 0.5))
        self.assertGreater(short["max_abs_dp_bf16_vs_fp32"], 0)
        self.assertNotIn("probabilities_fp32", long)
        self.assertEqual(short["latency_new_ms"]["runs"], 3)
        # warm-up 2: the own state and ticket 1 untimed, 2 cached untimed; tickets 2..4 and 3 cached runs timed
        own = CASES[names[1]]["state"][:12]
        self.assertEqual(FakeServer.calls[:10], [("new", own), ("new", "Ticket 1. " + own[:2])] + [("cached", own)] * 2 +
                         [("new", f"Ticket {i}. " + own[:2]) for i in (2, 3, 4)] + [("cached", own)] * 3)
        self.assertTrue(short["new_state_example"]["state_text"].startswith("Ticket 1. "))

    def test_budget_shrinks_runs(self):
        with mock.patch.object(FakeServer, "_call", lambda self, kind, enc: time.sleep(0.05)):
            doc = self.run_cpu("--budget-s", "6", "--runs", "5")
        runs = [c["latency_new_ms"]["runs"] for c in doc["cases"]]
        self.assertTrue(all(1 <= r <= 5 for r in runs) and min(runs) < 5, runs)
        self.assertTrue(any("timed runs of each kind, not 5 (time budget" in n for n in doc["notes"]), doc["notes"])

    def test_cut_leaves_finished_cases(self):
        # the 15th request: the second case's (12 a case) third, its first timed new state
        FakeServer.fail_at = 15
        with self.assertRaises(KeyboardInterrupt):
            self.run_cpu()
        doc = json.loads(self.out.read_text())
        self.assertFalse(doc["complete"])
        first, second = doc["cases"]
        self.assertEqual(first["latency_new_ms"]["runs"], 5)
        self.assertIsNone(second["latency_new_ms"])
        self.assertGreater(second["latency_first_ms"], 0)
        self.assertEqual(second["probabilities"], probs(fake_encode(second["name"], 0)))

    def test_unknown_case(self):
        with self.assertRaises(SystemExit), mock.patch("sys.stderr"):
            tr.refargs.parse(["/ckpt", "--cases", "c", "--out", "o", "--case", "1"])  # cuda: refused
        with self.assertRaises(MODS["make_fixtures"].Failed) as cm:
            self.run_cpu("--case", "9")
        self.assertIn("'9'", str(cm.exception))

    def test_main_dispatches_on_device(self):
        with mock.patch.object(tr, "main_cpu") as m, mock.patch.object(sys, "argv", [
                "torch_reference.py", "/ckpt", "--cases", "c.json", "--out", "o.json", "--device", "cpu"]):
            tr.main()
        m.assert_called_once()
        self.assertEqual(m.call_args.args[0].dtype, "fp32")


class MainCUDA(MainCPU):
    """The CUDA run's flow, after the refactoring that made room for the CPU run (no GPU here: CUDA calls are
    stand-ins too)."""

    def test_cuda_main(self):
        t = MODS["torch"]
        t.cuda.synchronize.side_effect = None
        t.cuda.get_device_name.return_value = "Stand-in GPU"
        t.cuda.max_memory_allocated.return_value = 2e9
        t.version.cuda = "13.0"
        t.backends.cudnn.version.return_value = 91900
        try:
            with mock.patch.object(sys, "argv", ["torch_reference.py", "/ckpt", "--cases", str(HERE / "bench-cases.json"),
                                                 "--out", str(self.out), "--reps", "4", "--warmup", "2"]):
                tr.main()
        finally:
            t.cuda.synchronize.side_effect = AssertionError("torch.cuda.synchronize on the CPU")
        self.assertEqual(tr.DEV, "cuda")
        doc = json.loads(self.out.read_text())
        self.assertEqual((doc["gpu"], doc["model"]["peak_gpu_memory_gb_bf16"]), ("Stand-in GPU", 2.0))
        self.assertEqual([c["name"] for c in doc["cases"]], list(CASES))
        for c in doc["cases"]:
            enc = fake_encode(c["name"], 0)
            self.assertEqual(c["probabilities_bf16"], probs(enc))
            self.assertEqual(c["probabilities_fp32"], probs(enc, 0.5))
            self.assertEqual(c["latency_new_ms"]["runs"], 4)
            self.assertEqual(c["latency_cached_ms"]["runs"], 4)
            self.assertTrue(c["new_state_example"]["state_text"].startswith("Ticket 1. "))
        # per case: 2 warm-up tickets, the own state, 2 cached warm-ups, tickets 3..6, 4 cached runs
        per_case = [k for k, _ in FakeServer.calls if k != "full"]
        self.assertEqual(per_case[4:4 + 13], ["new"] * 3 + ["cached"] * 2 + ["new"] * 4 + ["cached"] * 4)

    test_fp32_all_cases = test_bf16_warmups_and_selection = test_budget_shrinks_runs = None
    test_cut_leaves_finished_cases = test_unknown_case = test_main_dispatches_on_device = None


if __name__ == "__main__":
    unittest.main()
