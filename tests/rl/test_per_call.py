"""Per-call training (every captured call's prompt + output as its own sample) is the tree's loss:
same loss, same gradients, each generated (rollout, position) pair trained exactly once."""

import math

import numpy as np
import pytest
import torch

from clawgym.errors import InvalidArgument
from clawgym.rl import grpo_terms, tree_loss
from clawgym.rl.per_call import call_segments, pack_calls
from clawgym.trajectory import tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups
from tests.rl.test_exactness import LOSS_CFG, VOCAB, assert_same, grads, packed_total, tiny_model, zero

SHAPE = TraceShape(
    group_size=3, calls=(2, 4), system_tokens=10, task_tokens=3, observation_tokens=3, output_tokens=4,
    header_tokens=2, p_header=0.8, p_compaction=0.25, p_subagent=0.25, subagent_system_tokens=4, vocab_size=12,
    versions=(0, 1), logprob_mean=-math.log(VOCAB), logprob_std=0.3, temperatures=(None, 0.7),
)  # fmt: skip


def calls_of(groups):
    return [c for g in groups for r in g.rollouts for c in sorted(r.calls, key=lambda c: c.seq)]


@pytest.mark.parametrize("aggregation", ["token", "sequence"])
def test_per_call_training_equals_the_tree(aggregation):
    groups = synthetic_groups(SHAPE, seed=3)
    flat = tree_from_groups(groups).flatten()
    terms = grpo_terms(flat, aggregation=aggregation)
    model = tiny_model("qwen3", torch.float64)
    reference = packed_total(model, flat, terms, None, LOSS_CFG)
    calls = calls_of(groups)
    longest = max(len(c.prompt_ids) + len(c.output_ids) for c in calls)
    packs = pack_calls(flat, terms, calls, budget=2 * longest, dtype=torch.float64)
    assert len(packs) > 1
    assert sum(len(p) for p in packs) == flat.call_tokens, "every call is laid out whole, once"
    assert sum(len(p.rows.token) for p in packs) == len(flat.gen_pos), "each generated pair trained once"
    zero(model)
    total = 0.0
    for pk in packs:
        loss, _ = tree_loss(model, pk, LOSS_CFG, old_logprob=pk.rows.engine_logprob)
        loss.backward()
        total += loss.item()
    assert_same((total, grads(model)), reference[::2], 1e-6, f"per-call vs tree ({aggregation})")


def test_loss_rows_sit_on_each_calls_output_tokens():
    groups = synthetic_groups(SHAPE, seed=5)
    flat = tree_from_groups(groups).flatten()
    calls = calls_of(groups)
    segments = call_segments(flat, grpo_terms(flat), calls)
    for call, (positions, tokens, rows) in zip(calls, segments, strict=True):
        assert np.array_equal(tokens, np.concatenate([call.prompt_ids, call.output_ids]))
        assert (
            np.array_equal(flat.tokens[positions], tokens) and (np.diff(flat.depth()[positions]) == 1).all()
        )
        assert (rows.token >= len(call.prompt_ids)).all(), "no loss on prompt tokens"
    assert any(len(s[2].token) for s in segments)


def test_a_call_outside_the_tree_is_refused():
    groups = synthetic_groups(SHAPE, seed=1)
    flat = tree_from_groups(groups[:1]).flatten()
    call = calls_of(groups)[0]
    stray = type(call)(**{**call.__dict__, "output_ids": np.array([99, 98], np.int32)})
    with pytest.raises(InvalidArgument, match="leave the tree"):
        call_segments(flat, grpo_terms(flat), [stray])
    other = type(call)(**{**call.__dict__, "rollout_id": "nope"})
    with pytest.raises(InvalidArgument, match="not in the tree"):
        call_segments(flat, grpo_terms(flat), [other])
