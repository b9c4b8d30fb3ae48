"""Tree packing checked by value on a hand-built group: layout, masks, position ids, loss rows, splits.

Token ids: 1 <sys>, 2 <user>, 3 "fix the bug", 4 <assistant>, 5 "ls", 6 "a.py", 7 "cat", 8 "pwd", 9 "done".
Three samples of one task: a = "ls a.py" (reward 1), b = "ls cat" (reward 0), c = "pwd done" (0.5).
Pre-order positions: 0 <sys> 1 <user> 2 task 3 <assistant> 4 ls 5 a.py 6 cat 7 pwd 8 done.
"""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from clawgym.errors import InvalidArgument
from clawgym.rl import grpo_terms, merge_terms, pack
from clawgym.rl.forward import packed_forward, tree_attention_mask
from clawgym.rl.packing import eager_mask, sdpa_mask
from clawgym.rl.per_path import path_forward
from clawgym.trajectory import RadixTree, RolloutInfo

SYS, USER, TASK, ASSIST, LS, A_PY, CAT, PWD, DONE = range(1, 10)
PROMPT = [SYS, USER, TASK, ASSIST]


def group_tree(b_ls_logprob: float = -1.0) -> RadixTree:
    tree = RadixTree()
    for rid, reward in (("a", 1.0), ("b", 0.0), ("c", 0.5)):
        tree.add_rollout(RolloutInfo(rid, "g", reward))
    mask = [False] * 4 + [True, True]
    tree.insert([*PROMPT, LS, A_PY], "a", mask, logprobs=[0] * 4 + [-1.0, -2.0])
    tree.insert([*PROMPT, LS, CAT], "b", mask, logprobs=[0] * 4 + [b_ls_logprob, -3.0])
    tree.insert([*PROMPT, PWD, DONE], "c", mask, logprobs=[0] * 4 + [-0.5, -0.25])
    return tree


def test_one_packed_sequence_has_the_tree_layout_mask_and_positions():
    [pk] = pack(group_tree().flatten())
    assert pk.input_ids.tolist() == [*PROMPT, LS, A_PY, CAT, PWD, DONE], "pre-order, each token once"
    assert pk.position_ids.tolist() == [0, 1, 2, 3, 4, 5, 5, 4, 5], "position id = depth in the tree"
    assert pk.parent.tolist() == [-1, 0, 1, 2, 3, 4, 4, 3, 7], "cat hangs under ls, pwd under <assistant>"
    expected = np.array([
        # <sys> <user> task <asst> ls a.py cat pwd done   (keys)
        [1, 0, 0, 0, 0, 0, 0, 0, 0],  # <sys>
        [1, 1, 0, 0, 0, 0, 0, 0, 0],  # <user>
        [1, 1, 1, 0, 0, 0, 0, 0, 0],  # task
        [1, 1, 1, 1, 0, 0, 0, 0, 0],  # <assistant>
        [1, 1, 1, 1, 1, 0, 0, 0, 0],  # ls
        [1, 1, 1, 1, 1, 1, 0, 0, 0],  # a.py
        [1, 1, 1, 1, 1, 0, 1, 0, 0],  # cat: not a.py, its sibling
        [1, 1, 1, 1, 0, 0, 0, 1, 0],  # pwd: not the ls subtree
        [1, 1, 1, 1, 0, 0, 0, 1, 1],  # done
    ], dtype=bool)  # fmt: skip
    mask = sdpa_mask(pk)
    assert mask.shape == (1, 1, 9, 9) and mask.dtype == torch.bool, "a 4D boolean mask for SDPA"
    assert np.array_equal(mask[0, 0].numpy(), expected), f"tree mask:\n{mask[0, 0].int().numpy()}"
    additive = eager_mask(pk, torch.float32)[0, 0]
    assert (additive[torch.from_numpy(expected)] == 0).all(), "eager: attended keys add 0"
    assert (additive[torch.from_numpy(~expected)] == torch.finfo(torch.float32).min).all(), (
        "masked keys add -inf"
    )
    window = sdpa_mask(pk, sliding_window=2)[0, 0]
    assert window[8].tolist() == [False] * 7 + [True, True], (
        "window of 2 along the path: done sees pwd, itself"
    )
    assert window[6].tolist() == [False] * 4 + [True, False, True, False, False], "cat sees ls and itself"


