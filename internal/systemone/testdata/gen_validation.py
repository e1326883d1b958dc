"""Writes validation.json: the 422 detail lists FastAPI + pydantic v2 give for System One request bodies, with the
request schema written out from Kev's request model (jaredpalmer/kev). Needs pydantic 2: python3 gen_validation.py"""
import json, sys
from typing import Literal, Union
import pydantic
from pydantic import BaseModel, Field, TypeAdapter, model_validator

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
    def _check(self):   # the validator name shows in pydantic error locations
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


def encodable(x):
    """FastAPI's jsonable_encoder on error entries: exceptions in ctx become {}."""
    if isinstance(x, BaseException): return {}
    if isinstance(x, dict): return {k: encodable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [encodable(v) for v in x]
    return x


many = {f"o{i}": None for i in range(256)}
bodies = [
    {"state": "x", "model": "m", "questions": {"q": {"type": "score", "instructions": "i", "criteria": []}}},
    {"state": "x", "model": "m", "questions": {"q": {"type": "bogus", "instructions": "i"}}},
    {"state": "x", "model": "m", "questions": {"q": {"type": "choice", "instructions": "i", "criteria": many}}},
    {"state": "x", "model": "m", "questions": {}},
    {"state": "x", "questions": {"q": {"type": "choice", "criteria": {}}}},
    {"state": "x", "questions": {"q": {"type": "choice"}}},
    {"state": "x", "questions": {"q": {"type": "choice", "criteria": ["a"]}}},
    {"state": "x", "questions": {"q": {"type": "noul", "criteria": []}}},
    {"state": "x", "questions": {"q": {"type": "noul", "criteria": "yes"}}},
    {"state": "x", "questions": {"q": {"type": "score", "criteria": {"a": 1}}}},
    {"state": "x", "questions": {"q": {"type": "score", "criteria": list(range(256))}}},
    {"state": "x", "questions": {"q": {"type": "score"}}},
    {"state": "x", "questions": {"q": {"instructions": "i"}}},
    {"state": "x", "questions": {"q": {"type": 3}}},
    {"state": "x", "questions": {"q": "noul"}},
    {"state": "x", "questions": {"q": None}},
    {"state": "x", "questions": {"q": []}},
    {"state": "x", "questions": []},
    {"state": "x", "questions": "q"},
    {"state": "x", "questions": None},
    {"state": "x"},
    {"questions": {"q": {"type": "noul"}}},
    {"state": "x", "model": 5, "questions": {"q": {"type": "noul"}}},
    {"state": "x", "model": None, "questions": {"q": {"type": "noul"}}},
    {"state": "x", "questions": {"a": {"type": "noul"}, "b": {"type": "bogus"}, "c": {"type": "score", "criteria": []}}},
    {"model": 1, "questions": {}},
    [1, 2],
    "state",
    None,
    # accepted
    {"state": None, "questions": {"q": {"type": "noul"}}},
    {"state": {"a": [1, 2.5, True]}, "questions": {"q": {"type": "noul", "criteria": {"true": "y", "x": 1}}, "r": {"type": "score", "criteria": ["one"]}, "s": {"type": "choice", "criteria": {"a": None}, "label": "ignored"}}},
    {"state": "x", "model": "jev-latest", "questions": {"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(255)}}}},
    {"state": "x", "questions": {"q": {"type": "noul", "criteria": None}}},
]
out = []
for b in bodies:
    try:
        TypeAdapter(SystemOneRequest).validate_python(b)
        out.append({"body": b, "ok": True})
    except pydantic.ValidationError as e:
        errs = e.errors(include_url=False)
        for err in errs:
            err["loc"] = ["body", *err["loc"]]
        out.append({"body": b, "ok": False, "detail": encodable(errs)})
json.dump({"pydantic": pydantic.VERSION, "cases": out}, open("validation.json", "w"), indent=1)
