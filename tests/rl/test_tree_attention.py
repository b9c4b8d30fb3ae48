"""Block-sparse tree attention: the layout covers exactly the tree mask, and the attention equals
SDPA with the dense mask, values and gradients (the model-level exactness against the per-path
reference is in test_exactness.py, parametrized over both attentions)."""

import math

import pytest
import torch

from clawgym.rl import pack
from clawgym.rl.packing import sdpa_mask
from clawgym.rl.tree_attention import (
    MAX_BLOCK,
    MIN_BLOCK,
    TREE_ATTENTION,
    block_tokens,
    tree_attention_forward,
    tree_blocks,
)
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.policy import build_policy
from clawgym.trajectory import tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups


def packed_tree(seed: int, group_size: int = 4):
    shape = TraceShape(
        group_size=group_size, calls=(2, 5), system_tokens=12, task_tokens=4, observation_tokens=4,
        output_tokens=5, header_tokens=2, p_compaction=0.25, p_subagent=0.25, subagent_system_tokens=5,
        vocab_size=20,
    )  # fmt: skip
    [pk] = pack(tree_from_groups(synthetic_groups(shape, seed)).flatten())
    return pk


def covered(pk, block: int, window: int | None = None) -> torch.Tensor:
    """int (T, T): how many times the layout computes each allowed (query, key) pair."""
    layout = tree_blocks(pk.subtree_end, pk.position_ids, "cpu", block)
    T = len(pk)
    queries = torch.cat([b.queries for b in layout.buckets])
    assert torch.equal(queries[layout.order], torch.arange(T)), "every slot's output is its own query row"
    real = torch.zeros(len(queries), dtype=torch.bool)
    real[layout.order] = True  # the other rows pad a short last block: their outputs are dropped
    count = torch.zeros(T, T, dtype=torch.long)
    offset = 0
    for bucket, mask in zip(layout.buckets, layout.masks(window), strict=True):
        n, _, B, K = mask.shape
        q = bucket.queries.view(n, B, 1).expand(n, B, K)
        k = bucket.keys.view(n, 1, K).expand(n, B, K)
        m = mask[:, 0] & real[offset : offset + n * B].view(n, B, 1)
        count.index_put_((q[m], k[m]), torch.ones(int(m.sum()), dtype=torch.long), accumulate=True)
        offset += n * B
    return count


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("block", [1, 7, 16, 10_000])
def test_the_blocks_compute_every_allowed_pair_once_and_nothing_else(seed, block):
    """Blocks crossing into sibling subtrees mask the ancestors that are not the sibling's."""
    pk = packed_tree(seed)
    assert len(pk) > 2 * 16, "test setup: the tree spans several default blocks"
    count = covered(pk, block)
    assert torch.equal(count, pk.allowed().long()), "each allowed pair once, no masked pair"


def test_a_sliding_window_is_measured_along_the_path():
    pk = packed_tree(3)
    want = sdpa_mask(pk, sliding_window=4)[0, 0]
    assert not torch.equal(want, pk.allowed()), "test setup: the window must cut some pairs"
    assert torch.equal(covered(pk, 8, window=4), want.long())


def test_block_size_grows_with_the_sequence_within_bounds():
    assert block_tokens(1) == MIN_BLOCK and block_tokens(10**9) == MAX_BLOCK
    assert block_tokens(4096) == 64 and block_tokens(1400) == 32
    assert all(2 ** int(math.log2(block_tokens(n))) == block_tokens(n) for n in (50, 900, 5000))


class _Attention(torch.nn.Module):
    num_key_value_groups = 2  # grouped-query attention, as Qwen3 and SmolLM2 use


@pytest.mark.parametrize("window", [None, 5])
def test_tree_attention_equals_sdpa_with_the_dense_tree_mask_values_and_gradients(window):
    pk = packed_tree(4, group_size=5)
    T, H, D = len(pk), 4, 8
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, h, T, D, dtype=torch.float64, requires_grad=True) for h in (H, H // 2, H // 2))
    layout = tree_blocks(pk.subtree_end, pk.position_ids, "cpu", 16)
    assert len(layout.buckets) > 1, "test setup: several buckets of different key counts"
    out, _ = tree_attention_forward(
        _Attention(), q, k, v, None, scaling=D**-0.5, sliding_window=window, tree_blocks=layout
    )
    mask = sdpa_mask(pk, sliding_window=window)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask, scale=D**-0.5
    ).transpose(1, 2)
    assert out.shape == (1, T, H, D)
    assert (out - ref).abs().max() < 1e-12
    g = torch.randn_like(ref)
    got = torch.autograd.grad(out, (q, k, v), g)
    want = torch.autograd.grad(ref, (q, k, v), g)
    for a, b in zip(got, want, strict=True):
        assert (a - b).abs().max() < 1e-12


def test_the_trainer_trains_with_tree_attention_on_a_cpu_and_sdpa_elsewhere():
    cfg = TrainerConfig(model="tiny-qwen3")
    assert build_policy(cfg).module.lm.config._attn_implementation == TREE_ATTENTION
    assert build_policy(cfg, device="cuda").module.lm.config._attn_implementation == "sdpa"
