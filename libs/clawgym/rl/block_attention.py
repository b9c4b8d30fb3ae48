"""Block-sparse SDPA for a packed tree: attention work over the keys a block needs.

Owns one attention function for transformers (`ALL_ATTENTION_FUNCTIONS`, name `NAME`). SDPA
with a 4D mask computes every (query, key) pair, masked or not (no block skipping on CPU), so a
packed tree of T tokens costs T² although a token attends only to its ancestors. Here the queries
are cut into blocks of `BLOCK` consecutive slots; a block attends to the union of its queries'
allowed keys (`plan`), gathered, with the sub-mask. The masked keys it drops have zero weight
in the softmax, so the result is the same attention (to rounding), at Σ_blocks |block| × |keys|.
In pre-order a subtree is contiguous, so a block needs its subtree's root path plus itself: far
less than T on a tree of G samples. `forward.hidden_states` uses it on CPU for "sdpa" models
without sliding-window layers (FlexAttention's BlockMask does the same skipping on GPU).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

NAME = "clawgym_block_sdpa"
BLOCK = 256  # queries per block: large enough for efficient matmuls, small enough to skip keys


@dataclass(frozen=True)
class Block:
    lo: int  # first query slot
    hi: int  # one past the last
    keys: Tensor  # long (K,) key slots any query of the block may attend to
    mask: Tensor  # bool (1, 1, hi - lo, K)


def plan(mask: Tensor, block: int = BLOCK) -> list[Block]:
    """Blocks of a bool (1, 1, T, T) attention mask (True = attend)."""
    T = mask.shape[-1]
    out = []
    for lo in range(0, T, block):
        hi = min(lo + block, T)
        rows = mask[0, 0, lo:hi]
        keys = torch.nonzero(rows.any(0)).squeeze(1)
        out.append(Block(lo, hi, keys, rows[:, keys][None, None]))
    return out


def block_sdpa(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    tree_blocks: list[Block] | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers' SDPA per block of queries on the keys of that block; plain SDPA without a plan.
    query (B, Hq, T, D), key/value (B, Hkv, T, D) -> ((B, T, Hq, D), None)."""
    if tree_blocks is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    parts = []
    for b in tree_blocks:
        keys = b.keys.to(key.device)
        out, _ = sdpa_attention_forward(
            module, query[:, :, b.lo : b.hi], key.index_select(2, keys), value.index_select(2, keys),
            b.mask.to(query.device), dropout, scaling, False, **kwargs,
        )  # fmt: skip
        parts.append(out)
    return torch.cat(parts, dim=1), None


AttentionInterface.register(NAME, block_sdpa)


@contextmanager
def block_attention(model: nn.Module) -> Iterator[None]:
    """Run `model`'s attention layers through `block_sdpa` for the duration (then restore)."""
    cfg = model.config
    before = cfg._attn_implementation
    cfg._attn_implementation = NAME
    try:
        yield
    finally:
        cfg._attn_implementation = before
