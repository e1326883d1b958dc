#!/usr/bin/env python3
"""Reference values for the eval package's metrics (eval/testdata/metrics.json).

    python3 scripts/golden/eval_metrics.py OUT.json

Draws labelled probability tables (numpy, fixed seed) for a noul (2 classes), a choice (4 named options) and a score
(5 levels), rounds the probabilities to float32 (what the model returns) and renormalises them in float64, and writes
the inputs with the metrics the eval package must reproduce:

  accuracy, macro-F1, log loss, Brier   scikit-learn (accuracy_score, f1_score(average="macro"), log_loss,
                                        brier_score_loss(scale_by_half=False); the noul's Brier is twice the binary
                                        brier_score_loss, its two-class sum), when scikit-learn is installed;
  ECE and the reliability bins          numpy: scikit-learn has no ECE;
  the fitted temperature                scipy.optimize.minimize_scalar (bounded) on ln T, when scipy is installed.

Every value is also computed by the straightforward numpy implementation in this file, written independently of the
Go code; the script checks that scikit-learn and numpy agree to 1e-12 and records which one produced each value in
"computed_with". Without scikit-learn (or scipy) the numpy values are written and labelled as such.
"""
import json
import math
import sys

import numpy as np

SEED = 20261201
BINS = 10
T0 = 2.0  # the temperature the probabilities are taken to be at, for the temperature fit
FLOOR = 1e-15  # log loss floor


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def as_returned(p):
    """float32 probabilities, as the model returns them, renormalised in float64 (summed left to right)."""
    p32 = p.astype(np.float32).astype(np.float64)
    out = np.empty_like(p32)
    for i, row in enumerate(p32):
        s = 0.0
        for x in row:
            s += x
        out[i] = row / s
    return p32, out


def draw(rng):
    groups = []
    # noul: [P(false), P(true)]
    pt = rng.beta(0.7, 0.7, size=257)
    y = (rng.random(257) < np.clip(0.1 + 0.8 * pt, 0, 1)).astype(int)
    groups.append(("noul", ["false", "true"], np.stack([1 - pt, pt], axis=1), y))
    # choice: four options
    z = rng.normal(size=(301, 4)) * 2.0
    p = softmax(z)
    q = softmax(z * 0.7)
    y = np.array([rng.choice(4, p=row) for row in q])
    groups.append(("choice", ["billing", "returns", "shipping", "other"], p, y))
    # score: five levels
    z = rng.normal(size=(149, 5)) * 1.5 + np.linspace(-0.5, 0.5, 5)
    p = softmax(z)
    q = softmax(z * 1.3)
    y = np.array([rng.choice(5, p=row) for row in q])
    groups.append(("score", ["0", "1", "2", "3", "4"], p, y))
    return groups


# The numpy reference: the definitions as the eval package documents them.

def np_accuracy(p, y):
    return float(np.mean(np.argmax(p, axis=1) == y))


def np_brier(p, y):
    t = np.eye(p.shape[1])[y]
    return float(np.mean(((p - t) ** 2).sum(axis=1)))


def np_log_loss(p, y):
    return float(np.mean(-np.log(np.maximum(p[np.arange(len(y)), y], FLOOR))))


def np_macro_f1(y, pred):
    labels = sorted(set(y.tolist()) | set(pred.tolist()))
    f1 = []
    for c in labels:
        tp = int(((pred == c) & (y == c)).sum())
        fp = int(((pred == c) & (y != c)).sum())
        fn = int(((pred != c) & (y == c)).sum())
        f1.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1))


def np_bins(conf, correct):
    """Bin i holds conf in [i/10, (i+1)/10); the last bin also holds 1."""
    out = []
    for i in range(BINS):
        lo, hi = i / BINS, (i + 1) / BINS
        m = (conf >= lo) & (conf < hi) if i < BINS - 1 else (conf >= lo) & (conf <= hi)
        n = int(m.sum())
        out.append({"lo": lo, "hi": hi, "n": n,
                    "confidence": float(conf[m].mean()) if n else 0.0,
                    "accuracy": float(correct[m].mean()) if n else 0.0})
    return out


def np_ece(conf, correct):
    return float(sum(b["n"] / len(conf) * abs(b["accuracy"] - b["confidence"]) for b in np_bins(conf, correct) if b["n"]))


def at_temperature(p, t):
    """Probabilities at temperature t from probabilities at T0: softmax(ln p * T0 / t)."""
    with np.errstate(divide="ignore"):
        z = np.log(p) * (T0 / t)
    return softmax(z)


