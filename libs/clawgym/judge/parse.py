"""The judge's answer → one score per rubric rule, or `UnparseableAnswer` saying why not.

Tolerates what judges wrap around their JSON (a `<think>` block, a code fence, prose before and
after): the last JSON object in the answer holding a `scores` object is used. Every rule must be
scored, with a number in [0, 1] (a numeric string too); a one-rule rubric may answer `{"score": x}`.
Anything else is unparseable: never a guessed 0.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from clawgym.tasks.rubric import Rubric

_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


class UnparseableAnswer(ValueError):
    """The judge answered, but not with a score for every rule."""


def _objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object that starts somewhere in `text` and parses, outermost first by position."""
    decoder = json.JSONDecoder()
    found, i = [], text.find("{")
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(value, dict):
            found.append(value)
        i = text.find("{", end)
    return found


def _number(value: Any, rule: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise UnparseableAnswer(f"rule {rule!r}: {value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise UnparseableAnswer(f"rule {rule!r}: {value!r} is not a number")
    if not 0.0 <= float(value) <= 1.0:
        raise UnparseableAnswer(f"rule {rule!r}: {value!r} is outside [0, 1]")
    return float(value)


def parse_answer(text: str, rubric: Rubric) -> dict[str, float]:
    """{rule name: score} for every rule of `rubric`."""
    body = _THINK.sub("", text or "").strip()
    if not body:
        raise UnparseableAnswer("the answer is empty")
    candidates = [o for o in _objects(body) if isinstance(o.get("scores"), dict)]
    if not candidates and len(rubric.rules) == 1:
        singles = [o for o in _objects(body) if "score" in o]
        if singles:
            return {rubric.rules[0].name: _number(singles[-1]["score"], rubric.rules[0].name)}
    if not candidates:
        raise UnparseableAnswer("no JSON object with a `scores` object in the answer")
    given = {str(k).strip().casefold(): v for k, v in candidates[-1]["scores"].items()}
    scores = {}
    for rule in rubric.rules:
        key = rule.name.casefold()
        if key not in given:
            raise UnparseableAnswer(f"rule {rule.name!r} is not scored")
        value = given[key]
        if isinstance(value, dict) and "score" in value:  # {"rule": {"score": 1, "reason": ..}}
            value = value["score"]
        scores[rule.name] = _number(value, rule.name)
    return scores
