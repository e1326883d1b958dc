#!/usr/bin/env python3
"""Tests of fp8_compare.py (python3 scripts/gpu/test_fp8_compare.py)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fp8_compare  # noqa: E402


def report(probs, new=10.0, cached=5.0, rps=100.0):
    return {"latency": {"case": {"new_ms": new, "cached_ms": cached}},
            "concurrency": [{"clients": 64, "rps": rps, "p99_ms": 20.0}],
            "probabilities": {"case": {"probabilities": probs}}}


class Compare(unittest.TestCase):
    def test_side_by_side(self):
        r = fp8_compare.compare(report([[0.9, 0.1]]), report([[0.85, 0.15]], new=6.0, rps=150.0))
        self.assertEqual(r["latency"][0]["bf16_new_ms"], 10.0)
        self.assertEqual(r["latency"][0]["fp8_new_ms"], 6.0)
        self.assertEqual(r["concurrency"][0]["fp8_rps"], 150.0)
        p = r["parity"]
        self.assertEqual((p["questions"], p["argmax_agree"], p["flips"]), (1, 1, 0))
        self.assertAlmostEqual(p["max_abs_dp"], 0.05)

    def test_flips_against_the_median_move(self):
        # Five questions FP8 moves by 0.01; a flip of a near-tie (gap 0.02 ≤ 2 × 0.01) and one of a clear answer
        # (gap 0.6, moved 0.31).
        bf16 = [[0.7, 0.3]] * 5 + [[0.51, 0.49], [0.8, 0.2]]
        fp8 = [[0.69, 0.31]] * 5 + [[0.49, 0.51], [0.49, 0.51]]
        p = fp8_compare.compare(report(bf16), report(fp8))["parity"]
        self.assertEqual((p["questions"], p["argmax_agree"], p["flips"]), (7, 5, 2))
        self.assertAlmostEqual(p["median_abs_dp"], 0.01)
        self.assertEqual(p["flips_outside_near_ties"], 1)
        self.assertAlmostEqual(p["max_abs_dp"], 0.31)

    def test_unmatched_questions_skipped(self):
        p = fp8_compare.compare(report([[0.9, 0.1], [0.5, 0.3, 0.2]]), report([[0.8, 0.2], [0.5, 0.5]]))["parity"]
        self.assertEqual(p["questions"], 1)


if __name__ == "__main__":
    unittest.main()