def main():
    out_path = sys.argv[1]
    rng = np.random.default_rng(SEED)
    groups = draw(rng)
    computed = {}
    try:
        import sklearn
        from sklearn.metrics import accuracy_score, brier_score_loss, f1_score, log_loss
        computed["metrics"] = f"scikit-learn {sklearn.__version__}"
    except ImportError:
        sklearn = None
        computed["metrics"] = "numpy reference in scripts/golden/eval_metrics.py (scikit-learn not installed)"
    computed["ece"] = "numpy reference in scripts/golden/eval_metrics.py (scikit-learn has no ECE)"

    cases, pooled = [], {"conf": [], "correct": [], "n": 0, "brier": 0.0, "log_loss": 0.0, "acc": 0.0}
    for typ, keys, p, y in groups:
        p32, p64 = as_returned(p)
        pred = np.argmax(p64, axis=1)
        ref = {"accuracy": np_accuracy(p64, y), "brier": np_brier(p64, y), "log_loss": np_log_loss(p64, y)}
        if typ == "choice":
            ref["macro_f1"] = np_macro_f1(y, pred)
        vals = dict(ref)
        if sklearn is not None:
            vals["accuracy"] = float(accuracy_score(y, pred))
            vals["log_loss"] = float(log_loss(y, p64, labels=list(range(len(keys)))))
            if typ == "noul":
                vals["brier"] = 2 * float(brier_score_loss(y, p64[:, 1]))
            else:
                try:
                    vals["brier"] = float(brier_score_loss(y, p64, labels=list(range(len(keys))), scale_by_half=False))
                except TypeError:  # scikit-learn < 1.7: binary Brier only
                    computed["brier_" + typ] = "numpy reference (this scikit-learn has no multiclass Brier)"
            if typ == "choice":
                vals["macro_f1"] = float(f1_score(y, pred, average="macro"))
            for k, v in vals.items():
                if abs(v - ref[k]) > 1e-12:
                    raise SystemExit(f"{typ} {k}: scikit-learn {v!r} but numpy {ref[k]!r}")
        conf = p64.max(axis=1)
        correct = (pred == y).astype(float)
        vals["ece"] = np_ece(conf, correct)
        vals["n"] = len(y)
        cases.append({"type": typ, "keys": keys, "probabilities": p32.tolist(), "expected": y.tolist(), "metrics": vals})
        pooled["conf"].extend(conf.tolist())
        pooled["correct"].extend(correct.tolist())
        pooled["n"] += len(y)
        pooled["brier"] += vals["brier"] * len(y)
        pooled["log_loss"] += vals["log_loss"] * len(y)
        pooled["acc"] += vals["accuracy"] * len(y)

    conf, correct = np.array(pooled["conf"]), np.array(pooled["correct"])
    n = pooled["n"]
    overall = {"n": n, "accuracy": pooled["acc"] / n, "brier": pooled["brier"] / n, "log_loss": pooled["log_loss"] / n,
               "ece": np_ece(conf, correct)}

    # Temperature: the T minimising the pooled mean log loss of softmax(ln p * T0 / T).
    def loss(log_t):
        t = math.exp(log_t)
        total = 0.0
        for c in cases:
            p = np.array(c["probabilities"], dtype=np.float64)
            p = p / p.sum(axis=1, keepdims=True)
            q = at_temperature(p, t)
            y = np.array(c["expected"])
            total += float(np.sum(-np.log(np.maximum(q[np.arange(len(y)), y], FLOOR))))
        return total / n

    lo, hi = math.log(T0 / 16), math.log(T0 * 16)
    try:
        from scipy.optimize import minimize_scalar
        import scipy
        r = minimize_scalar(loss, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
        fitted = math.exp(r.x)
        computed["temperature"] = f"scipy {scipy.__version__} minimize_scalar(bounded) on ln T"
    except ImportError:
        grid = np.linspace(lo, hi, 20001)
        fitted = math.exp(grid[int(np.argmin([loss(g) for g in grid]))])
        computed["temperature"] = "numpy grid of 20001 points on ln T (scipy not installed)"
    temperature = {"from": T0, "fitted": fitted, "log_loss_before": loss(math.log(T0)), "log_loss_after": loss(math.log(fitted))}

    doc = {"seed": SEED, "bins": BINS, "log_loss_floor": FLOOR, "computed_with": computed, "cases": cases,
           "overall": overall, "reliability": np_bins(conf, correct), "temperature": temperature,
           "numpy": np.__version__}
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(json.dumps({"computed_with": computed, "overall": overall, "temperature": temperature}, indent=1))


if __name__ == "__main__":
    main()
