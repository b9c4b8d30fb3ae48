"""A training run's headline figures: the keys of `summary.json`, of the report's summary and of `--json`.

Owns the figures' names and rounding: per harness `pass1_before`, `ci95_before`, `pass1_after`,
`ci95_after` (Pass@1 with its 95% interval), `delta` and `ci95_delta` (the paired difference) and
`significant` (the 95% intervals apart), each with a `_<harness>` suffix when a run evaluates
several harnesses. Not the statistics behind them (`clawgym.evaluation.compare`), nor when a
run evaluates (the app's training run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clawgym.evaluation.compare import compare
from clawgym.evaluation.runner import EvalResult

DIGITS = 4


def _interval(ci: tuple[float, float]) -> list[float]:
    return [round(ci[0], DIGITS), round(ci[1], DIGITS)]


def before_after(
    harnesses: Sequence[str], before: EvalResult | None, after: EvalResult | None
) -> dict[str, Any]:
    """Pass@1 before and after per harness with 95% intervals; the paired difference and the verdict
    where both evaluations exist. Keys in that order, harness after harness."""
    out: dict[str, Any] = {}
    for harness in harnesses:
        suffix = "" if len(harnesses) == 1 else f"_{harness}"
        for name, result in (("before", before), ("after", after)):
            if result is not None and 1 in result.harnesses[harness].pass_at:
                p = result.harnesses[harness].pass_at[1]
                out[f"pass1_{name}{suffix}"] = round(p.value, DIGITS)
                out[f"ci95_{name}{suffix}"] = _interval(p.ci95)
        if before is not None and after is not None:
            c = compare(before.harnesses[harness].counts, after.harnesses[harness].counts)
            out[f"delta{suffix}"] = round(c.delta, DIGITS)
            out[f"ci95_delta{suffix}"] = _interval(c.ci95_delta)
            out[f"significant{suffix}"] = c.intervals_apart
    return out
