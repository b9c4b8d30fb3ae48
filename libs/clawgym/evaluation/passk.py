"""Pass@k and its confidence intervals: pure functions of per-task sample counts.

Owns the statistics of an evaluation, not how its rollouts run (`runner.py`). The unbiased
estimator is Chen et al. 2021 ("Evaluating Large Language Models Trained on Code", eq. 1,
https://arxiv.org/abs/2107.03374): with n samples of a task of which c passed,

    pass@k = 1 - C(n - c, k) / C(n, k)        (n >= k), averaged over tasks.

Intervals, 95% by default:
1. Pass@1 with one sample per task: the Wilson score interval of (passed, tasks): samples are
   independent Bernoulli trials, and Wilson stays inside [0, 1] and honest near 0 and 1.
2. Anything else (Pass@1 with several samples per task, Pass@k): a percentile bootstrap over
   tasks, because samples of one task are correlated and the task is the unit that varies,
   widened where needed to the Wilson interval of the estimate over the tasks (value × tasks of
   tasks): a bootstrap of all-pass or all-fail tasks has no width, yet 10 perfect tasks are not proof.
3. A before/after difference on the same tasks: a paired bootstrap over tasks.
4. The same difference with families as the unit (`family_paired_difference`): tasks of one family
   share their program and phrasings, so 192 tasks of 8 families are not 192 independent draws. A
   two-stage bootstrap resamples the families, then the tasks within each family drawn; its
   interval says how the gain would vary over other families like these, not only other tasks.
Bootstraps use a fixed seed, so the same counts give the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from clawgym.errors import InvalidArgument

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20261129


def pass_at_k(n: int, c: int, k: int) -> float:
    """1 - C(n-c, k)/C(n, k) for one task, as the numerically stable product 1 - Π_{i=n-c+1}^{n} (1 - k/i)."""
    if not (0 <= c <= n) or k < 1:
        raise InvalidArgument(f"pass@k needs 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise InvalidArgument(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion; (0, 1) when there are no trials."""
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    # it contains p; min/max keep it so against rounding (0 successes of 3: centre - half = 5.6e-17)
    return max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half))


def bootstrap_interval(
    values: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-task `values` (tasks resampled with replacement)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return 0.0, 1.0
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(resamples, v.size))].mean(axis=1)  # (resamples,)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class TaskCounts:
    """One task's samples: n ran, c passed."""

    task_id: str
    n: int
    c: int


@dataclass(frozen=True)
class PassAtK:
    """Pass@k over a set of tasks, with its interval and how it was computed."""

    k: int
    value: float
    ci95: tuple[float, float]
    tasks: int
    samples: int
    method: str  # "wilson" or "bootstrap"

    def as_json(self) -> dict:
        return {
            "k": self.k,
            "value": self.value,
            "ci95": list(self.ci95),
            "tasks": self.tasks,
            "samples": self.samples,
            "method": self.method,
        }


def per_task_pass_at_k(counts: Sequence[TaskCounts], k: int) -> list[float]:
    """Pass@k of each task (tasks with fewer than k samples are an error: the estimate needs n >= k)."""
    return [pass_at_k(t.n, t.c, k) for t in counts]


def estimate(counts: Sequence[TaskCounts], k: int = 1) -> PassAtK:
    """Pass@k averaged over tasks, with a Wilson (one sample per task, k = 1) or bootstrap interval."""
    if not counts:
        raise InvalidArgument("pass@k of zero tasks")
    per_task = per_task_pass_at_k(counts, k)
    samples = sum(t.n for t in counts)
    value = float(np.mean(per_task))
    if k == 1 and all(t.n == 1 for t in counts):
        return PassAtK(
            k, value, wilson_interval(sum(t.c for t in counts), len(counts)), len(counts), samples, "wilson"
        )
    boot = bootstrap_interval(per_task)
    over_tasks = wilson_interval(round(value * len(counts)), len(counts))
    ci = (min(boot[0], over_tasks[0]), max(boot[1], over_tasks[1]))
    return PassAtK(k, value, ci, len(counts), samples, "bootstrap")


def paired_difference(
    before: Sequence[TaskCounts], after: Sequence[TaskCounts], k: int = 1
) -> tuple[float, tuple[float, float]]:
    """after - before of Pass@k on the tasks both evaluated, with a paired bootstrap 95% interval."""
    b = {t.task_id: t for t in before}
    common = [t for t in after if t.task_id in b]
    if not common:
        raise InvalidArgument("no task was evaluated both before and after")
    diff = [pass_at_k(t.n, t.c, k) - pass_at_k(b[t.task_id].n, b[t.task_id].c, k) for t in common]
    return float(np.mean(diff)), bootstrap_interval(diff)


def family_bootstrap_interval(
    values_by_family: Sequence[Sequence[float]],
    *,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """Two-stage percentile bootstrap of the mean over all tasks: draw as many families as there
    are, with replacement, then each drawn family's tasks with replacement; a resample's figure is
    the mean over every task drawn (a family weighs by its task count, as in the plain mean)."""
    groups = [np.asarray(v, dtype=np.float64) for v in values_by_family if len(v)]
    if not groups:
        return 0.0, 1.0
    rng = np.random.default_rng(seed)
    n_families = len(groups)
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    # sums[f, r, j]: the sum of family f's tasks redrawn for slot j of resample r
    sums = np.stack(
        [g[rng.integers(0, g.size, size=(resamples, n_families, g.size))].sum(axis=2) for g in groups]
    )
    picked = rng.integers(0, n_families, size=(resamples, n_families))  # (resamples, slots)
    slot_sums = np.take_along_axis(sums.transpose(1, 2, 0), picked[..., None], axis=2)[..., 0]
    means = slot_sums.sum(axis=1) / sizes[picked].sum(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def family_paired_difference(
    before: Sequence[TaskCounts], after: Sequence[TaskCounts], family_of: Mapping[str, str], k: int = 1
) -> tuple[float, tuple[float, float]] | None:
    """after - before of Pass@k on the tasks both evaluated, with the two-stage (families, then
    tasks) bootstrap interval; None where the tasks span fewer than two families."""
    b = {t.task_id: t for t in before}
    by_family: dict[str, list[float]] = {}
    for t in after:
        if t.task_id in b and t.task_id in family_of:
            was = b[t.task_id]
            by_family.setdefault(family_of[t.task_id], []).append(
                pass_at_k(t.n, t.c, k) - pass_at_k(was.n, was.c, k)
            )
    if len(by_family) < 2:
        return None
    diffs = [d for v in by_family.values() for d in v]
    return float(np.mean(diffs)), family_bootstrap_interval(list(by_family.values()))
