"""The judge's answer → one score per rubric rule, or `UnparseableAnswer` saying why not.

The verdict has one place: the whole answer is one JSON object. Only what judges put around a whole
answer is allowed around it: a leading `<think>…</think>` block, and one code fence enclosing all
of it. Prose, a second object or anything else before or after the object makes the answer
unparseable, so a judge that quotes the agent's own `{"scores": …}` never has the quote taken for
its verdict (a quote inside the object's strings stays a string). The object's `scores` object
gives every rule a number in [0, 1] (a numeric string, or `{"score": x, "reason": …}`, too); a
one-rule rubric may answer `{"score": x}`. Duplicate keys, NaN, infinities and numbers no float
holds are refused. Nothing here raises anything but UnparseableAnswer, and nothing is guessed.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from clawgym.tasks.rubric import Rubric

_REASONING = re.compile(r"\A\s*<think>.*?(?:</think>|\Z)", re.DOTALL)
_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n(.*)\n[ \t]*```\Z", re.DOTALL)


class UnparseableAnswer(ValueError):
    """The judge answered, but not with a score for every rule in the answer's one place."""


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}…({len(text)} characters)"


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:  # json would keep the last silently
            raise UnparseableAnswer(f"key {_short(key)} is given twice")
        obj[key] = value
    return obj


def _constant(name: str) -> float:
    raise UnparseableAnswer(f"{name} is not a score")


def _verdict(text: str) -> dict[str, Any]:
    """The answer's one JSON object."""
    body = _REASONING.sub("", text or "", count=1).strip()
    if not body:
        raise UnparseableAnswer("the answer is empty")
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        # ints parsed as floats: a 400-digit one becomes inf (refused below), never an OverflowError
        value = json.loads(body, object_pairs_hook=_unique_keys, parse_constant=_constant, parse_int=float)
    except UnparseableAnswer:
        raise
    except (ValueError, RecursionError) as e:
        raise UnparseableAnswer(f"the answer is not exactly one JSON object ({e})") from None
    if not isinstance(value, dict):
        raise UnparseableAnswer(f"the answer is a JSON {type(value).__name__}, not an object")
    return value


def _number(value: Any, rule: str) -> float:
    if isinstance(value, dict) and "score" in value:  # {"rule": {"score": 1, "reason": ..}}
        value = value["score"]
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise UnparseableAnswer(f"rule {rule!r}: {_short(value)} is not a number") from None
    if not isinstance(value, float) or math.isnan(value):  # bools, null, lists, "nan"
        raise UnparseableAnswer(f"rule {rule!r}: {_short(value)} is not a number")
    if not 0.0 <= value <= 1.0:  # inf too: what a number too large for a float reads as
        raise UnparseableAnswer(f"rule {rule!r}: {_short(value)} is outside [0, 1]")
    return value


def parse_answer(text: str, rubric: Rubric) -> dict[str, float]:
    """{rule name: score} for every rule of `rubric`."""
    verdict = _verdict(text)
    if "scores" not in verdict and len(rubric.rules) == 1 and "score" in verdict:
        return {rubric.rules[0].name: _number(verdict["score"], rubric.rules[0].name)}
    if not isinstance(verdict.get("scores"), dict):
        raise UnparseableAnswer("the answer's object has no `scores` object")
    given: dict[str, Any] = {}
    for key, value in verdict["scores"].items():
        name = key.strip().casefold()
        if name in given:
            raise UnparseableAnswer(f"rule {_short(key)} is scored twice")
        given[name] = value
    scores = {}
    for rule in rubric.rules:
        key = rule.name.casefold()
        if key not in given:
            raise UnparseableAnswer(f"rule {rule.name!r} is not scored")
        scores[rule.name] = _number(given[key], rule.name)
    return scores
