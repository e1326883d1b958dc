"""Checks torch_reference.py's command line (refargs.py). Runs with plain python3 (no torch needed):

    python3 scripts/golden/test_refargs.py
"""

import contextlib
import io
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import refargs  # noqa: E402

BASE = ["/tmp/ckpt", "--cases", "cases.json", "--out", "out.json"]


def parse(*extra):
    return refargs.parse(BASE + list(extra))


def refused(*extra):
    """The message argparse exits with (status 2) for these flags, or None when they are accepted."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parse(*extra)
        except SystemExit as e:
            if e.code != 2:
                raise AssertionError(f"exit status {e.code}, want 2")
            return err.getvalue()
    return None


class CUDADefaults(unittest.TestCase):
    def test_unchanged(self):
        a = parse()
        self.assertEqual((a.device, a.reps, a.warmup, a.budget_s, a.dtype, a.threads, a.case),
                         ("cuda", 20, 3, 330.0, None, 0, []))
        self.assertEqual(a.ckpt, Path("/tmp/ckpt"))
        self.assertEqual(a.out, Path("out.json"))

    def test_budget_and_reps(self):
        a = parse("--budget-s", "200", "--reps", "7", "--warmup", "2")
        self.assertEqual((a.budget_s, a.reps, a.warmup), (200.0, 7, 2))

    def test_cpu_flags_refused(self):
        for flags in (["--dtype", "bf16"], ["--threads", "4"], ["--case", "1"], ["--check-max-tokens", "9"]):
            msg = refused(*flags)
            self.assertIsNotNone(msg, flags)
            self.assertIn(flags[0], msg)
            self.assertIn("--device cpu only", msg)


class CPU(unittest.TestCase):
    def test_defaults(self):
        a = parse("--device", "cpu")
        self.assertEqual((a.dtype, a.reps, a.warmup, a.threads, a.check_max_tokens), ("fp32", 5, 1, 0, 512))

    def test_flags(self):
        a = parse("--device", "cpu", "--dtype", "bf16", "--threads", "4", "--runs", "3", "--warmup", "0",
                  "--case", "2", "--case", "long", "--check-max-tokens", "0")
        self.assertEqual((a.dtype, a.threads, a.reps, a.warmup, a.case, a.check_max_tokens),
                         ("bf16", 4, 3, 0, ["2", "long"], 0))

    def test_bad(self):
        for flags, word in ((["--dtype", "fp16"], "invalid choice"), (["--threads", "-1"], "--threads -1"),
                            (["--runs", "0"], "--reps 0"), (["--warmup", "-1"], "--warmup -1"),
                            (["--budget-s", "0"], "--budget-s 0"), (["--check-max-tokens", "-3"], "-3"),
                            (["--device", "tpu"], "invalid choice")):
            msg = refused("--device", "cpu", *flags) if flags[0] != "--device" else refused(*flags)
            self.assertIsNotNone(msg, flags)
            self.assertIn(word, msg)


class SelectCases(unittest.TestCase):
    NAMES = ["2 questions, short state", "6 questions, short state", "5 questions, 370-token state",
             "5 questions, 2,200-token state"]

    def test_all(self):
        self.assertEqual(refargs.select_cases(self.NAMES, []), self.NAMES)

    def test_names_and_indices_in_file_order(self):
        got = refargs.select_cases(self.NAMES, ["4", "2 questions, short state", "4"])
        self.assertEqual(got, [self.NAMES[0], self.NAMES[3]])

    def test_unknown(self):
        for w in ("0", "5", "long", "-1"):
            with self.assertRaises(refargs.ArgError) as cm:
                refargs.select_cases(self.NAMES, [w])
            self.assertIn(repr(w), str(cm.exception))


if __name__ == "__main__":
    unittest.main()
