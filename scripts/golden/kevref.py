"""Kev's serving path in plain Python, written from Kev's public source (jaredpalmer/kev: rendering, encoding, answers).

Everything here is independent of torch: a System One request becomes an internal record (render, option
texts, keys, legend), the record becomes token rows (delimiters, escaping), and a question's probabilities
become Kev's answer object. make_fixtures.py feeds the rows through the PyTorch reference model and uses the
functions below for everything around it, so the Go port can be checked against the same texts, ids and
answers.

A tokenizer is passed in as a function from text to ids (add_special_tokens=False semantics).
"""

import json
import re

# Roles of the five reused Qwen special tokens. Ids are looked up by string.
DELIMITERS = {
    "state": "<|fim_prefix|>",
    "q": "<|fim_middle|>",
    "opt": "<|box_start|>",
    "/opt": "<|box_end|>",
    "decide": "<|fim_suffix|>",
}

_NAMED_TOKEN = re.compile(r"<\|([A-Za-z0-9_]+)\|>")
_BROKEN_BAR = "\u00a6"


def escape(text):
    """Rewrites every <|name|> (name: ASCII letters, digits, underscores) to <¦name¦>."""
    return _NAMED_TOKEN.sub(lambda m: "<" + _BROKEN_BAR + m.group(1) + _BROKEN_BAR + ">", text)


def render(value, indent=0):
    """JSON content as Kev's labelled text."""
    pad = "  " * indent
    if value is None:
        return ""
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)):
                lines.append(pad + key + ":\n" + render(item, indent + 1))
            else:
                lines.append(pad + key + ": " + render(item))
        return "\n".join(lines)
    if isinstance(value, list):
        return "\n".join(pad + "- " + render(item, indent + 1).lstrip() for item in value)
    # str, bool, int, float: Python str() (bool before int is implied: str(True) == "True").
    return str(value)


def option_text(name, desc):
    """name, or "name: render(desc)" unless desc is null or the empty string."""
    if desc is None or (isinstance(desc, str) and desc == ""):
        return name
    return name + ": " + render(desc)


class RequestError(ValueError):
    """A request that Kev's schema would refuse with a 422."""


def to_record(request):
    """Request dict (as json.loads gives it) -> (state text, questions, metadata).

    questions: [{"instr": text, "options": [text, ...]}]; metadata: [{"id", "type", "keys", "legend"?}].
    """
    if "state" not in request:
        raise RequestError("state is required")
    qs = request.get("questions")
    if not isinstance(qs, dict) or not qs:
        raise RequestError("questions must be a non-empty object")
    questions, meta = [], []
    for qid, q in qs.items():
        typ = q.get("type")
        crit = q.get("criteria")
        instr = render(q.get("instructions"))
        m = {"id": qid, "type": typ}
        if typ == "noul":
            if crit is not None and not isinstance(crit, dict):
                raise RequestError(f"{qid}: noul criteria must be an object or null")
            crit = crit or {}
            options = [option_text("no", crit.get("false")), option_text("yes", crit.get("true"))]
            m["keys"] = ["false", "true"]
        elif typ == "choice":
            if not isinstance(crit, dict) or not 1 <= len(crit) <= 255:
                raise RequestError("Value error, criteria must have 1..255 options")
            options = [option_text(k, v) for k, v in crit.items()]
            m["keys"] = list(crit.keys())
        elif typ == "score":
            if not isinstance(crit, list) or not 1 <= len(crit) <= 255:
                raise RequestError(f"{qid}: score criteria must be a list of 1..255 levels")
            options = [render(level) for level in crit]
            m["keys"] = [str(i) for i in range(len(crit))]
            m["legend"] = {str(i): render(level) for i, level in enumerate(crit)}
        else:
            raise RequestError(f"{qid}: unknown question type {typ!r}")
        questions.append({"instr": instr, "options": options})
        meta.append(m)
    return render(request["state"]), questions, meta


def delimiter_ids(token_to_id):
    """Role -> id, looked up by string; fails if the tokenizer lacks one."""
    ids = {}
    for role, tok in DELIMITERS.items():
        i = token_to_id(tok)
        if i is None:
            raise KeyError(f"tokenizer has no {tok}")
        ids[role] = i
    return ids


def encode(state_text, questions, tokenize, ids):
    """Kev's row form: state ids, and per question its branch ids plus decide/option indexes.

    tokenize(text) -> ids with add_special_tokens=False; every text is escaped first.
    Indexes count in the full row (state ids + branch ids).
    """

    def user_tokens(text):
        return list(tokenize(escape(text)))

    state_ids = [ids["state"]] + user_tokens(state_text)
    rows = []
    for q in questions:
        branch = [ids["q"]] + user_tokens(q["instr"])
        opts = []
        for text in q["options"]:
            branch += [ids["opt"]] + user_tokens(text) + [ids["/opt"]]
            opts.append(len(state_ids) + len(branch) - 1)
        branch.append(ids["decide"])
        rows.append({"ids": branch, "decide": len(state_ids) + len(branch) - 1, "opts": opts})
    return state_ids, rows


def round4(x):
    """Python round(x, 4)."""
    return round(x, 4)


def _normalised(p):
    s = sum(p)
    if s == 0:
        return [1.0 / len(p)] * len(p)
    return [x / s for x in p]


def _first_argmax(p):
    best = 0
    for i, x in enumerate(p):
        if x > p[best]:
            best = i
    return best


def choice_confidence(p):
    """(max - 1/K) / (1 - 1/K) of the normalised p; 1.0 for K = 1."""
    k = len(p)
    if k == 1:
        return 1.0
    q = _normalised(p)
    return (max(q) - 1.0 / k) / (1.0 - 1.0 / k)


def score_confidence(p):
    """max(0, 1 - Σ q_i·|i - mode| / D), D the mean absolute deviation of the uniform levels; 1.0 for L = 1."""
    n = len(p)
    if n == 1:
        return 1.0
    q = _normalised(p)
    mode = _first_argmax(q)
    d = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    spread = sum(qi * abs(i - mode) for i, qi in enumerate(q))
    return max(0.0, 1.0 - spread / d)


def to_answers(meta, probs):
    """Kev's answers object from per-question probability lists (floats), in question order."""
    answers = {}
    for m, p in zip(meta, probs):
        p = [float(x) for x in p]
        if len(p) != len(m["keys"]):
            raise ValueError(f"{m['id']}: {len(p)} probabilities for {len(m['keys'])} options")
        if m["type"] == "noul":
            answers[m["id"]] = {"type": "noul", "noul": round4(p[1])}
        elif m["type"] == "choice":
            answers[m["id"]] = {
                "type": "choice",
                "choice": m["keys"][_first_argmax(p)],
                "confidence": round4(choice_confidence(p)),
                "probabilities": {k: round4(x) for k, x in zip(m["keys"], p)},
            }
        else:
            answers[m["id"]] = {
                "type": "score",
                "score": round4(sum(i * x for i, x in enumerate(p))),
                "legend": m["legend"],
                "probabilities": {k: round4(x) for k, x in zip(m["keys"], p)},
                "confidence": round4(score_confidence(p)),
            }
    return answers


def answers_body_json(answers):
    """The answers as the HTTP body carries them: compact, non-ASCII unescaped."""
    return json.dumps(answers, separators=(",", ":"), ensure_ascii=False)


def answers_usage_text(answers):
    """The text whose token count is usage.output_tokens: json.dumps with Python's defaults."""
    return json.dumps(answers)
