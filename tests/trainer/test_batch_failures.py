"""A rollout that ended in an infrastructure failure is never trained, whatever calls it recorded."""

import dataclasses

from clawgym.records import Group
from clawgym.trainer.batch import build_batch, group_tree

PROMPT = [4096, 11, 12, 13]
GOOD, BAD, LOST = [100, 101, 102], [200, 201, 202], [300, 301, 302]


def _failed(group: Group, index: int) -> Group:
    """`group` with rollout `index` ended as an infrastructure failure (status failed, no reward)."""
    rollouts = list(group.rollouts)
    r = rollouts[index]
    rollouts[index] = dataclasses.replace(
        r, rollout=dataclasses.replace(r.rollout, status="failed", reward=None, passed=None, error="pod lost")
    )
    return dataclasses.replace(group, rollouts=rollouts)


def test_a_failed_rollouts_calls_are_left_out_of_its_groups_tree(hand_group):
    """Two finished samples and one whose pod (or orchestrator) was lost mid-rollout: the tree holds the
    two finished ones with their rewards; the lost one's tokens are neither trained nor given failed_reward."""
    group = _failed(hand_group("g", PROMPT, [GOOD, BAD, LOST], [1.0, 0.0, 0.0]), 2)
    tree = group_tree(group, failed_reward=-1.0)
    assert tree is not None and tree.rewards == (1.0, 0.0), f"only the finished samples: {tree and tree.rewards}"
    generated = {int(t) for t in tree.flat.tokens[tree.flat.gen_pos]}
    assert generated == set(GOOD + BAD), f"the lost rollout's tokens must not be trained: {sorted(generated)}"


def test_a_group_whose_every_rollout_failed_is_consumed_as_empty(hand_group):
    """All samples lost (the orchestrator died under them): the group is consumed, trained on nothing."""
    group = _failed(_failed(hand_group("all-lost", PROMPT, [GOOD, LOST], [0.0, 0.0]), 0), 1)
    batch = build_batch([group], version=0, max_policy_lag=1, failed_reward=-1.0)
    assert not batch.trees and batch.empty == ["all-lost"], f"trees {len(batch.trees)}, empty {batch.empty}"
    assert batch.group_ids == ["all-lost"], f"the group must still be consumed: {batch.group_ids}"
