"""SFT's core invariant: the tree-packed NLL of the demonstrated tokens and every parameter gradient
equal the sum over rollout paths trained one at a time through HF's causal forward, whole or split.

Same tiny models, trees and tolerances as tests/rl/test_exactness.py. The synthetic trees share
generated tokens between samples with different engine logprobs, versions and temperatures: SFT
rows merge by position alone and score at T = 1, so each shared token is computed once."""

import numpy as np
import pytest
import torch

from clawgym.rl import merge_terms, pack
from clawgym.rl.sft import path_nll, sft_terms, tree_nll
from tests.rl.test_exactness import (
    ATTNS,
    CONFIGS,
    TOLERANCE,
    assert_same,
    grads,
    random_tree,
    split_budget,
    tiny_model,
    zero,
)


def packed_nll(model, flat, terms, budget):
    """Σ over micro-batches of tree_nll, gradients accumulated; returns (loss, n_packs, rows, grads)."""
    packs = pack(flat, budget, merge_terms(terms), dtype=next(model.parameters()).dtype)
    zero(model)
    total, rows = 0.0, 0
    for pk in packs:
        loss, d = tree_nll(model, pk)
        loss.backward()
        total += loss.item()
        rows += int(d["rows"])
    return total, len(packs), rows, grads(model)


def per_path_nll(model, flat, terms):
    zero(model)
    total = 0.0
    for p in range(len(terms.path_rollout)):
        loss, _ = path_nll(model, flat, terms, p)
        loss.backward()
        total += loss.item()
    return total, grads(model)


@pytest.mark.parametrize("attn", ATTNS)
@pytest.mark.parametrize("arch", sorted(CONFIGS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_sft_packed_tree_equals_sum_over_paths_whole_and_split(arch, dtype, attn, aggregation):
    model = tiny_model(arch, dtype, attn)
    flat = random_tree(seed=5, group_size=4, temperatures=(0.7, None, 1.0))
    terms = sft_terms(flat, aggregation)
    linear = per_path_nll(model, flat, terms)
    for budget in (None, split_budget(flat, 0.3)):
        loss, n_packs, rows, g = packed_nll(model, flat, terms, budget)
        assert budget is None or n_packs > 1, "the split case must really split"
        assert rows == len(np.unique(flat.gen_pos)), (
            "one row per generated position: shared tokens of several samples are computed once"
        )
        assert_same(
            (loss, g), (linear[0], linear[1]), TOLERANCE[dtype], f"SFT {arch} {dtype} {attn} {budget}"
        )


def test_token_aggregation_makes_the_loss_the_mean_nll_per_demonstrated_token():
    """With "token" aggregation the weights of a tree sum to 1: the loss is the mean of -logπ over
    the (rollout, position) pairs generated, a token two samples generated counting twice."""
    model = tiny_model("qwen3", torch.float64)
    flat = random_tree(seed=3, group_size=3)
    terms = sft_terms(flat, "token")
    assert terms.weight.sum() == pytest.approx(1.0), "a tree's token weights sum to 1"
    loss, *_ = packed_nll(model, flat, terms, None)
    with torch.no_grad():
        # the mean by hand: every generated (rollout, position) pair's -logπ on one of its paths
        nll = []
        for r in range(len(flat.rollouts)):
            seen = set()
            for p in np.flatnonzero(terms.path_rollout == r):
                positions = flat.path_positions(int(terms.path_node[p]))
                ids = torch.from_numpy(flat.tokens[positions].astype(np.int64))
                logp = torch.log_softmax(model(input_ids=ids[None]).logits[0], -1)
                for pos in terms.pos[terms.path == p]:
                    if pos not in seen:
                        seen.add(pos)
                        slot = int(np.searchsorted(positions, pos))
                        nll.append(-logp[slot - 1, ids[slot]].item())
    assert len(nll) == len(flat.gen_pos), "every generated (rollout, position) pair is counted"
    assert loss == pytest.approx(float(np.mean(nll)), rel=1e-9), "token aggregation is the mean NLL"
