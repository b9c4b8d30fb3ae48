"""A step's batch: store groups → one prefix tree per group, stale groups dropped, shards per rank.

Owns what the trainer decides about groups before any tensor exists: each group's tree (with the
rewards the run assigns to rollouts that ended without one), its policy lag, whether it is dropped
(older than `max_policy_lag`) or empty (no generated token), the batch's sharing and reward
statistics, and which rank trains which trees. Advantages and losses are `clawgym.rl`'s.

RL trains on-policy samples only: a rollout with a call a teacher served (`records.is_teacher`: its
tokens have no policy logprob) is left out of its group's RL tree (`on_policy`), counted; supervised
steps read them (`demonstrations`).

One tree per group: GRPO normalises within a group, so a group is the unit a rank is handed, and its
samples share the task prompt; the loss normalisation is made global across groups and ranks in
`update.py`. A rank then trains its groups' trees as one (`merged_tree`): what groups share besides
(a harness's system prompt and tools, the same for every task) is computed once per step, not once
per group, with the same gradient (each rollout keeps its group, reward and generated tokens).
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from clawgym.records import Group, RolloutWithCalls, is_teacher
from clawgym.trajectory import FlatTree, RadixTree, TreeStats, tree_from_calls


@dataclass(frozen=True)
class GroupTree:
    """One group as the trainer trains it."""

    group_id: str
    harness: str
    flat: FlatTree
    stats: TreeStats
    rewards: tuple[float, ...]  # per rollout, in the group's order (failed ones get the run's failed_reward)
    passed: tuple[bool, ...]
    oldest_version: int  # the oldest weights that generated any of its trained tokens
    trained_from: int = 0  # tokens of older versions get no loss (`stale_calls: mask`); 0: all trained

    @property
    def n_generated(self) -> int:
        """(rollout, position) pairs the rollouts generated: the "token" loss normaliser's count."""
        return len(self.flat.gen_pos)

    @property
    def n_generating_rollouts(self) -> int:
        """Rollouts with at least one generated token: the "sequence" normaliser's count."""
        return int(np.unique(self.flat.gen_rollout).size)


@dataclass
class Batch:
    """The groups of one step: trained trees, plus ids consumed without training."""

    version: int  # the policy version being trained (its update produces version + 1)
    trees: list[GroupTree] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # older than max_policy_lag
    dropped_rollouts: int = 0  # rollouts of the dropped groups
    empty: list[str] = field(default_factory=list)  # nothing generated (every rollout failed early)
    lags: list[int] = field(default_factory=list)  # policy lag of every group with tokens
    stale_tokens_masked: int = 0  # generated tokens past the bound left out of the loss (`stale_calls: mask`)
    teacher_rollouts: int = 0  # rollouts left out for holding a teacher's calls (never trained by RL)

    @property
    def group_ids(self) -> list[str]:
        """Every group this step consumes: trained, dropped or empty."""
        return [t.group_id for t in self.trees] + self.dropped + self.empty

    def extend(self, other: "Batch") -> None:
        """Adds the groups of `other` (more of the same step's groups)."""
        self.trees += other.trees
        self.dropped += other.dropped
        self.dropped_rollouts += other.dropped_rollouts
        self.empty += other.empty
        self.lags += other.lags
        self.stale_tokens_masked += other.stale_tokens_masked
        self.teacher_rollouts += other.teacher_rollouts

    def sharing_ratio(self) -> float:
        """Σ rollout path tokens / Σ tree tokens: what tree packing saves over training paths one by one."""
        unique = sum(t.stats.unique_tokens for t in self.trees)
        return sum(t.stats.path_tokens for t in self.trees) / max(unique, 1)

    def by_harness(self) -> dict[str, dict[str, float]]:
        """Mean reward and pass rate of the trained rollouts, per harness."""
        out: dict[str, dict[str, float]] = {}
        for harness in sorted({t.harness for t in self.trees}):
            rewards = [r for t in self.trees if t.harness == harness for r in t.rewards]
            passed = [p for t in self.trees if t.harness == harness for p in t.passed]
            out[harness] = {"reward": float(np.mean(rewards)), "pass_rate": float(np.mean(passed))}
        return out


def trained_rollouts(group: Group, failed_reward: float = 0.0) -> list[tuple[RolloutWithCalls, float]]:
    """The rollouts of the group the trainer trains, in the group's order, each with its reward: those
    with a call that did not fail; one that ended without a reward gets `failed_reward`."""
    trained = []
    for rollout in group.rollouts:
        r = rollout.rollout
        if not rollout.calls or r.status == "failed":
            # failed = an infrastructure failure (a sandbox pod lost, the orchestrator lost, ...): its
            # calls say nothing about the policy, so it is never trained, not even at failed_reward
            continue
        trained.append((rollout, failed_reward if r.reward is None else float(r.reward)))
    return trained


