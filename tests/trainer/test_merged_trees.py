"""A rank's groups of a step trained as one tree (`trainer.merge_group_trees`): the prefix the groups
share (a harness's system prompt) is computed once, and the step's gradient and diagnostics are those
of training one tree per group, for every algorithm, aggregation and off-policy correction.
"""

import numpy as np
import pytest
import torch

from clawgym.trainer.batch import build_batch, merged_tree
from clawgym.trainer.distributed import World
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, prepare_packs, update

SYSTEM = list(range(4000, 4040))  # the harness prompt every task's prompt starts with


def step_groups(hand_group, versions: tuple[int, int, int] = (0, 0, 0)):
    """Four groups under one system prompt: `b` and `c` share a task prompt and a reply (a tree
    position generated in two groups), `d` has no reward variance."""
    return [
        hand_group("a", [*SYSTEM, 11, 12], [[100, 101, 102], [100, 101, 103], [200, 201]], [1.0, 0.0, 0.0], versions[0]),
        hand_group("b", [*SYSTEM, 21], [[300, 301], [300], [310, 311, 312]], [0.0, 1.0, 1.0], versions[1]),
        hand_group("c", [*SYSTEM, 21], [[300, 301], [400]], [1.0, 0.0], versions[2]),
        hand_group("d", [*SYSTEM, 31], [[500], [501]], [1.0, 1.0], versions[2]),
    ]  # fmt: skip


def test_merged_tree_holds_the_shared_prefix_once_and_every_rollout_with_its_group(hand_group):
    batch = build_batch(step_groups(hand_group), 0, max_policy_lag=1)
    merged = merged_tree(batch.trees)
    per_group = sum(t.flat.n_positions for t in batch.trees)
    assert merged.flat.n_positions == per_group - 3 * len(SYSTEM) - 3, (
        "the system prompt is one path for the four groups, and b's and c's task prompt and shared "
        f"reply token one for two: {merged.flat.n_positions} positions against {per_group}"
    )
    assert merged.n_generated == sum(t.n_generated for t in batch.trees)
    assert merged.rewards == tuple(r for t in batch.trees for r in t.rewards)
    groups = [r.group_id for r in merged.flat.rollouts]
    assert groups == ["a"] * 3 + ["b"] * 3 + ["c"] * 2 + ["d"] * 2, groups
    assert merged_tree(batch.trees[:1]) is batch.trees[0]


def largest_difference(grads: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """max over parameters of max|g - g_ref| / max|g_ref|."""
    return max(
        float((g - r).abs().max() / r.abs().max().clamp_min(1e-12))
        for g, r in zip(grads, reference, strict=True)
    )


def grads_and_diagnostics(cfg, batch, version: int, merge: bool):
    torch.manual_seed(0)
    built = build_policy(cfg)
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    seen: list[torch.Tensor] = []
    optimizer.step = lambda: seen.extend(
        p.grad.clone() for p in built.module.parameters() if p.grad is not None
    )  # the gradients the step is given, the weights kept
    world = World()
    packs = prepare_packs(
        built.module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), 4096, world, merge=merge
    )
    diagnostics = update(built.module, optimizer, packs, cfg.algorithm, world, version)
    return seen, diagnostics, sum(len(p) for p in packs)


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "grpo", "tis_cap": 2.0},
        {"name": "grpo", "aggregation": "sequence", "leave_one_out": True},
        {"name": "grpo", "off_policy": "call_geo_mask", "geo_mask_low": 0.5, "geo_mask_high": 2.0},
        {"name": "grpo", "kl_coef": 0.05, "entropy_coef": 0.01},
        {"name": "ppo"},
    ],
    ids=["grpo", "sequence-rloo", "call-geo-mask", "kl-entropy", "ppo"],
)
def test_one_merged_tree_gives_the_gradient_of_a_tree_per_group(trainer_cfg, hand_group, algorithm):
    cfg = trainer_cfg(algorithm={"lr": 1e-3} | algorithm, max_policy_lag=2)
    batch = build_batch(step_groups(hand_group, versions=(0, 1, 1)), 2, cfg.max_policy_lag)
    per_group, d_per_group, tokens_per_group = grads_and_diagnostics(cfg, batch, 2, merge=False)
    merged, d_merged, tokens_merged = grads_and_diagnostics(cfg, batch, 2, merge=True)
    assert tokens_merged < tokens_per_group - 2 * len(SYSTEM), (
        f"the merged step must compute the system prompt once: {tokens_merged} tokens against {tokens_per_group}"
    )
    assert len(merged) == len(per_group) and any(float(g.abs().max()) > 0 for g in merged)
    worst = largest_difference(merged, per_group)
    assert worst < 1e-4, f"the merged tree's gradient differs from a tree per group by {worst:.2e} (relative)"
    for key in ("loss", "entropy", "logprob_mismatch", "clipfrac", "value_loss", "kl_ref"):
        if key in d_per_group:
            assert np.isclose(d_merged[key], d_per_group[key], rtol=1e-4, atol=1e-6), (
                f"{key}: {d_merged[key]} merged against {d_per_group[key]} per group"
            )


def test_stale_tokens_stay_masked_in_a_merged_tree(trainer_cfg, hand_group):
    """`stale_calls: mask`: group a's calls began under version 1 and ended under 2, past the bound
    (2) of step 3 for their first token only; b, c and d are within it. Merged, a's first tokens still
    get no loss (the tree's `trained_from` is the step's bound)."""
    cfg = trainer_cfg(algorithm={"lr": 1e-3}, max_policy_lag=1, stale_calls="mask")
    groups = step_groups(hand_group, versions=(2, 2, 2))
    for rollout in groups[0].rollouts:
        rollout.calls[0].output_versions[0] = 1
    batch = build_batch(groups, 3, cfg.max_policy_lag, mask_stale=True)
    assert [t.trained_from for t in batch.trees] == [2, 0, 0, 0] and batch.stale_tokens_masked == 3, batch
    per_group, _, _ = grads_and_diagnostics(cfg, batch, 3, merge=False)
    merged, _, _ = grads_and_diagnostics(cfg, batch, 3, merge=True)
    worst = largest_difference(merged, per_group)
    assert worst < 1e-4, f"masked stale tokens: merged differs from a tree per group by {worst:.2e}"
    unmasked = build_batch(
        step_groups(hand_group, versions=(2, 2, 2)), 3, cfg.max_policy_lag, mask_stale=True
    )
    other, _, _ = grads_and_diagnostics(cfg, unmasked, 3, merge=True)
    assert any(not torch.allclose(a, b) for a, b in zip(merged, other, strict=True)), (
        "the masked tokens must make a difference, or this test shows nothing"
    )
