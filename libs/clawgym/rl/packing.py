"""Tree packing: a (sub)tree laid out depth-first as one sequence with a tree attention mask.

Owns the layout (which tree positions go into which micro-batch sequence, in which order), the
attention masks (SDPA/eager 4D tensors, FlexAttention BlockMask) and the per-row loss inputs as
tensors. It does not run models (`forward.py`) or define losses (`losses.py`).

Layout of one packed sequence of T tokens:
- tokens in pre-order: every token comes after its parent, and a node's subtree is contiguous;
- position id = depth (number of tokens above it on its path): rotary embeddings see exactly the
  positions the per-path sequence would give them;
- token q attends to token k iff k is q itself or an ancestor of q. In pre-order that is
  k <= q < subtree_end[k] (the subtree of k is the interval [k, subtree_end[k])), so the mask is
  built from one (T,) vector, never from a Python loop over pairs;
- a token's logprob comes from its *parent's* logits (not the previous slot: in pre-order the
  previous slot may be the last token of a sibling's subtree).

Splitting (`pack` with a token budget): the pre-order is cut into consecutive slices; a slice
starting at position u is preceded by u's ancestor path as context. Every ancestor of a token of
the slice is either in the slice or on that path (a subtree is a pre-order interval), so each
token sees its whole prefix. Each loss row lives in exactly the slice that *owns* its position, so
every trainable token's loss is counted once; repeated ancestors only provide context.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from clawgym.errors import InvalidArgument
from clawgym.rl.terms import TokenTerms, ValueTerms
from clawgym.trajectory.flat import FlatTree


@dataclass
class LossRows:
    """Per-row loss inputs of one packed sequence. C policy rows, V value rows."""

    token: Tensor  # long (C,) slot of the token whose logprob the row uses
    engine_logprob: Tensor  # float (C,) the engine's logprob when it generated the token
    adv_pos: Tensor  # float (C,) A⁺ (weighted, see terms.py)
    adv_neg: Tensor  # float (C,) A⁻ (weighted)
    weight: Tensor  # float (C,) Σ w, for KL and entropy
    version: Tensor  # long (C,) policy version that generated the token
    temperature: Tensor  # float32 (C,) temperature of the engine logprob (NaN: the trainer's)
    seq: Tensor  # long (C,) call or rollout whose sequence-level ratio the row takes (-1: none)
    value_token: Tensor  # long (V,) slot whose state value V(prefix before it) the row uses
    returns: Tensor  # float (V,)
    old_value: Tensor  # float (V,)
    value_weight: Tensor  # float (V,)

    def temperatures(self, default: float) -> Tensor:
        """float32 (C,): each row's temperature, `default` (the trainer's) where none was recorded."""
        t = self.temperature
        return torch.where(torch.isnan(t), torch.full_like(t, default), t)

    def to(self, device: torch.device | str, dtype: torch.dtype | None = None) -> "LossRows":
        """On `device`, floats in `dtype`, except temperatures (0.7 is not a bfloat16)."""

        def move(name: str, t: Tensor) -> Tensor:
            cast = dtype is not None and t.is_floating_point() and name != "temperature"
            return t.to(device=device, dtype=dtype if cast else t.dtype)

        return LossRows(**{k: move(k, v) for k, v in self.__dict__.items()})


@dataclass
class PackedSequence:
    """One micro-batch: a forest of (sub)trees as one sequence of T tokens, with its loss rows."""

    input_ids: Tensor  # long (T,)
    position_ids: Tensor  # long (T,) depth in the tree
    parent: Tensor  # long (T,) slot of the parent token, -1 at depth 0
    subtree_end: Tensor  # long (T,) one past the last slot of each token's subtree
    tree_pos: Tensor  # long (T,) tree position (FlatTree index) of each slot
    owned: Tensor  # bool (T,) False for ancestor context repeated from an earlier slice
    rows: LossRows

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def allowed(self, device: torch.device | str | None = None) -> Tensor:
        """bool (T, T): allowed[q, k] = k is q or an ancestor of q (the tree attention mask), built
        on `device` (default: where the pack is), so a GPU never waits for a T² copy."""
        end = self.subtree_end.to(device) if device is not None else self.subtree_end
        idx = torch.arange(len(self), device=end.device)
        return (idx[None, :] <= idx[:, None]) & (idx[:, None] < end[None, :])


def _empty_rows(dtype: torch.dtype) -> dict[str, Tensor]:
    z = torch.zeros(0, dtype=dtype)
    zl = torch.zeros(0, dtype=torch.long)
    return {
        "token": zl, "engine_logprob": z, "adv_pos": z, "adv_neg": z, "weight": z, "version": zl,
        "temperature": torch.zeros(0, dtype=torch.float32), "seq": zl,
        "value_token": zl, "returns": z, "old_value": z, "value_weight": z,
    }  # fmt: skip


def pack(
    flat: FlatTree,
    budget: int | None = None,
    terms: TokenTerms | None = None,
    values: ValueTerms | None = None,
    dtype: torch.dtype = torch.float32,
) -> list[PackedSequence]:
    """Lay `flat` out in packed sequences of at most `budget` tokens (None: one sequence).

    The layout depends only on the tree and the budget, so packing without terms (for a no-grad
    pass computing old values or logprobs) and again with terms gives the same slots.
    Raises InvalidArgument when a token's ancestor path alone does not fit in the budget.
    """
    U = flat.n_positions
    if U == 0:
        return []
    budget = U if budget is None else int(budget)
    parent, depth, end = flat.parent(), flat.depth(), flat.subtree_end()
    node_of = flat.node_of(np.arange(U))
    slices: list[tuple[np.ndarray, int, int]] = []  # (context positions, first owned, one past last owned)
    u = 0
    while u < U:
        d = int(depth[u])
        if d >= budget:
            raise InvalidArgument(f"a path is deeper ({d + 1} tokens) than the packing budget ({budget})")
        context = flat.path_positions(int(node_of[u]))[:d] if d else np.zeros(0, np.int64)
        v = min(u + budget - d, U)
        slices.append((context, u, v))
        u = v
    starts = np.array([s[1] for s in slices])

    def owner(pos: np.ndarray) -> np.ndarray:
        return np.searchsorted(starts, pos, side="right") - 1

    t_owner = owner(terms.pos) if terms is not None else None
    v_owner = owner(values.pos) if values is not None else None
    packs = []
    for i, (context, lo, hi) in enumerate(slices):
        tp = np.concatenate([context, np.arange(lo, hi)]).astype(np.int64)  # ascending: pre-order
        par = parent[tp]
        local_parent = np.where(par >= 0, np.searchsorted(tp, par), -1)
        local_end = np.searchsorted(tp, end[tp])
        rows = _empty_rows(dtype)
        if terms is not None:
            sel = np.flatnonzero(t_owner == i)
            rows.update(
                token=torch.from_numpy(np.searchsorted(tp, terms.pos[sel])),
                engine_logprob=torch.from_numpy(terms.engine_logprob[sel]).to(dtype),
                adv_pos=torch.from_numpy(terms.adv_pos[sel]).to(dtype),
                adv_neg=torch.from_numpy(terms.adv_neg[sel]).to(dtype),
                weight=torch.from_numpy(terms.weight[sel]).to(dtype),
                version=torch.from_numpy(terms.version[sel].astype(np.int64)),
                temperature=torch.from_numpy(terms.temperature[sel].astype(np.float32)),
                seq=torch.from_numpy(terms.seq[sel].astype(np.int64)),
            )
        if values is not None:
            sel = np.flatnonzero(v_owner == i)
            rows.update(
                value_token=torch.from_numpy(np.searchsorted(tp, values.pos[sel])),
                returns=torch.from_numpy(values.returns[sel]).to(dtype),
                old_value=torch.from_numpy(values.old_value[sel]).to(dtype),
                value_weight=torch.from_numpy(values.weight[sel]).to(dtype),
            )
        packs.append(
            PackedSequence(
                input_ids=torch.from_numpy(flat.tokens[tp].astype(np.int64)),
                position_ids=torch.from_numpy(depth[tp].astype(np.int64)),
                parent=torch.from_numpy(local_parent.astype(np.int64)),
                subtree_end=torch.from_numpy(local_end.astype(np.int64)),
                tree_pos=torch.from_numpy(tp),
                owned=torch.from_numpy(tp >= lo),
                rows=LossRows(**rows),
            )
        )
    return packs


# --- attention masks ---


def sdpa_mask(
    pack: PackedSequence, sliding_window: int | None = None, device: torch.device | str | None = None
) -> Tensor:
    """bool (1, 1, T, T) on `device`, True = attend: the 4D mask transformers passes to SDPA untouched.

    transformers 5.x (`masking_utils._preprocess_mask_arguments`) returns any 4D mask as-is, so it
    is not replaced by a causal one; with a mask given, `sdpa_attention_forward` sets
    is_causal=False. With a sliding window W, k must also be within W tokens of q *on the path*:
    depth[q] - depth[k] < W (HF's `sliding_window_overlay`, with depth in place of the index).
    """
    allowed = pack.allowed(device)
    if sliding_window is not None:
        d = pack.position_ids.to(allowed.device)
        allowed &= (d[:, None] - d[None, :]) < sliding_window
    return allowed[None, None]


def eager_mask(
    pack: PackedSequence,
    dtype: torch.dtype,
    sliding_window: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Additive float (1, 1, T, T) on `device`: 0 where attended, the dtype's minimum elsewhere (eager attention)."""
    allowed = sdpa_mask(pack, sliding_window, device)
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, torch.finfo(dtype).min
    )


