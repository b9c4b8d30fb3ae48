"""The FlexAttention path on CPU: the BlockMask is the tree mask, and the flex forward equals SDPA's.

torch has no FlexAttention backward on CPU, so the gradients against the per-path reference are
checked on CUDA only (tests/rl/test_flex_gpu.py, bench/gpu.sh). What CPU can check is everything
before them: the mask_mod admits exactly `PackedSequence.allowed` (with and without a sliding
window), the BlockMask skips blocks (that is its point), and transformers hands our BlockMask to
its flex kernel unchanged, so a packed tree's logprobs equal those of the SDPA path.
"""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from clawgym.rl import grpo_terms, merge_terms, pack, packed_forward
from clawgym.rl.packing import flex_block_mask, sdpa_mask
from clawgym.trajectory import tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

flex = pytest.importorskip("torch.nn.attention.flex_attention", reason="this torch has no FlexAttention")

VOCAB = 64
SHAPE = TraceShape(group_size=4, calls=(3, 5), system_tokens=64, task_tokens=8, observation_tokens=8,
                   output_tokens=8, vocab_size=VOCAB, logprob_mean=-math.log(VOCAB), logprob_std=0.3,
                   p_compaction=0.2, p_subagent=0.2)  # fmt: skip


def _flat():
    return tree_from_groups(synthetic_groups(SHAPE, seed=0)).flatten()


@pytest.mark.parametrize("window", [None, 16])
def test_flex_block_mask_admits_exactly_the_tree_mask(window):
    """Densified, the BlockMask's mask_mod is `allowed` (and the window along the path), pair by
    pair, on whole trees and on split slices; and whole blocks are skipped (sparsity > 0)."""
    flat = _flat()
    for pk in [*pack(flat), *pack(flat, int(flat.depth().max()) + 40)]:
        T = len(pk)
        block = flex_block_mask(pk, "cpu", window)
        dense = flex.create_mask(block.mask_mod, None, None, T, T, device="cpu")
        expected = sdpa_mask(pk, window)
        assert torch.equal(dense, expected), f"flex mask differs from the tree mask at {T} tokens"
    whole = flex_block_mask(pack(flat)[0], "cpu")
    assert whole.sparsity() > 0, "a tree with branches must leave some 128x128 blocks out"


@pytest.mark.slow  # torch.compile of FlexAttention on CPU: ~40 s on 2 cores
def test_flex_packed_forward_equals_sdpa_on_cpu():
    """The same weights, the same packed tree: logprobs with attn_implementation="flex_attention"
    (our BlockMask) equal those with SDPA (our dense mask) within float32 rounding."""
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)  # fmt: skip
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    flat = _flat()
    [pk] = pack(flat, None, merge_terms(grpo_terms(flat)))
    with torch.no_grad():
        expected = packed_forward(model, pk).logprob
        model.set_attn_implementation("flex_attention")
        try:
            got = packed_forward(model, pk).logprob
        except NotImplementedError as e:  # a torch whose CPU FlexAttention lacks even the forward
            pytest.skip(f"FlexAttention forward unsupported on CPU here: {e}")
        finally:
            model.set_attn_implementation("sdpa")
    diff = (got - expected).abs().max().item()
    assert diff < 1e-5, f"flex-packed logprobs differ from SDPA-packed by {diff}"
