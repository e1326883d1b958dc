"""Writes semantics.json: Kev's rendering, date facts and answers as CPython computes them, from the rules in Kev's
API (rendering and answers, jaredpalmer/kev), for the Go tests to match byte for byte. Run here: python3 gen_semantics.py
(CPython 3.11+; sum() is written out as 3.12's compensated sum, which Kev's Python 3.12/3.13 uses)."""
import json, random, re, struct
from datetime import datetime

rng = random.Random(7)


def render(v, indent=0):
    pad = "  " * indent
    if v is None: return ""
    if isinstance(v, (str, int, float, bool)): return str(v)
    if isinstance(v, list): return "\n".join(f"{pad}- {render(x, indent + 1).lstrip()}" for x in v)
    return "\n".join(f"{pad}{k}:\n{render(x, indent + 1)}" if isinstance(x, (dict, list)) else f"{pad}{k}: {render(x)}"
                     for k, x in v.items())


WORDS = ["a", "b c", "  lead", "\n\nnl", "\u3000ideo", "\u00a0nbsp", "\x1ffs", "\u200bzw", "tab\t", "", "é", "日本",
         "x: y", "- z", "line1\nline2"]


def rand_value(depth=0):
    r = rng.random()
    if depth > 3 or r < 0.45:
        return rng.choice([
            lambda: rng.choice(WORDS), lambda: rng.randint(-10**30, 10**30), lambda: rng.randint(-5, 5),
            lambda: rng.choice([0.1, 1.0, 1e16, 1.5e-5, -0.0, 123456789012345678.0, 2.5, 1e22, 0.0001]),
            lambda: struct.unpack("<f", struct.pack("<f", rng.random()))[0], lambda: rng.random() * 10 ** rng.randint(-8, 20),
            lambda: rng.choice([True, False]), lambda: None])()
    if r < 0.7:
        return [rand_value(depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "name", "é", "a b", "", "x"]) + str(i): rand_value(depth + 1) for i in range(rng.randint(0, 3))}


renders = [[v, render(v)] for v in [rand_value() for _ in range(400)]]

MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
DATE = re.compile(rf"\b(?:{MONTHS}) \d{{1,2}}, \d{{4}}\b|\b\d{{4}}-\d{{2}}-\d{{2}}\b")


def date_facts(text):
    found = []
    for m in DATE.finditer(text):
        raw = m.group(0)
        try: d = datetime.strptime(raw, "%B %d, %Y") if "," in raw else datetime.strptime(raw, "%Y-%m-%d")
        except ValueError: continue
        if raw not in [r for r, _ in found]: found.append((raw, d))
    out = []
    for i in range(len(found)):
        for j in range(i + 1, len(found)):
            n = (found[j][1] - found[i][1]).days
            if n: out.append(f"{found[j][0]} is {abs(n)} day{'s' if abs(n) != 1 else ''} {'after' if n > 0 else 'before'} {found[i][0]}.")
            else: out.append(f"{found[j][0]} is the same day as {found[i][0]}.")
    return " ".join(out)


texts = ["Due July 4, 2026. Received June 26, 2026. Shipped 2026-07-01.", "one date: May 1, 2026",
         "February 30, 2026 and March 1, 2026 and 2026-02-28", "July 4, 2026 and 2026-07-04 and July 4, 2026",
         "xJuly 4, 2026 July 5, 20261 12026-07-01 2026-07-011 _2026-07-02 2026-07-03_ 2026-07-04.",
         "July 04, 2026; July 4, 2026; July 40, 2026; July 00, 2026; 0000-01-01; 9999-12-31; 0001-01-01",
         "june 1, 2026 June 1,2026 June  1, 2026 June 1, 2026é June 1, 2026 é2026-01-01 2026-13-01 2026-12-32",
         "2024-02-29 2023-02-29 December 31, 1999 January 1, 2000 May 9, 2026May 10, 2026",
         "Mayday May 3, 2026 Marchy 4, 2026 March 5, 2026", "2026-01-01 2026-01-02 2025-12-31 2026-01-01"]
for _ in range(60):
    parts = []
    for _ in range(rng.randint(0, 6)):
        if rng.random() < 0.5:
            parts.append(f"{rng.choice(MONTHS.split('|'))} {rng.randint(0, 35)}, {rng.randint(1990, 2030)}")
        else:
            parts.append(f"{rng.randint(1990, 2030)}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}")
        parts.append(rng.choice([" ", ", ", ". ", "x", "_", "-", "\n", "é"]))
    texts.append("".join(parts))
dates = [[t, date_facts(t)] for t in texts]


def pysum(xs):
    """CPython 3.12's sum() of floats: Neumaier compensation, added at the end when non-zero and finite."""
    s = c = 0.0
    for x in xs:
        t = s + x
        c += (s - t) + x if abs(s) >= abs(x) else (x - t) + s
        s = t
    if c and c == c and abs(c) != float("inf"): s += c
    return s


def normalize(p):
    t = pysum(p)
    return [1 / len(p)] * len(p) if t == 0 else [x / t for x in p]


def choice_confidence(p):
    K = len(p)
    return 1.0 if K == 1 else (max(normalize(p)) - 1 / K) / (1 - 1 / K)


def score_confidence(p):
    L = len(p)
    if L == 1: return 1.0
    p = normalize(p); mode = max(range(L), key=p.__getitem__)
    D = pysum([abs(i - (L - 1) / 2) for i in range(L)]) / L
    return max(0.0, 1.0 - pysum([pi * abs(i - mode) for i, pi in enumerate(p)]) / D)


def f32(x): return struct.unpack("<f", struct.pack("<f", x))[0]


answers = []
for _ in range(300):
    t = rng.choice(["noul", "choice", "score"])
    k = 2 if t == "noul" else rng.choice([1, 2, 3, 4, 5, 7, 12, 40, 255])
    w = [rng.random() ** rng.choice([1, 3, 8]) for _ in range(k)]
    if rng.random() < 0.1: w = [1.0] * k
    s = sum(w)
    p = [f32(x / s) for x in w]
    keys = ["false", "true"] if t == "noul" else [str(i) for i in range(k)] if t == "score" else [f"opt{i}é" for i in range(k)]
    if t == "noul":
        a = {"type": "noul", "noul": round(p[1], 4)}
    elif t == "choice":
        a = {"type": "choice", "choice": keys[max(range(k), key=lambda i: p[i])], "confidence": round(choice_confidence(p), 4),
             "probabilities": {kk: round(v, 4) for kk, v in zip(keys, p)}}
    else:
        legend = {str(i): f"level {i} ✓" for i in range(k)}
        a = {"type": "score", "score": round(pysum([i * pi for i, pi in enumerate(p)]), 4), "legend": legend,
             "probabilities": {str(i): round(v, 4) for i, v in enumerate(p)}, "confidence": round(score_confidence(p), 4)}
    answers.append({"type": t, "probs": p, "keys": keys, "compact": json.dumps(a, ensure_ascii=False, separators=(",", ":")),
                    "dumps": json.dumps(a)})

json.dump({"render": renders, "date_facts": dates, "answers": answers}, open("semantics.json", "w"), ensure_ascii=True)
