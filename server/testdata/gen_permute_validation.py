"""Writes permute_validation.json: FastAPI + pydantic v2's answer to /v1/systemone/permute bodies, with the body
schema written out from Kev's permute endpoint (jaredpalmer/kev): {"status": 422, "detail": [...]} for a rejected
body, {"status": 200, "n_perm": n, "seed": "s"} for an accepted one; and "orders", the option order of each of six
runs under random.Random(seed), a fresh copy of the keys shuffled for every run after the first. Needs pydantic 2; run from this directory:
python3 gen_permute_validation.py > permute_validation.json"""
import json, sys
from typing import Literal, Union
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator

Content = Union[str, dict, list, int, float, bool, None]


class Noul(BaseModel):
    type: Literal["noul"]
    instructions: Content = None
    criteria: dict[str, Content] | None = None


class Choice(BaseModel):
    type: Literal["choice"]
    instructions: Content = None
    criteria: dict[str, Content]

    @model_validator(mode="after")
    def _check(self):
        if not 1 <= len(self.criteria) <= 255:
            raise ValueError("criteria must have 1..255 options")
        return self


class Score(BaseModel):
    type: Literal["score"]
    instructions: Content = None
    criteria: list[Content] = Field(min_length=1, max_length=255)


class SystemOneRequest(BaseModel):
    state: Content
    model: str = "kev-latest"
    questions: dict[str, Union[Noul, Choice, Score]] = Field(min_length=1)


class PermuteRequest(BaseModel):
    request: SystemOneRequest
    question: str
    n_perm: int = Field(6, ge=1, le=64)
    seed: int = 0


def encodable(x):
    if isinstance(x, BaseException): return {}
    if isinstance(x, dict): return {k: encodable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [encodable(v) for v in x]
    return x


REQ = '{"state":"s","questions":{"q":{"type":"choice","instructions":"Pick","criteria":{"a":null,"b":null}}}}'
bodies = [f'{{"request":{REQ},"question":"q","n_perm":{n}}}' for n in
          ["0", "-1", "65", "1", "64", "6.0", "6.5", "true", "false", "null", '"6"', '" 7 "', '"6.0"', '"x"', "[]",
           "1e2", "2.5e1", "100000000000000000000000", "NaN", "Infinity", '"1_0"']]
bodies += [f'{{"request":{REQ},"question":"q","seed":{s}}}' for s in
           ["0", "-5", "1099511627776", "1180591620717411303424", "2.0", "1.5", '"42"', "true", "null", "{}"]]
bodies += [f'{{"request":{REQ},"question":"q"}}', f'{{"request":{REQ}}}', f'{{"request":{REQ},"question":3}}',
           f'{{"request":{REQ},"question":null,"n_perm":0,"seed":0.5}}', '{"question":"q"}', '{}', '[1]', '"x"',
           '{"request":{"state":"s","questions":{}},"question":"q"}',
           '{"request":{"questions":{"q":{"type":"bogus"}}},"question":"q","n_perm":70}',
           '{"request":[],"question":"q"}',
           f'{{"request":{REQ},"question":"q","extra":1,"n_perm":2,"seed":3}}']

out = []
for b in bodies:
    v = json.loads(b)
    try:
        m = TypeAdapter(PermuteRequest).validate_python(v)
        out.append({"body": b, "status": 200, "n_perm": m.n_perm, "seed": str(m.seed), "question": m.question})
    except ValidationError as e:
        detail = []
        for err in e.errors(include_url=False):
            err = dict(err)
            err["loc"] = ["body"] + list(err["loc"])
            detail.append(encodable(err))
        try:
            json.dumps(detail, allow_nan=False)
        except ValueError:  # FastAPI's JSONResponse refuses NaN and infinities: a 500
            out.append({"body": b, "status": 500})
            continue
        out.append({"body": b, "status": 422, "detail": detail})
import random
orders = []
for seed in [0, 1, 42, 2**40, -5, 2**70 + 3]:
    keys = ["returns", "shipping", "billing"]
    rng = random.Random(seed)
    runs = []
    for i in range(6):
        order = list(keys)
        if i > 0:
            rng.shuffle(order)
        runs.append(order)
    orders.append({"seed": str(seed), "keys": keys, "runs": runs})
json.dump({"pydantic": __import__("pydantic").VERSION, "cases": out, "orders": orders}, sys.stdout, ensure_ascii=False, indent=1)
sys.stdout.write("\n")
