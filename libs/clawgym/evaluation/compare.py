"""A before/after comparison of one policy on the same tasks: both Pass@k, their difference, a verdict.

Owns what a run concludes from its first and last evaluation of a harness, not the statistics
underneath (`passk.py`: the estimates, their intervals and the paired bootstrap of the difference)
and not how the figures are named in a run's summary (`clawgym.report.summary`).

Two readings of "did training help", both 95%:
1. `ci95_delta`: the paired bootstrap interval of after - before over the tasks both evaluated
   (`passk.paired_difference`); the sharper test, since a task's difficulty cancels out.
2. `intervals_apart`: after's interval lies wholly above before's. This is the verdict the
   quickstart prints ("95% intervals apart"); it is conservative (two unpaired intervals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clawgym.evaluation.passk import PassAtK, TaskCounts, estimate, paired_difference


@dataclass(frozen=True)
class Comparison:
    """Pass@k before and after, and the paired difference after - before."""

    k: int
    before: PassAtK
    after: PassAtK
    delta: float
    ci95_delta: tuple[float, float]

    @property
    def intervals_apart(self) -> bool:
        """After's 95% interval lies wholly above before's."""
        return self.after.ci95[0] > self.before.ci95[1]

    @property
    def difference_excludes_zero(self) -> bool:
        """The paired 95% interval of the difference lies wholly above 0."""
        return self.ci95_delta[0] > 0.0


def compare(before: Sequence[TaskCounts], after: Sequence[TaskCounts], k: int = 1) -> Comparison:
    """Pass@k of each evaluation and their paired difference (on the tasks both evaluated)."""
    delta, ci = paired_difference(before, after, k)
    return Comparison(k, estimate(before, k), estimate(after, k), delta, ci)
