"""Demonstrations for supervised steps: which rollouts and calls are trained, as trees, in which order.

Owns the filters (`select`), reading a store run's groups (`store_groups`) and the fixed dataset an
SFT step draws its batch from (`Demonstrations`). Not reading export files (`clawgym.export.reading`:
export imports the trainer, not the reverse), resolving `trainer.sft.source` (`clawgym.assemble`),
nor the loss (`clawgym.rl.sft`).

1. A demonstration is a rollout that did not fail as infrastructure and has a call
   (`batch.trained_rollouts`), with `min_reward`: whose reward is at least it (an unrewarded one
   never is), with `harnesses`: that ran through one of them. Kept rollouts stay in their group: a
   group's tree holds its shared task prompt once, as RL's does.
2. With `teacher_only`, a rollout keeps only the calls the proxy marked as a teacher's (`is_teacher`);
   a student call before a teacher call still reaches the tree as that call's prompt (context), one
   after the last teacher call not at all. A teacher call's absent logprobs are read as 0 (`demonstrated`).
3. The order is a fixed function of (seed, step): epoch e is a permutation of the groups drawn from
   seed + e, and step k takes the next `groups_per_step` of the epochs laid end to end. A resumed run
   at version v therefore trains exactly what an uninterrupted one would have.
4. A step trains its groups merged into one tree per rank (`step_trees`): what their prompts share
   (a harness's system prompt, when it comes before the task) is computed once per step, not once
   per group. For mini-swe-agent, whose instructions follow the task, that is ~120 tokens.
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clawgym.errors import FailedPrecondition
from clawgym.records import TEACHER_KEY, Call, Group, RolloutWithCalls, is_teacher
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer.batch import GroupTree, assign_to_ranks, group_tree, groups_tree, trained_rollouts

__all__ = ["TEACHER_KEY", "Demonstrations", "is_teacher", "select", "store_groups"]


def demonstrated(call: Call) -> Call:
    """`call` as SFT reads it: a teacher's tokens have no policy logprob (NaN in the store), which SFT
    never uses (`clawgym.rl.sft`, departure 1), so they are read as 0 and the tree takes them."""
    if np.isfinite(call.output_logprobs).all():
        return call
    return dataclasses.replace(call, output_logprobs=np.zeros(len(call.output_ids), np.float32))


def select(
    groups: list[Group],
    min_reward: float | None = None,
    teacher_only: bool = False,
    harnesses: Sequence[str] = (),
) -> list[Group]:
    """The groups with only their demonstrations (module doc, 1-2), through `harnesses` only when
    given; groups left empty are dropped."""
    out = []
    for group in groups:
        kept = []
        for rollout, _ in trained_rollouts(group):
            reward = rollout.rollout.reward
            if min_reward is not None and (reward is None or reward < min_reward):
                continue
            if harnesses and rollout.rollout.harness not in harnesses:
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

    trees: list[GroupTree]  # one per group, in the groups' order
    groups_per_step: int
    seed: int
    where: str = ""  # what they were read from, for messages
    groups: tuple[Group, ...] = ()  # the groups of `trees`, for `step_trees`

    @classmethod
    def of(cls, groups: list[Group], groups_per_step: int, seed: int, where: str = "") -> "Demonstrations":
        kept = [(t, g) for t, g in ((group_tree(g), g) for g in groups) if t is not None]
        if not kept:
            raise FailedPrecondition(
                f"trainer.sft: {where or 'the source'} holds no demonstration to train on"
            )
        return cls([t for t, _ in kept], groups_per_step, seed, where, tuple(g for _, g in kept))

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

    def step_trees(self, step: int, ranks: int = 1) -> tuple[list[list[GroupTree]], int, float]:
        """Step `step`'s groups (`batch`) shared out to `ranks` ranks, balanced by size, each rank's
        merged into one tree (doc, 4; an empty list for a rank left without a group); with the
        number of groups and the epoch the step ends in."""
        picked, epoch = self.batch(step)
        by_id = {t.group_id: g for t, g in zip(self.trees, self.groups, strict=True)}
        shards = []
        for share in assign_to_ranks(picked, ranks):
            # a step across an epoch's end can draw a group twice (at most: it draws ≤ n): the
            # repeat goes into a second tree, so it weighs twice as it would unmerged
            firsts, repeats = [], []
            for t in share:
                (repeats if t.group_id in firsts else firsts).append(t.group_id)
            merged = (groups_tree([by_id[i] for i in ids]) for ids in (firsts, repeats) if ids)
            shards.append([tree for tree in merged if tree is not None])
        return shards, len(picked), epoch

    @property
    def rollouts(self) -> int:
        return sum(len(t.rewards) for t in self.trees)

    @property
    def tokens(self) -> int:
        """Demonstrated (rollout, position) pairs: what one epoch's NLL averages over."""
        return sum(t.n_generated for t in self.trees)
