"""Demonstrations for supervised steps: which rollouts and calls are trained, as trees, in which order.

Owns the filters (`select`), reading a store run's groups (`store_groups`) and the fixed dataset an
SFT step draws its batch from (`Demonstrations`). Not reading export files (`clawgym.export.reading`:
export imports the trainer, not the reverse), resolving `trainer.sft.source` (`clawgym.assemble`),
nor the loss (`clawgym.rl.sft`).

1. A demonstration is a rollout that did not fail as infrastructure and has a call
   (`batch.trained_rollouts`), with `min_reward`: whose reward is at least it (an unrewarded one
   never is). Kept rollouts stay in their group: one prefix tree per group, as RL trains them, so a
   group's shared task prompt is computed once.
2. With `teacher_only`, a rollout keeps only the calls the proxy marked as a teacher's (`is_teacher`);
   a student call before a teacher call still reaches the tree as that call's prompt (context), one
   after the last teacher call not at all. A teacher call's absent logprobs are read as 0 (`demonstrated`).
3. The order is a fixed function of (seed, step): epoch e is a permutation of the groups drawn from
   seed + e, and step k takes the next `groups_per_step` of the epochs laid end to end. A resumed run
   at version v therefore trains exactly what an uninterrupted one would have.
"""

import dataclasses
from dataclasses import dataclass

import numpy as np

from clawgym.errors import FailedPrecondition
from clawgym.records import TEACHER_KEY, Call, Group, RolloutWithCalls, is_teacher
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer.batch import GroupTree, group_tree, trained_rollouts

__all__ = ["TEACHER_KEY", "Demonstrations", "is_teacher", "select", "store_groups"]


def demonstrated(call: Call) -> Call:
    """`call` as SFT reads it: a teacher's tokens have no policy logprob (NaN in the store), which SFT
    never uses (`clawgym.rl.sft`, departure 1), so they are read as 0 and the tree takes them."""
    if np.isfinite(call.output_logprobs).all():
        return call
    return dataclasses.replace(call, output_logprobs=np.zeros(len(call.output_ids), np.float32))


def select(groups: list[Group], min_reward: float | None = None, teacher_only: bool = False) -> list[Group]:
    """The groups with only their demonstrations (module doc, 1-2); groups left empty are dropped."""
    out = []
    for group in groups:
        kept = []
        for rollout, _ in trained_rollouts(group):
            reward = rollout.rollout.reward
            if min_reward is not None and (reward is None or reward < min_reward):
                continue
            calls = [c for c in rollout.calls if is_teacher(c)] if teacher_only else rollout.calls
            calls = [demonstrated(c) if is_teacher(c) else c for c in calls]
            if calls:
                kept.append(RolloutWithCalls(rollout.rollout, calls))
        if kept:
            out.append(dataclasses.replace(group, rollouts=kept))
    return out


def store_groups(store: TrajectoryStore, run_id: str) -> list[Group]:
    """Every group of a store run with its calls, in creation order."""
    return [store.get_group(g.id) for g in store.list_groups(run_id)]


@dataclass(frozen=True)
class Demonstrations:
    """The fixed dataset of supervised steps: one tree per group, drawn in seeded epochs (doc, 3)."""

    trees: list[GroupTree]
    groups_per_step: int
    seed: int
    where: str = ""  # what they were read from, for messages

    @classmethod
    def of(cls, groups: list[Group], groups_per_step: int, seed: int, where: str = "") -> "Demonstrations":
        trees = [t for t in (group_tree(g) for g in groups) if t is not None]
        if not trees:
            raise FailedPrecondition(
                f"trainer.sft: {where or 'the source'} holds no demonstration to train on"
            )
        return cls(trees, groups_per_step, seed, where)

    @property
    def per_step(self) -> int:
        return min(self.groups_per_step, len(self.trees))

    def batch(self, step: int) -> tuple[list[GroupTree], float]:
        """The trees of SFT step `step` (0-based) and the epoch it ends in (fractional: 1.5 = halfway
        through the second pass)."""
        n, b = len(self.trees), self.per_step
        picked = []
        for k in range(step * b, (step + 1) * b):
            epoch, i = divmod(k, n)
            picked.append(self.trees[int(np.random.default_rng(self.seed + epoch).permutation(n)[i])])
        return picked, (step + 1) * b / n

    @property
    def rollouts(self) -> int:
        return sum(len(t.rewards) for t in self.trees)

    @property
    def tokens(self) -> int:
        """Demonstrated (rollout, position) pairs: what one epoch's NLL averages over."""
        return sum(t.n_generated for t in self.trees)
