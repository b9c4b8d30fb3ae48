"""Builds radix trees from the store's records: a rollout's calls, a GRPO group, a batch of groups.

Each call contributes one sequence `prompt_ids + output_ids`; the output tokens are generated (with
the engine's logprobs and per-token policy versions), the prompt tokens are context. The tree rules
(generated wins over context within a rollout, per-rollout flags across rollouts) live in
`radix.py`; this module only reads records and checks them.
"""

import math
from collections.abc import Iterable, Sequence

import numpy as np

from clawgym.errors import InvalidArgument
from clawgym.records import Call, Group, RolloutWithCalls
from clawgym.trajectory.radix import RadixTree, RolloutInfo


def insert_call(tree: RadixTree, rollout: int, call: Call) -> None:
    """Insert one call of the rollout with index `rollout` into `tree`."""
    prompt = np.asarray(call.prompt_ids)
    output = np.asarray(call.output_ids)
    logprobs = np.asarray(call.output_logprobs, dtype=np.float32)
    versions = np.asarray(call.output_versions, dtype=np.int32)
    where = f"call {call.seq} of rollout {call.rollout_id!r}"
    if prompt.ndim != 1 or output.ndim != 1 or prompt.shape[0] == 0:
        raise InvalidArgument(f"{where}: prompt_ids must be non-empty and ids 1-D")
    if logprobs.shape != output.shape:
        raise InvalidArgument(f"{where}: {logprobs.shape[0]} logprobs for {output.shape[0]} output tokens")
    if versions.shape[0] == 0 and output.shape[0]:
        versions = np.full(output.shape, call.policy_version, dtype=np.int32)  # older records: one version
    if versions.shape != output.shape:
        raise InvalidArgument(f"{where}: {versions.shape[0]} versions for {output.shape[0]} output tokens")
    if not np.isfinite(logprobs).all():
        raise InvalidArgument(f"{where}: output logprobs must be finite")
    n_prompt, n_output = prompt.shape[0], output.shape[0]
    # the engine reports greedy (temperature 0) logprobs at temperature 1; None: not recorded
    t = math.nan if call.temperature is None else (call.temperature or 1.0)
    tree.insert(
        np.concatenate([prompt, output]).astype(np.int32),
        rollout,
        generated=np.concatenate([np.zeros(n_prompt, bool), np.ones(n_output, bool)]),
        logprobs=np.concatenate([np.full(n_prompt, np.nan, np.float32), logprobs]),
        versions=np.concatenate([np.full(n_prompt, -1, np.int32), versions]),
        temperatures=np.concatenate(
            [np.full(n_prompt, np.nan, np.float32), np.full(n_output, t, np.float32)]
        ),
    )


def tree_from_calls(
    calls: Sequence[Call], *, group_id: str = "", reward: float | None = None, tree: RadixTree | None = None
) -> RadixTree:
    """One rollout's calls (all with the same `rollout_id`) inserted in `seq` order."""
    if not calls:
        raise InvalidArgument("a rollout needs at least one call to build a tree")
    rollout_ids = {c.rollout_id for c in calls}
    if len(rollout_ids) != 1:
        raise InvalidArgument(f"calls of several rollouts given to tree_from_calls: {sorted(rollout_ids)}")
    tree = tree if tree is not None else RadixTree()
    info = RolloutInfo(calls[0].rollout_id, group_id, math.nan if reward is None else float(reward))
    index = tree.add_rollout(info)
    for call in sorted(calls, key=lambda c: c.seq):
        insert_call(tree, index, call)
    return tree


def tree_from_rollout(rollout: RolloutWithCalls, tree: RadixTree | None = None) -> RadixTree:
    """A rollout with its calls, its group and its reward (NaN while unrewarded)."""
    r = rollout.rollout
    return tree_from_calls(rollout.calls, group_id=r.group_id, reward=r.reward, tree=tree)


def tree_from_group(group: Group, tree: RadixTree | None = None) -> RadixTree:
    """All rollouts of a GRPO group in one tree: the shared system prompt and task are stored once.
    Rollouts without calls (a harness that failed before its first request) are skipped."""
    tree = tree if tree is not None else RadixTree()
    for rollout in group.rollouts:
        if rollout.calls:
            tree_from_rollout(rollout, tree)
    return tree


def tree_from_groups(groups: Iterable[Group]) -> RadixTree:
    """A batch of groups in one tree (a batch shares at least the harness' system prompt)."""
    tree = RadixTree()
    for group in groups:
        tree_from_group(group, tree)
    return tree
