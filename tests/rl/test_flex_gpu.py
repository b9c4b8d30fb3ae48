"""The GPU path: FlexAttention with a BlockMask built from the tree (skipped without CUDA).

FlexAttention has no backward on CPU, so CI (CPU only) never runs this; on a GPU it checks the
same invariant as test_exactness.py: the flex-packed tree's loss and gradients equal the per-path
sum computed with SDPA and HF's own causal mask.
"""

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from clawgym.rl import grpo_terms, merge_terms, pack, tree_loss
from clawgym.rl.per_path import path_loss, path_rows
from clawgym.trainer.config import AlgorithmConfig
from clawgym.trajectory import tree_from_groups
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention training needs a CUDA GPU"),
]


def test_flex_attention_block_mask_packs_exactly_on_gpu():
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16)  # fmt: skip
    cfg._attn_implementation = "flex_attention"
    flex = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).cuda().eval()
    cfg_ref = Qwen3Config(**cfg.to_dict())
    cfg_ref._attn_implementation = "sdpa"
    ref = AutoModelForCausalLM.from_config(cfg_ref, dtype=torch.float32).cuda().eval()
    ref.load_state_dict(flex.state_dict())
    shape = TraceShape(group_size=4, calls=(3, 5), system_tokens=64, task_tokens=8, observation_tokens=8,
                       output_tokens=8, vocab_size=64, logprob_mean=-math.log(64), logprob_std=0.3,
                       p_compaction=0.2, p_subagent=0.2)  # fmt: skip
    flat = tree_from_groups(synthetic_groups(shape, seed=0)).flatten()
    terms = grpo_terms(flat)
    cfg_loss = AlgorithmConfig(tis_cap=2.0).loss_config()
    total = 0.0
    for pk in pack(flat, int(flat.depth().max()) + 64, merge_terms(terms)):
        loss, _ = tree_loss(flex, pk, cfg_loss, old_logprob=pk.rows.engine_logprob.cuda())
        loss.backward()
        total += loss.item()
    expected = 0.0
    for p in range(len(terms.path_rollout)):
        rows = path_rows(terms, p, flat.path_positions(int(terms.path_node[p])))
        loss, _ = path_loss(ref, flat, terms, p, cfg_loss, old_logprob=rows.engine_logprob.cuda())
        loss.backward()
        expected += loss.item()
    assert abs(total - expected) <= 1e-4 * max(1.0, abs(expected)), (
        f"flex loss {total} != per-path {expected}"
    )
    for (name, a), b in zip(flex.named_parameters(), ref.parameters(), strict=True):
        err = ((a.grad - b.grad).abs().max() / b.grad.abs().max().clamp(min=1.0)).item()
        assert err <= 1e-4, f"{name}: flex-packed gradient differs by {err:.3g}"
