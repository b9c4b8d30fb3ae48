"""Block-sparse tree attention: each block of queries attends only to the keys it may see.

Owns the `clawgym_tree` attention implementation (registered in transformers'
`AttentionInterface`) and its layout, `TreeBlocks`. It does not run models (`forward.py`) or lay
trees out (`packing.py`).

Why: SDPA with the dense tree mask computes all T² (query, key) pairs of a packed tree, most of
them masked (a token sees only its ancestors). Training each path alone computes only the causal
half of each path: on a tree with a few long branches the dense mask costs more attention than
the paths it replaces (tiny-qwen3 in bench/tree_training.py: 16M pairs against 5M). FlexAttention
skips masked blocks on a GPU; this is the same idea with ordinary SDPA calls, on any device.

The layout follows from pre-order (packing.py): the pre-order is cut into query blocks [lo, hi);
every ancestor of a token q of the block is either in [lo, q] or an ancestor of lo (a subtree is a
pre-order interval, so an ancestor k < lo of q has lo in its subtree too). A block's keys are
therefore lo's ancestors followed by the block itself, and its mask is the tree rule
k <= q < subtree_end[k] on those keys (a block that crosses into a sibling subtree masks the
ancestors of lo that are not the sibling's). Each block costs (hi - lo) × (depth(lo) + hi - lo)
pairs, close to the Σ_q depth(q) pairs the tree needs. Blocks with similar key counts share one
batched SDPA call (a bucket, keys padded to its longest list).

Memory: SDPA keeps its inputs for the backward, so a layer holds each block's gathered keys and
values, Σ_b (depth(lo_b) + B) rows instead of T: about T · mean depth / B. Fine for the CPU shapes
this is for; at harness scale on a GPU, FlexAttention (`packing.flex_block_mask`) skips the
masked blocks without copying keys.

Without a layout (an ordinary causal forward: the per-path reference, the KL reference's own
calls) the implementation is plain SDPA, with SDPA's masks, so a model can keep it set.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

TREE_ATTENTION = "clawgym_tree"
MIN_BLOCK, MAX_BLOCK = 16, 256
BUCKET_FILL = 0.8  # a bucket takes blocks with at least this fraction of its longest key list


@dataclass
class Bucket:
    """Query blocks of similar key counts, batched into one SDPA call (n blocks of B queries, K keys)."""

    queries: Tensor  # long (n·B,) query slots, block after block; a short last block padded with slot 0
    keys: Tensor  # long (n·K,) key slots of each block, padded with slot 0
    allowed: Tensor  # bool (n, 1, B, K): the tree mask; padding keys masked, padding queries see key 0


@dataclass
class TreeBlocks:
    """A packed sequence's attention layout: buckets of query blocks, and where each slot's output lands."""

    buckets: list[Bucket]
    order: Tensor  # long (T,): row of slot t in the bucket outputs concatenated
    depth: Tensor  # long (T,) position ids, for sliding windows
    _windowed: dict[int, list[Tensor]]  # window -> per-bucket masks with it applied (built once)

    def masks(self, window: int | None) -> list[Tensor]:
        """Per-bucket masks; with a window W also depth[q] - depth[k] < W (the window along the path)."""
        if window is None:
            return [b.allowed for b in self.buckets]
        if window not in self._windowed:
            out = []
            for b in self.buckets:
                n, _, B, K = b.allowed.shape
                dq = self.depth[b.queries].view(n, 1, B, 1)
                dk = self.depth[b.keys].view(n, 1, 1, K)
                near = (dq - dk < window) | ~b.allowed.any(-1, keepdim=True)  # padding rows keep key 0
                out.append(b.allowed & near)
            self._windowed[window] = out
        return self._windowed[window]


def block_tokens(n: int) -> int:
    """Query block size for a packed sequence of n tokens: about √n, a power of two in
    [MIN_BLOCK, MAX_BLOCK]. Larger blocks waste more masked pairs (up to half of a block² each),
    smaller ones gather the ancestors' keys more often (bench/tree_training.py's shapes: 32-64)."""
    return int(min(MAX_BLOCK, max(MIN_BLOCK, 2 ** round(np.log2(max(n, 1) ** 0.5)))))


def tree_blocks(
    subtree_end: Tensor, depth: Tensor, device: torch.device | str, block: int | None = None
) -> TreeBlocks:
    """The layout of a packed sequence (pre-order `subtree_end` and `depth`, (T,) each) in query
    blocks of `block` tokens (default `block_tokens(T)`), built on the CPU and moved once."""
    end = subtree_end.cpu().numpy()
    T = len(end)
    B = block or block_tokens(T)
    blocks = []  # (lo, hi, keys)
    for lo in range(0, T, B):
        hi = min(lo + B, T)
        blocks.append((lo, hi, np.concatenate([np.flatnonzero(end[:lo] > lo), np.arange(lo, hi)])))
    blocks.sort(key=lambda b: -len(b[2]))
    groups: list[list] = []
    for b in blocks:  # longest key lists first; a new bucket once padding would waste over 1 - BUCKET_FILL
        if not groups or len(b[2]) < BUCKET_FILL * len(groups[-1][0][2]):
            groups.append([])
        groups[-1].append(b)
    buckets, row_of, row = [], np.zeros(T, np.int64), 0
    for group in groups:
        n, K = len(group), len(group[0][2])
        queries, keys = np.zeros((n, B), np.int64), np.zeros((n, K), np.int64)
        allowed = np.zeros((n, B, K), bool)
        for i, (lo, hi, k) in enumerate(group):
            q = np.arange(lo, hi)
            queries[i, : hi - lo], keys[i, : len(k)] = q, k
            allowed[i, : hi - lo, : len(k)] = (k[None, :] <= q[:, None]) & (q[:, None] < end[k][None, :])
            allowed[i, hi - lo :, 0] = True  # padding queries: one key, so no row is fully masked (NaN)
            row_of[q] = row + i * B + np.arange(hi - lo)
        row += n * B
        buckets.append(
            Bucket(
                queries=torch.from_numpy(queries.reshape(-1)).to(device),
                keys=torch.from_numpy(keys.reshape(-1)).to(device),
                allowed=torch.from_numpy(allowed[:, None]).to(device),
            )
        )
    return TreeBlocks(buckets, torch.from_numpy(row_of).to(device), depth.to(device), {})


def tree_attention_forward(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    tree_blocks: TreeBlocks | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers' attention signature: query (1, H, T, D), key/value (1, H_kv, T, D) →
    ((1, T, H, D), None). With `tree_blocks` (passed through the model's kwargs) one SDPA call per
    bucket on its gathered keys; without, plain SDPA (`attention_mask` is then SDPA's own).

    Gathers, not slices: each bucket reads its queries and keys with one index_select, whose
    backward is one index_add; slicing per block would make autograd add up a full-size gradient
    of the keys per block."""
    if tree_blocks is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    q, k, v = query[0], key[0], value[0]  # (H, T, D), (H_kv, T, D)
    H, _, D = q.shape
    outs = []
    for bucket, mask in zip(tree_blocks.buckets, tree_blocks.masks(sliding_window), strict=True):
        n, _, B, K = mask.shape

        def blocks(x: Tensor, idx: Tensor, length: int) -> Tensor:  # (h, ·, D) -> (n, h, length, D)
            return x.index_select(1, idx).view(x.shape[0], -1, length, D).transpose(0, 1)

        out = torch.nn.functional.scaled_dot_product_attention(
            blocks(q, bucket.queries, B),
            blocks(k, bucket.keys, K),
            blocks(v, bucket.keys, K),
            attn_mask=mask,
            dropout_p=dropout,
            scale=scaling,
            enable_gqa=getattr(module, "num_key_value_groups", 1) > 1,
        )  # (n, H, B, D)
        outs.append(out.transpose(0, 1).reshape(H, n * B, D))
    out = torch.cat(outs, dim=1).index_select(1, tree_blocks.order)  # (H, T, D)
    return out.transpose(0, 1)[None].contiguous(), None


def register() -> None:
    """Makes `clawgym_tree` a valid `attn_implementation` (idempotent): the attention above, and
    SDPA's mask builder for the forwards that run without a layout."""
    if TREE_ATTENTION not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionInterface.register(TREE_ATTENTION, tree_attention_forward)
        AttentionMaskInterface.register(TREE_ATTENTION, sdpa_mask)


register()
