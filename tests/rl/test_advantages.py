"""Advantages: GRPO group normalisation by value, GAE against a direct reference, both placed on trees.

Token ids: 1 <sys>, 2 task, 3 <assistant>, 4 "ls", 5 <tool>, 6 "cat", 7 "done", 8 "pwd".
"""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clawgym.errors import InvalidArgument
from clawgym.rl import gae, gae_terms, grpo_advantages, grpo_terms, merge_terms
from clawgym.trajectory import RadixTree, RolloutInfo

SYS, TASK, ASSIST, LS, TOOL, CAT, DONE, PWD = range(1, 9)


def test_grpo_normalises_within_each_group():
    rewards = torch.tensor([1.0, 0.0, 0.5, 3.0, 1.0], dtype=torch.float64)
    group = torch.tensor([0, 0, 0, 1, 1])
    adv = grpo_advantages(rewards, group, eps=0.0)
    std0 = math.sqrt(1 / 6)
    assert adv.tolist() == pytest.approx([0.5 / std0, -0.5 / std0, 0.0, 1.0, -1.0]), (
        "(r - mean) / std per group"
    )
    raw = grpo_advantages(rewards, group, scale_by_std=False)
    assert raw.tolist() == pytest.approx([0.5, -0.5, 0.0, 1.0, -1.0]), "Dr. GRPO: no std scaling"
    loo = grpo_advantages(rewards, group, scale_by_std=False, leave_one_out=True)
    assert loo.tolist() == pytest.approx([0.75, -0.75, 0.0, 2.0, -2.0]), "RLOO: baseline = mean of the others"


def test_grpo_gives_zero_to_a_lonely_rollout_and_refuses_missing_rewards():
    assert grpo_advantages(torch.tensor([5.0]), torch.tensor([0])).tolist() == [0.0], (
        "nothing to compare with"
    )
    same = grpo_advantages(torch.tensor([1.0, 1.0]), torch.tensor([0, 0]))
    assert same.tolist() == [0.0, 0.0], "equal rewards carry no signal"
    with pytest.raises(InvalidArgument):
        grpo_advantages(torch.tensor([1.0, float("nan")]), torch.tensor([0, 0]))


def gae_reference(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """A_t = Σ_l (γλ)^l δ_{t+l}, written out as the definition."""
    T = len(rewards)
    v = [*values, 0.0]
    delta = [rewards[t] + gamma * v[t + 1] - v[t] for t in range(T)]
    return [sum((gamma * lam) ** (k - t) * delta[k] for k in range(t, T)) for t in range(T)]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.floats(-2, 2), st.floats(-2, 2)), min_size=1, max_size=30),
    st.floats(0.5, 1.0),
    st.floats(0.0, 1.0),
)
def test_gae_matches_its_definition(steps, gamma, lam):
    rewards = [r for r, _ in steps]
    values = [v for _, v in steps]
    adv, ret = gae(
        torch.tensor(rewards, dtype=torch.float64), torch.tensor(values, dtype=torch.float64), gamma, lam
    )
    want = gae_reference(rewards, values, gamma, lam)
    assert adv.tolist() == pytest.approx(want, abs=1e-9), "GAE backward loop must equal the sum formula"
    assert ret.tolist() == pytest.approx([a + v for a, v in zip(want, values, strict=True)], abs=1e-9), (
        "R = A + V"
    )


def branched_rollout() -> RadixTree:
    """One rollout: it generates 'ls', then its history forks (two different tool results) into
    'cat' and 'done': two paths through the generated 'ls'."""
    tree = RadixTree()
    tree.add_rollout(RolloutInfo("r", "g", 1.0))
    prompt = [SYS, TASK, ASSIST]
    tree.insert([*prompt, LS], "r", [0, 0, 0, 1], logprobs=[0, 0, 0, -1.0])
    tree.insert([*prompt, LS, TOOL, ASSIST, CAT], "r", [0] * 6 + [1], logprobs=[0] * 6 + [-1.0])
    tree.insert([*prompt, LS, PWD, ASSIST, DONE], "r", [0] * 6 + [1], logprobs=[0] * 6 + [-1.0])
    return tree


def test_gae_on_a_tree_runs_per_path_over_generated_steps_and_averages_a_shared_token():
    flat = branched_rollout().flatten()
    values = np.full(flat.n_positions, np.nan)
    tok = flat.tokens
    values[tok == LS], values[tok == CAT], values[tok == DONE] = 0.2, 0.6, 0.3
    terms = gae_terms(flat, values, gamma=0.5, lam=0.5, aggregation="sum")
    by_path = {}
    for p in range(len(terms.path_rollout)):
        rows = terms.rows_of(p)
        by_path[tuple(tok[terms.pos[rows]].tolist())] = terms.adv[rows].tolist()
    # path ls -> cat: δ_cat = 1 - 0.6; δ_ls = 0 + 0.5·0.6 - 0.2; A_ls = δ_ls + γλ·A_cat, γλ = 0.25
    assert by_path[(LS, CAT)] == pytest.approx([0.1 + 0.25 * 0.4, 0.4]), "GAE over generated steps of path 1"
    assert by_path[(LS, DONE)] == pytest.approx([-0.05 + 0.25 * 0.7, 0.7]), "and of path 2"
    merged = merge_terms(terms)
    ls = merged.pos == int(np.flatnonzero(tok == LS)[0])
    assert merged.weight[ls].tolist() == [1.0], "the shared 'ls' counts once (two halves)"
    assert (merged.adv_pos + merged.adv_neg)[ls].tolist() == pytest.approx([(0.2 + 0.125) / 2]), (
        "mean of its paths"
    )


def test_grpo_on_a_tree_applies_the_rollout_advantage_to_every_generated_token_once():
    tree = branched_rollout()
    tree.add_rollout(RolloutInfo("s", "g", 0.0))
    tree.insert([SYS, TASK, ASSIST, PWD], "s", [0, 0, 0, 1], logprobs=[0, 0, 0, -1.0])
    terms = grpo_terms(tree.flatten(), scale_by_std=False, aggregation="token")
    merged = merge_terms(terms)
    assert merged.weight.sum() == pytest.approx(1.0), "token aggregation: weights sum to one over the tree"
    assert len(merged.pos) == 4 and merged.weight.tolist() == pytest.approx([0.25] * 4), "ls, cat, done, pwd"
    assert (merged.adv_pos + merged.adv_neg).tolist() == pytest.approx([0.125, 0.125, 0.125, -0.125]), (
        "±0.5·w"
    )
    seq = merge_terms(grpo_terms(tree.flatten(), scale_by_std=False, aggregation="sequence"))
    assert seq.weight.tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2]), "1/(|o_r|·R) per rollout"


def test_gae_refuses_missing_values_or_rewards():
    flat = branched_rollout().flatten()
    with pytest.raises(InvalidArgument):
        gae_terms(flat, np.full(flat.n_positions, np.nan))
    with pytest.raises(InvalidArgument):
        gae_terms(flat, np.zeros(3))
