"""Which tasks a step rolls out: uniformly, or weighted by the learning signal a group is expected to give.

GRPO learns only from a group whose rewards differ. With binary rewards and a family pass rate p, a
group of G rollouts differs with probability q(p) = 1 - p^G - (1-p)^G: a family the policy always
fails (or always passes) gives nothing, however often it is drawn. The `signal` mode keeps a Beta
posterior of each family's pass rate (its evidence decays with a half-life in steps, since the
policy moves) and draws a family with weight E[q(p)] under that posterior, at least `min_weight`,
then a task of it uniformly. An unexplored family's posterior is wide, so its expected signal is
high: every family is tried before the evidence narrows the draw.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from clawgym.records import Group
from clawgym.trainer.config import SamplingConfig

PRIOR = (1.0, 1.0)  # Beta(1, 1): no opinion of a family's pass rate before its first group


def expected_signal(passes: float, fails: float, group_size: int) -> float:
    """E[1 - p^G - (1-p)^G] for p ~ Beta(PRIOR + (passes, fails)): the chance that a group of G
    rollouts has rewards that differ. E[p^G] = B(a+G, b) / B(a, b), and symmetrically for 1-p."""
    a, b = PRIOR[0] + passes, PRIOR[1] + fails

    def moment(x: float, y: float) -> float:  # E[p^G] for p ~ Beta(x, y)
        return math.exp(
            math.lgamma(x + group_size)
            + math.lgamma(x + y)
            - math.lgamma(x)
            - math.lgamma(x + y + group_size)
        )

    return max(0.0, 1.0 - moment(a, b) - moment(b, a))


@dataclass
class TaskSampler:
    """Draws the tasks of a batch; `observe` feeds it the groups a step trained on."""

    task_ids: list[str]
    families: Mapping[str, str]  # task id -> family; a task without one is its own family
    group_size: int
    cfg: SamplingConfig
    # family -> [passes, fails], decayed: rollouts seen, weighted by how recent their step was
    evidence: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._members: dict[str, list[str]] = {}
        for task_id in self.task_ids:
            self._members.setdefault(self.family(task_id), []).append(task_id)
        self._names = sorted(self._members)

    def family(self, task_id: str) -> str:
        return self.families.get(task_id) or task_id

    def draw(self, n: int, rng: np.random.Generator) -> list[str]:
        """`n` task ids (with replacement)."""
        if self.cfg.mode == "uniform":
            return [self.task_ids[i] for i in rng.choice(len(self.task_ids), size=n).tolist()]
        weights = np.array([self.weight(f) for f in self._names])
        picked = rng.choice(len(self._names), size=n, p=weights / weights.sum())
        members = [self._members[self._names[f]] for f in picked.tolist()]
        return [tasks[rng.integers(len(tasks))] for tasks in members]

    def weight(self, family: str) -> float:
        passes, fails = self.evidence.get(family, (0.0, 0.0))
        return max(self.cfg.min_weight, expected_signal(passes, fails, self.group_size))

    def observe(self, groups: Iterable[Group]) -> None:
        """One step's groups: older evidence decays by one step, then each rollout with an outcome
        counts as a pass or a fail of its task's family (infrastructure failures say nothing)."""
        keep = 0.5 ** (1.0 / self.cfg.half_life_steps)
        for counts in self.evidence.values():
            counts[0] *= keep
            counts[1] *= keep
        for group in groups:
            for r in group.rollouts:
                if r.rollout.passed is None:
                    continue
                counts = self.evidence.setdefault(self.family(r.rollout.task_id), [0.0, 0.0])
                counts[0 if r.rollout.passed else 1] += 1.0

    def weights(self) -> dict[str, float]:
        """Each family's current draw probability (for the run's metrics)."""
        w = {f: self.weight(f) for f in self._names}
        total = sum(w.values())
        return {f: v / total for f, v in w.items()}

    def state(self) -> dict[str, list[float]]:
        return {f: list(c) for f, c in self.evidence.items()}

    def load_state(self, state: Mapping[str, list[float]]) -> None:
        self.evidence = {f: [float(c[0]), float(c[1])] for f, c in state.items()}
