"""Writes vectors.json: outputs of CPython's random.Random (MT19937) for the Go port to match.

Run from this directory: python3 testdata/gen_vectors.py > testdata/vectors.json
Each case seeds a fresh random.Random(seed) and records, in this order on one stream: eight getrandbits(32),
getrandbits(k) for k in (1, 7, 31, 33, 64, 100) as decimal strings, _randbelow(n) for several n, random(), and
then shuffles of range(n) for several n; "permute" records Kev's permute orders (a fresh copy of the keys each
run, shuffled for runs after the first, the stream continuing)."""
import json, random, sys

SEEDS = [0, 1, 42, 2**40, -5, 2**32 - 1, 2**32, 2**70 + 12345, -(2**63)]


def case(seed):
    r = random.Random(seed)
    out = {"seed": str(seed)}
    out["u32"] = [r.getrandbits(32) for _ in range(8)]
    out["bits"] = [[k, str(r.getrandbits(k))] for k in (1, 7, 31, 33, 64, 100)]
    out["below"] = [[n, r._randbelow(n)] for n in (1, 2, 3, 5, 6, 7, 64, 255, 1000, 2**31, 2**32 + 1)]
    out["random"] = [r.random() for _ in range(3)]
    shuffles = []
    for n in (0, 1, 2, 3, 6, 10, 255):
        x = list(range(n))
        r.shuffle(x)
        shuffles.append(x)
    out["shuffles"] = shuffles
    keys = ["returns", "shipping", "billing", "other"]
    p = random.Random(seed)
    runs = []
    for i in range(8):
        order = list(keys)
        if i > 0:
            p.shuffle(order)
        runs.append(order)
    out["permute"] = {"keys": keys, "runs": runs}
    return out


json.dump({"python": sys.version.split()[0], "cases": [case(s) for s in SEEDS]}, sys.stdout, indent=1)
sys.stdout.write("\n")
