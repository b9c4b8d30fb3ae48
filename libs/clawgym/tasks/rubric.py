"""A task's rubric: the part of a hybrid task's reward an LLM judge scores (no I/O here).

ClawGym-Bench's hybrid tasks (44 of its 200) score 0.7 x code checks + 0.3 x a rubric. The rubric is
the ClawGym synthesis pipeline's `llm_rubric` object (ClawGym-SynData, steps 09-11)::

    {"eval_type": "llm_rubric", "score_options": [0, 0.25, 0.5, 0.75, 1],
     "eval_input": "what the evaluator is shown",
     "rules": [{"name": "...", "file_path": "output/report.md",
                "scores": {"0": "...", "0.25": "...", "0.5": "...", "0.75": "...", "1": "..."}}]}

Benchmark rows carry only its `rules` list (`"rules": [...]`, null for code-only tasks); the
ClawGym-Agents layout keeps it under `metadata.rule`. Each rule is scored at one of
`score_options`; the rubric's score is the mean over its rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clawgym.tasks.model import TaskFormatError

SCORE_OPTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
CODE_WEIGHT, RUBRIC_WEIGHT = 0.7, 0.3  # ClawGym-Bench's hybrid weights


@dataclass(frozen=True)
class RubricRule:
    """One criterion: the output file it judges and what each score level means."""

    name: str
    file_path: str  # relative to the task's workdir
    scores: Mapping[str, str] = field(default_factory=dict)  # "0", "0.25", … → description


@dataclass(frozen=True)
class Rubric:
    rules: tuple[RubricRule, ...]
    score_options: tuple[float, ...] = SCORE_OPTIONS
    eval_input: str = ""
    rubric_weight: float = RUBRIC_WEIGHT  # the code checks get 1 - rubric_weight

    @property
    def code_weight(self) -> float:
        return 1.0 - self.rubric_weight

    @property
    def weights(self) -> dict[str, float]:
        return {"code": round(self.code_weight, 12), "rubric": self.rubric_weight}

    def score(self, rule_scores: Mapping[str, float]) -> float:
        """The rubric's score: the mean of its rules' scores (each must be given)."""
        return sum(float(rule_scores[r.name]) for r in self.rules) / len(self.rules)


def parse_rubric(value: Any, where: object, *, rubric_weight: Any = RUBRIC_WEIGHT) -> Rubric | None:
    """A `Rubric` from a task's `rules` list or `llm_rubric` object; None for null or an empty list
    (a code-only task). TaskFormatError names `where` and the problem."""
    if value is None or value == []:
        return None
    options: Any = list(SCORE_OPTIONS)
    eval_input: Any = ""
    rules = value
    if isinstance(value, Mapping):
        if value.get("skip_rubric") is True:
            return None
        rules, options = value.get("rules"), value.get("score_options", options)
        eval_input = value.get("eval_input", "")
    if not isinstance(rules, list) or not rules:
        raise TaskFormatError(f"{where}: the rubric's rules must be a non-empty list")
    if (
        not isinstance(options, list)
        or not options
        or not all(isinstance(o, int | float) and 0.0 <= o <= 1.0 for o in options)
    ):
        raise TaskFormatError(f"{where}: score_options must be a list of numbers in [0, 1], got {options!r}")
    if not isinstance(eval_input, str):
        raise TaskFormatError(f"{where}: eval_input must be a string")
    if not isinstance(rubric_weight, int | float) or not 0.0 < float(rubric_weight) <= 1.0:
        raise TaskFormatError(f"{where}: rubric_weight must be a number in (0, 1], got {rubric_weight!r}")
    parsed, names = [], set()
    for i, rule in enumerate(rules):
        if not isinstance(rule, Mapping):
            raise TaskFormatError(f"{where}: rules[{i}] must be an object")
        name, path, scores = rule.get("name"), rule.get("file_path", ""), rule.get("scores")
        if not isinstance(name, str) or not name.strip():
            raise TaskFormatError(f"{where}: rules[{i}].name must be a non-empty string")
        if name.strip() in names:
            raise TaskFormatError(f"{where}: rules[{i}].name {name!r} is used twice")
        if not isinstance(path, str):
            raise TaskFormatError(f"{where}: rules[{i}].file_path must be a string")
        if not isinstance(scores, Mapping) or not scores or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in scores.items()
        ):
            raise TaskFormatError(f"{where}: rules[{i}].scores must map score levels to descriptions")
        names.add(name.strip())
        parsed.append(RubricRule(name.strip(), path.strip(), dict(scores)))
    return Rubric(
        tuple(parsed),
        tuple(sorted(float(o) for o in options)),
        eval_input.strip(),
        float(rubric_weight),
    )
