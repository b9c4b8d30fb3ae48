"""A training run's headline figures: the keys of `summary.json`, of the report's summary and of `--json`.

Owns the figures' names and rounding: per harness `pass1_before`, `ci95_before`, `pass1_after`,
`ci95_after` (Pass@1 with its 95% interval), `delta` and `ci95_delta` (the paired difference over
tasks), `ci95_delta_by_family` (the same difference with families resampled, then their tasks:
`passk.family_paired_difference`) and `significant` (the 95% intervals apart), each with a
`_<harness>` suffix when a run evaluates several harnesses; the same keys with `_unseen_families`
before `_by_family` (or at the end) for the held-out tasks of families the run never trained on
(`before_after(..., task_ids, suffix)`), and Pass@1 per family. Not the statistics behind them
(`clawgym.evaluation.compare`), nor when a run evaluates (the app's training run).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from clawgym.evaluation.compare import compare
from clawgym.evaluation.passk import TaskCounts, estimate, family_paired_difference
from clawgym.evaluation.runner import EvalResult

DIGITS = 4


def _interval(ci: tuple[float, float]) -> list[float]:
    return [round(ci[0], DIGITS), round(ci[1], DIGITS)]


def _counts(result: EvalResult, harness: str, task_ids: Collection[str] | None) -> list[TaskCounts]:
    counts = result.harnesses[harness].counts
    return [t for t in counts if task_ids is None or t.task_id in task_ids]


def before_after(
    harnesses: Sequence[str],
    before: EvalResult | None,
    after: EvalResult | None,
    task_ids: Collection[str] | None = None,
    suffix: str = "",
    family_of: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Pass@1 before and after per harness with 95% intervals; the paired difference and the verdict
    where both evaluations exist, and with `family_of` (task id → family) the difference's interval
    over families where the tasks span two or more. Keys in that order, harness after harness;
    `task_ids` restricts the figures to part of the evaluated tasks, whose keys end in `suffix`."""
    out: dict[str, Any] = {}
    for harness in harnesses:
        tail = ("" if len(harnesses) == 1 else f"_{harness}") + suffix
        for name, result in (("before", before), ("after", after)):
            counts = _counts(result, harness, task_ids) if result is not None else []
            if counts:
                p = estimate(counts, 1)
                out[f"pass1_{name}{tail}"] = round(p.value, DIGITS)
                out[f"ci95_{name}{tail}"] = _interval(p.ci95)
        if before is not None and after is not None:
            b, a = _counts(before, harness, task_ids), _counts(after, harness, task_ids)
            if b and a:
                c = compare(b, a)
                out[f"delta{tail}"] = round(c.delta, DIGITS)
                out[f"ci95_delta{tail}"] = _interval(c.ci95_delta)
                by_family = family_paired_difference(b, a, family_of) if family_of else None
                if by_family is not None:
                    out[f"ci95_delta{tail}_by_family"] = _interval(by_family[1])
                out[f"significant{tail}"] = c.intervals_apart
    return out


def per_family(
    harnesses: Sequence[str],
    evals: Mapping[str, EvalResult | None],
    family_of: Mapping[str, str],
    kind_of: Mapping[str, str],
) -> dict[str, dict[str, Any]]:
    """Pass@1 of each task family in each labelled evaluation (`{"before": r0, "after": r1}`), with
    the family's kind (`trained`: held-out instances of a family trained on; `unseen`: a family
    with no training task) and its task count; per harness when a run evaluates several."""
    out: dict[str, dict[str, Any]] = {}
    for family in sorted(set(family_of.values())):
        ids = {t for t, f in family_of.items() if f == family}
        row: dict[str, Any] = {"kind": kind_of[next(iter(ids))], "tasks": len(ids)}
        for harness in harnesses:
            tail = "" if len(harnesses) == 1 else f"_{harness}"
            for label, result in evals.items():
                counts = _counts(result, harness, ids) if result is not None else []
                if counts:
                    row[f"{label}{tail}"] = round(estimate(counts, 1).value, DIGITS)
        out[family] = row
    return out
