"""Block-sparse SDPA on a packed tree (rl.block_attention) is the same attention as the dense 4D mask:
same hidden states, and the tree's loss and gradients still equal the per-path reference."""

import math

import torch

from clawgym.rl import block_attention as ba
from clawgym.rl import grpo_terms, merge_terms, pack
from clawgym.rl.forward import hidden_states
from clawgym.rl.packing import sdpa_mask
from clawgym.trajectory import tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups
from tests.rl.test_exactness import LOSS_CFG, VOCAB, assert_same, packed_total, per_path_total, tiny_model

SHAPE = TraceShape(
    group_size=4, calls=(3, 5), system_tokens=120, task_tokens=10, observation_tokens=8, output_tokens=8,
    header_tokens=2, p_compaction=0.2, p_subagent=0.2, subagent_system_tokens=10, vocab_size=VOCAB,
    versions=(0, 1), logprob_mean=-math.log(VOCAB), logprob_std=0.3,
)  # fmt: skip


def big_tree():
    flat = tree_from_groups(synthetic_groups(SHAPE, seed=11)).flatten()
    assert flat.n_positions > 2 * ba.BLOCK, "the tree must span several blocks"
    return flat


def test_plan_keeps_every_allowed_key_and_skips_most_others():
    flat = big_tree()
    (pk,) = pack(flat, None, merge_terms(grpo_terms(flat)))
    mask = sdpa_mask(pk)
    blocks = ba.plan(mask)
    assert sum(int(b.mask.sum()) for b in blocks) == int(mask.sum()), "no allowed pair dropped"
    work = sum((b.hi - b.lo) * len(b.keys) for b in blocks)
    assert work < 0.6 * len(pk) ** 2, f"{work} pairs of {len(pk) ** 2}: masked keys are not skipped"


def test_block_sparse_hidden_states_equal_the_dense_mask(monkeypatch):
    model = tiny_model("qwen3", torch.float64)
    flat = big_tree()
    (pk,) = pack(flat, None, merge_terms(grpo_terms(flat)))
    seen = []
    real = ba.sdpa_attention_forward

    def spy(module, query, *args, **kwargs):
        seen.append(query.shape[2])
        return real(module, query, *args, **kwargs)

    monkeypatch.setattr(ba, "sdpa_attention_forward", spy)
    blocked = hidden_states(model, pk)
    assert seen and max(seen) <= ba.BLOCK, "the attention layers did not run block by block"
    assert model.config._attn_implementation == "sdpa", "the model's attention is restored"
    dense = model.base_model(
        input_ids=pk.input_ids[None],
        position_ids=pk.position_ids[None],
        attention_mask=sdpa_mask(pk),
        use_cache=False,
    ).last_hidden_state[0]
    assert torch.allclose(blocked, dense, atol=1e-10, rtol=0), float((blocked - dense).abs().max())


def test_block_sparse_tree_loss_and_gradients_equal_the_per_path_reference():
    model = tiny_model("llama", torch.float64)
    flat = big_tree()
    terms = grpo_terms(flat)
    reference = per_path_total(model, flat, terms, LOSS_CFG)
    loss, n_packs, g = packed_total(model, flat, terms, None, LOSS_CFG)
    assert n_packs == 1
    assert_same((loss, g), reference, 1e-6, "block-sparse tree vs per-path")