def oldest_version(group: Group) -> int | None:
    """The oldest policy version that generated a token the trainer would train in `group` (what its
    lag is measured from); None when it has none."""
    versions = [
        int(c.output_versions.min())
        for rollout, _ in trained_rollouts(group)
        for c in rollout.calls
        if len(c.output_versions)
    ]
    return min(versions) if versions else None


def group_tree(group: Group, failed_reward: float = 0.0) -> GroupTree | None:
    """The group's tree, or None when no rollout of it has a call."""
    return groups_tree([group], failed_reward)


def groups_tree(groups: Sequence[Group], failed_reward: float = 0.0) -> GroupTree | None:
    """The rollouts of `groups` in one tree (an SFT step's demonstrations, whose harness prompt is then
    computed once; an RL step merges its groups' trees: `merged_tree`), or None when none has a call.
    Its `group_id` joins theirs with '+'."""
    tree = RadixTree()
    rewards, passed, harness = [], [], ""
    for group in groups:
        for rollout, reward in trained_rollouts(group, failed_reward):
            r = rollout.rollout
            tree_from_calls(rollout.calls, group_id=group.id, reward=reward, tree=tree)
            rewards.append(reward)
            passed.append(bool(r.passed))
            harness = harness or r.harness
    if not rewards:
        return None
    flat = tree.flatten()
    if len(flat.gen_pos) == 0:
        return None
    return GroupTree(
        group_id="+".join(g.id for g in groups),
        harness=harness,
        flat=flat,
        stats=tree.stats(),
        rewards=tuple(rewards),
        passed=tuple(passed),
        oldest_version=int(flat.gen_version.min()),
    )


def merged_tree(trees: Sequence[GroupTree]) -> GroupTree:
    """`trees` (one rank's groups of one step) as one tree: prefixes they share are one path, each
    rollout keeps its group id, reward and generated tokens, so GRPO's per-group advantages, the loss
    and its gradient are those of the trees trained one by one. `trained_from` is the latest of
    theirs: it is the step's bound for every tree that has one, and no token of the others is older."""
    if len(trees) == 1:
        return trees[0]
    radix = trees[0].flat.to_radix()
    for tree in trees[1:]:
        radix.merge(tree.flat.to_radix())
    flat = radix.flatten()
    return GroupTree(
        group_id="+".join(t.group_id for t in trees),
        harness="+".join(dict.fromkeys(t.harness for t in trees)),
        flat=flat,
        stats=radix.stats(),
        rewards=tuple(r for t in trees for r in t.rewards),
        passed=tuple(p for t in trees for p in t.passed),
        oldest_version=min(t.oldest_version for t in trees),
        trained_from=max(t.trained_from for t in trees),
    )


def on_policy(group: Group) -> tuple[Group, int]:
    """`group` without the rollouts holding a teacher's call, and how many those were."""
    kept = [r for r in group.rollouts if not any(is_teacher(c) for c in r.calls)]
    if len(kept) == len(group.rollouts):
        return group, 0
    return Group(group.id, group.run_id, kept), len(group.rollouts) - len(kept)


def build_batch(
    groups: list[Group],
    version: int,
    max_policy_lag: int,
    failed_reward: float = 0.0,
    mask_stale: bool = False,
) -> Batch:
    """Trees of `groups`' on-policy rollouts; a group with a token generated more than `max_policy_lag`
    versions before `version` is dropped, or with `mask_stale` trained from the bound on (those tokens
    get no loss; dropped only when none is left); a group left with nothing on-policy is empty."""
    batch = Batch(version=version)
    bound = version - max_policy_lag
    for group in groups:
        group, teacher = on_policy(group)
        batch.teacher_rollouts += teacher
        tree = group_tree(group, failed_reward)
        if tree is None:
            batch.empty.append(group.id)
            continue
        fresh = tree.flat.gen_version >= bound
        if tree.oldest_version < bound and mask_stale and fresh.any():
            batch.stale_tokens_masked += int((~fresh).sum())
            oldest = int(tree.flat.gen_version[fresh].min())
            tree = dataclasses.replace(tree, trained_from=bound, oldest_version=oldest)
        batch.lags.append(version - tree.oldest_version)
        if tree.oldest_version < bound:
            batch.dropped.append(group.id)
            batch.dropped_rollouts += len(group.rollouts)
        else:
            batch.trees.append(tree)
    return batch


def assign_to_ranks(trees: list[GroupTree], world_size: int) -> list[list[GroupTree]]:
    """Trees per rank, balanced by tree tokens (largest first onto the least loaded rank); deterministic."""
    shards: list[list[GroupTree]] = [[] for _ in range(world_size)]
    load = [0] * world_size
    for tree in sorted(trees, key=lambda t: (-t.flat.n_positions, t.group_id)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        shards[rank].append(tree)
        load[rank] += tree.flat.n_positions
    return shards