def test_loss_rows_carry_merged_advantages_by_value():
    """Dr. GRPO (no std): A = r - mean = +0.5, -0.5, 0; token aggregation w = 1/6 (six generated pairs).
    a and b generated "ls" with the same engine logprob: one row with A⁺ = 0.5/6 and A⁻ = -0.5/6."""
    flat = group_tree().flatten()
    terms = merge_terms(grpo_terms(flat, scale_by_std=False))
    [pk] = pack(flat, None, terms, dtype=torch.float64)
    rows = pk.rows
    assert pk.input_ids[rows.token].tolist() == [LS, A_PY, CAT, PWD, DONE], "one row per trainable token"
    assert torch.allclose(rows.adv_pos, torch.tensor([0.5, 0.5, 0, 0, 0], dtype=torch.float64) / 6), "A⁺"
    assert torch.allclose(rows.adv_neg, torch.tensor([-0.5, 0, -0.5, 0, 0], dtype=torch.float64) / 6), "A⁻"
    assert torch.allclose(rows.weight, torch.tensor([2, 1, 1, 1, 1], dtype=torch.float64) / 6), "Σ w"
    assert rows.engine_logprob.tolist() == [-1.0, -2.0, -3.0, -0.5, -0.25], "engine logprobs per row"


def test_a_shared_token_with_different_engine_logprobs_keeps_two_rows():
    """Different engine logprobs mean different PPO ratios against the engine: no merge."""
    flat = group_tree(b_ls_logprob=-1.5).flatten()
    terms = merge_terms(grpo_terms(flat, scale_by_std=False))
    [pk] = pack(flat, None, terms)
    ls_rows = (pk.input_ids[pk.rows.token] == LS).nonzero().squeeze(1)
    assert len(ls_rows) == 2, "a's and b's 'ls' stay apart"
    assert sorted(pk.rows.engine_logprob[ls_rows].tolist()) == [-1.5, -1.0], "each with its engine logprob"
    assert sorted((pk.rows.adv_pos + pk.rows.adv_neg)[ls_rows].tolist()) == pytest.approx([-0.5 / 6, 0.5 / 6])


def test_splitting_repeats_the_ancestor_path_and_counts_each_row_once():
    flat = group_tree().flatten()
    terms = merge_terms(grpo_terms(flat))
    packs = pack(flat, 6, terms)
    assert [p.input_ids.tolist() for p in packs] == [
        [*PROMPT, LS, A_PY],
        [*PROMPT, LS, CAT],
        [*PROMPT, PWD, DONE],
    ], "each slice is preceded by its ancestor path"
    assert [p.owned.tolist() for p in packs] == [
        [True] * 6,
        [False] * 5 + [True],
        [False] * 4 + [True, True],
    ], "repeated ancestors are context, not owned"
    assert [p.position_ids.tolist() for p in packs] == [
        [0, 1, 2, 3, 4, 5],
        [0, 1, 2, 3, 4, 5],
        [0, 1, 2, 3, 4, 5],
    ]
    owned_rows = [int(p.tree_pos[t]) for p in packs for t in p.rows.token]
    assert sorted(owned_rows) == terms.pos.tolist(), "every row lives in exactly one slice"
    assert all(bool(p.owned[p.rows.token].all()) for p in packs), "rows sit on owned slots only"


def test_a_budget_smaller_than_a_path_is_refused():
    with pytest.raises(InvalidArgument):
        pack(group_tree().flatten(), 5)


def test_the_tree_mask_reaches_the_model_and_is_not_replaced_by_a_causal_mask():
    """'done' (under pwd) must not see the ls subtree packed before it. With the tree mask its
    logprob equals the plain forward of its own path; under a causal mask over the same packed
    sequence (same position ids) it differs, so the check can fail."""
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8)  # fmt: skip
    cfg._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float64).eval()
    flat = group_tree().flatten()
    [pk] = pack(flat, None, merge_terms(grpo_terms(flat)), dtype=torch.float64)
    assert isinstance(tree_attention_mask(model, pk, torch.device("cpu"), torch.float64), torch.Tensor)
    with torch.no_grad():
        tree_logprob = packed_forward(model, pk).logprob[-1]
        path_logp, _ = path_forward(model, torch.tensor([*PROMPT, PWD, DONE]))
        causal_logits = model(input_ids=pk.input_ids[None], position_ids=pk.position_ids[None]).logits[0]
        causal_logprob = torch.log_softmax(causal_logits, -1)[7, DONE]
    assert abs(float(tree_logprob - path_logp[4, DONE])) < 1e-12, "tree-packed 'done' must equal its own path"
    assert abs(float(causal_logprob - path_logp[4, DONE])) > 1e-4, "a causal mask would leak the ls subtree"