def flex_block_mask(pack: PackedSequence, device: torch.device | str, sliding_window: int | None = None):
    """A FlexAttention BlockMask of the tree mask (the GPU path: blocks no query of a block may
    attend to are skipped, so sibling subtrees cost nothing, unlike SDPA's dense T² mask).

    The mask_mod is the same k <= q < subtree_end[k] rule; transformers' flex path passes a 4D
    BlockMask through unchanged like a 4D tensor. Tested on CPU: the mask equals `allowed` and the
    forward equals SDPA's (tests/rl/test_flex_mask.py; torch has no FlexAttention backward on CPU);
    gradients against the per-path reference need CUDA (tests/rl/test_flex_gpu.py, bench/gpu.sh).
    """
    from torch.nn.attention.flex_attention import create_block_mask

    end = pack.subtree_end.to(device)
    depth = pack.position_ids.to(device)

    def tree_mask(b, h, q_idx, kv_idx):
        allowed = (kv_idx <= q_idx) & (q_idx < end[kv_idx])
        if sliding_window is not None:
            allowed = allowed & (depth[q_idx] - depth[kv_idx] < sliding_window)
        return allowed

    T = len(pack)
    return create_block_mask(tree_mask, B=None, H=None, Q_LEN=T, KV_LEN=T, device=device)
