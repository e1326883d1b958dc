#!/usr/bin/env python3
"""A labelled request set for comparing two weight types of one checkpoint (kev eval -dtype fp8 -compare bf16):
support tickets of 10 to 400 words built from a fixed vocabulary, each asked one to six questions of every type
(noul; choice of 2 to 8 options; score of 3 to 5 levels), with expected answers drawn at random. On a random
checkpoint the accuracy means nothing; what the set measures is how far the two runs' answers are apart, over many
more questions than Kev's serving cases hold. The same seed gives the same file, byte for byte.

    python3 scripts/gpu/make_eval_set.py [-n 400] [--seed 1] > set.jsonl
"""

import argparse
import json
import random

WORDS = """order charge card refund delivery package late wrong size shoes jacket account password login email
invoice payment twice cancel subscription upgrade plan store pickup courier tracking number lost damaged box
return label exchange warranty repair screen battery charger cable support agent waited hours phone chat reply
please urgent today tomorrow week month again still nothing happened thanks angry happy confused address
street city code discount coupon price bill bank transfer declined pending approved shipped arrived missing
item color blue black small large medium fits broken working stopped error message app website checkout cart
""".split()

TEAMS = {"billing": "Charges, invoices, payment problems", "shipping": "Delivery status, delays, lost packages",
         "returns": "Exchanges, refunds, wrong or damaged items", "accounts": "Logins, passwords, profile changes",
         "sales": "Plans, upgrades, prices", "tech": "Apps, devices and errors", "stores": "Pickup and shops",
         "other": "Anything else"}
LEVELS = ["none", "low", "medium", "high", "critical"]


def ticket(rng, i):
    n = rng.choice([10, 25, 60, 120, 250, 400])
    words = [rng.choice(WORDS) for _ in range(n)]
    return f"Ticket {i}. " + " ".join(words).capitalize() + "."


def questions(rng):
    qs, expected = {}, {}
    for j in range(rng.randint(1, 6)):
        kind = rng.choice(["noul", "choice", "score"])
        qid = f"q{j}"
        if kind == "noul":
            qs[qid] = {"type": "noul", "instructions": rng.choice(["Is the customer asking about a charge?",
                                                                     "Does the customer want a refund?",
                                                                     "Is the customer angry?",
                                                                     "Did the package arrive?"])}
            expected[qid] = rng.random() < 0.5
        elif kind == "choice":
            keys = rng.sample(sorted(TEAMS), rng.randint(2, len(TEAMS)))
            qs[qid] = {"type": "choice", "instructions": "Which team should handle this?",
                       "criteria": {k: TEAMS[k] for k in keys}}
            expected[qid] = rng.choice(keys)
        else:
            levels = LEVELS[:rng.randint(3, 5)]
            qs[qid] = {"type": "score", "instructions": "How urgent is this?", "criteria": levels}
            expected[qid] = rng.randrange(len(levels))
    return qs, expected


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=400, help="requests (lines)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for i in range(a.n):
        qs, expected = questions(rng)
        print(json.dumps({"state": ticket(rng, i + 1), "questions": qs, "expected": expected}))


if __name__ == "__main__":
    main()
