"""The model forward on a packed tree: per-row logprobs, entropies and state values.

Owns how a Hugging Face causal LM (Llama/SmolLM, Qwen2, Qwen3) runs on one `PackedSequence`:
the base model with the tree mask and position ids = depth, then the LM head only at the slots
whose logits are needed (the parents of the loss rows' tokens). It does not define losses.

Attention backends (`model.config._attn_implementation`):
- "sdpa" (CPU and GPU): a 4D boolean mask, passed through transformers unchanged;
- "eager": the same mask as an additive float tensor;
- "flex_attention" (GPU): a FlexAttention BlockMask. CI checks its mask and forward on CPU only
  (torch has no FlexAttention backward there); its gradients are checked on CUDA by
  tests/rl/test_flex_gpu.py and bench/gpu.sh;
- "clawgym_tree" (`tree_attention.py`, the trainer's default): block-sparse SDPA, one call per
  block of queries on only the keys it may see; the layout goes to the attention through the
  model's kwargs (`tree_blocks`), no T² mask is built;
- flash-attention kernels take no arbitrary mask and are refused.
Sliding-window layers (config.layer_types has "sliding_attention") get their own mask with the
window measured along the path (depth), handed over as transformers' per-layer-type mask dict
(with "clawgym_tree" the blocks apply the window the attention module passes).
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from clawgym.errors import FailedPrecondition
from clawgym.rl.packing import PackedSequence, eager_mask, flex_block_mask, sdpa_mask
from clawgym.rl.tree_attention import TREE_ATTENTION, TreeBlocks, tree_blocks


class ValueHead(nn.Module):
    """V(s) = w·h + b on the base model's last hidden state (after the final norm).

    `init_std` 0 (the trainer's): V ≡ 0 until the critic learns, so PPO starts as REINFORCE on the
    rewards instead of on a random head's noise. Measured (bench/algorithms.py, SmolLM2-135M): a
    head drawn with std 1/√hidden gave values of std ~1 per token on the final hidden states
    against returns of variance ~0.1 (explained variance -15 to -20 over 12 steps, as then computed:
    per micro-batch, within one group's tree), GAE's δ were
    that noise, and held-out Pass@1 fell where GRPO's rose."""

    def __init__(self, hidden_size: int, dtype: torch.dtype = torch.float32, init_std: float = 0.0) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1, dtype=dtype)
        nn.init.zeros_(self.proj.bias)
        if init_std > 0:
            nn.init.normal_(self.proj.weight, std=init_std)
        else:
            nn.init.zeros_(self.proj.weight)

    def forward(self, hidden: Tensor) -> Tensor:  # (..., H) -> (...)
        return self.proj(hidden).squeeze(-1)


@dataclass
class PackedOutput:
    """Model outputs at the rows of one packed sequence."""

    logprob: Tensor  # (C,) log π(token | its prefix)
    entropy: Tensor  # (C,) entropy of π(· | the prefix), same slots
    values: Tensor | None  # (V,) V(prefix before the value row's token), with a value head
    value_features: Tensor | None = None  # (V, H) the hidden states those values read, detached


def tree_attention_mask(model: nn.Module, pack: PackedSequence, device: torch.device, dtype: torch.dtype):
    """The mask argument for `model`'s base model: a tensor, a BlockMask, a per-layer-type dict, or
    with "clawgym_tree" the `TreeBlocks` layout (every layer type: the blocks apply windows)."""
    cfg = model.config
    impl = getattr(cfg, "_attn_implementation", "sdpa") or "sdpa"
    window = getattr(cfg, "sliding_window", None)
    layer_types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
    unknown = layer_types - {"full_attention", "sliding_attention"}
    if unknown:
        raise FailedPrecondition(
            f"tree packing supports full and sliding attention layers, not {sorted(unknown)}"
        )
    if impl == TREE_ATTENTION:
        return tree_blocks(pack.subtree_end, pack.position_ids, device)

    def make(w: int | None):
        if impl == "sdpa":
            return sdpa_mask(pack, w, device)
        if impl == "eager":
            return eager_mask(pack, dtype, w, device)
        if impl == "flex_attention":
            return flex_block_mask(pack, device, w)
        raise FailedPrecondition(
            f"tree packing needs {TREE_ATTENTION}, sdpa, eager or flex_attention, not {impl!r}"
        )

    if "sliding_attention" not in layer_types:
        return make(None)
    return {"full_attention": make(None), "sliding_attention": make(window)}


def hidden_states(model: nn.Module, pack: PackedSequence) -> Tensor:
    """(T, H) last hidden states of the base model on the packed tree."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    mask = tree_attention_mask(model, pack, device, dtype)
    attention = {"attention_mask": mask}
    if isinstance(mask, TreeBlocks):  # the layout rides in the kwargs HF hands every attention call
        # A 4D placeholder (or one per layer type), which transformers passes through as it is:
        # with None it would build a T² causal mask (depth resets read as packed sequences), unused.
        placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)
        sliding = "sliding_attention" in (getattr(model.config, "layer_types", None) or ())
        if sliding:
            placeholder = {"full_attention": placeholder, "sliding_attention": placeholder}
        attention = {"attention_mask": placeholder, "tree_blocks": mask}
    out = model.base_model(
        input_ids=pack.input_ids[None].to(device),
        position_ids=pack.position_ids[None].to(device),
        use_cache=False,
        **attention,
    )
    return out.last_hidden_state[0]


# Rows of logits computed at once: 256 × SmolLM2's 49,152 float32 logits are 50 MB. A quickstart
# step's ~1,240 rows kept whole through the backward made its update peak 0.66 GB higher (5.03 against
# 4.37 GB above its start), for 8% less update time (bench/update_memory.py, 2 cores).
HEAD_CHUNK_ROWS = 256


def logprobs_and_entropy(
    model: nn.Module,
    hidden: Tensor,
    context: Tensor,
    targets: Tensor,
    temperature: Tensor,
    entropy_grad: bool = False,
    chunk_rows: int | None = HEAD_CHUNK_ROWS,
) -> tuple[Tensor, Tensor]:
    """log π(target | context slot) and the entropy there.  hidden: (T, H); context, targets: (C,)

    π is softmax(logits / T) with each row's `temperature` T (C,): the distribution the
    engine sampled that token from and reported the logprob of (inference/interface.py), so the
    trainer optimises and compares that same policy, call by call.

    The LM head runs once per distinct (context slot, temperature), not on all T slots, and on
    `chunk_rows` of them at a time: with gradients, each chunk's logits are recomputed in the
    backward instead of kept (the vocabulary-wide tensors would dominate the update's memory).
    `chunk_rows` None: every row at once, kept for the backward (faster, bench/update_memory.py).
    Half-precision logits are upcast before softmax. The entropy carries a gradient only when
    `entropy_grad` (an entropy bonus is in the loss).
    """
    key = torch.stack([context.double(), temperature.double()], dim=1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)
    slots = distinct[:, 0].long()
    head = model.get_output_embeddings()
    grad = torch.is_grad_enabled()
    entropy_grad = entropy_grad and grad
    order = torch.argsort(inverse, stable=True)  # rows grouped by their distinct key, in key order
    # key k's rows are order[bounds[k]:bounds[k + 1]]
    bounds = [0, *torch.bincount(inverse, minlength=len(slots)).cumsum(0).tolist()]

    def chunk(h: Tensor, t: Tensor, keys: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        logits = head(h)  # (k, vocab)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        t = t.to(logits.dtype)
        if (t != 1).any():
            logits = logits / t[:, None]
        logp_all = torch.log_softmax(logits, dim=-1)
        with torch.set_grad_enabled(entropy_grad):
            entropy = -(logp_all.exp() * logp_all).sum(-1)  # (k,)
        return logp_all[keys, tokens], entropy

    logprobs: list[Tensor] = []
    entropies: list[Tensor] = []
    step = chunk_rows or max(1, len(slots))
    # at least one chunk: a pack with no loss row still runs the head (on zero rows), so its backward
    # reaches the head's weights (every FSDP rank joins the same collectives)
    for a in range(0, max(1, len(slots)), step):
        b = min(a + step, len(slots))
        picked = order[bounds[a] : bounds[b]]  # the rows of keys a..b-1
        args = (hidden[slots[a:b]], distinct[a:b, 1], inverse[picked] - a, targets[picked])
        lp, ent = checkpoint(chunk, *args, use_reentrant=False) if grad and chunk_rows else chunk(*args)
        logprobs.append(lp)
        entropies.append(ent)
    logprob = torch.cat(logprobs)[torch.argsort(order)]  # back to the rows' order
    return logprob, torch.cat(entropies)[inverse]


def value_features(hidden: Tensor, pack: PackedSequence) -> Tensor:
    """(V, H): the hidden state each value row's V reads, that of the slot before its token."""
    parent = pack.parent.to(hidden.device)
    return hidden[parent[pack.rows.value_token.to(hidden.device)]]


def packed_forward(
    model: nn.Module,
    pack: PackedSequence,
    value_head: nn.Module | None = None,
    entropy_grad: bool = False,
    temperature: float = 1.0,
) -> PackedOutput:
    """Forward one packed sequence; outputs at its loss rows (and value rows with a value head);
    logprobs of softmax(logits / T) at each row's recorded temperature, `temperature` where none was."""
    hidden = hidden_states(model, pack)
    device = hidden.device
    token = pack.rows.token.to(device)
    ids = pack.input_ids.to(device)
    parent = pack.parent.to(device)
    temperatures = pack.rows.temperatures(temperature).to(device)
    logprob, entropy = logprobs_and_entropy(
        model, hidden, parent[token], ids[token], temperatures, entropy_grad,
        chunk_rows=HEAD_CHUNK_ROWS,  # read at each call: bench/update_memory.py sets it to compare
    )  # fmt: skip
    values = features = None
    if value_head is not None:
        features = value_features(hidden, pack)
        values = value_head(features)
        features = features.detach()
    return PackedOutput(logprob=logprob, entropy=entropy, values=values, value_features=features)


@torch.no_grad()
def values_by_position(
    model: nn.Module, value_head: nn.Module, packs: list[PackedSequence], n_positions: int
) -> np.ndarray:
    """float64 (U,): V_old(prefix before u) for every tree position u (NaN at depth 0), for GAE."""
    out = np.full(n_positions, np.nan)
    for pack in packs:
        hidden = hidden_states(model, pack)
        slots = torch.nonzero(pack.owned & (pack.parent >= 0)).squeeze(1)
        v = value_head(hidden[pack.parent[slots].to(hidden.device)])
        out[pack.tree_pos[slots].numpy()] = v.double().cpu().numpy()
    return out


@torch.no_grad()
def old_logprobs(model: nn.Module, pack: PackedSequence, temperature: float = 1.0) -> Tensor:
    """(C,) logprobs of the current policy at the pack's rows, before an update (PPO's π_old);
    `temperature` where a row has none recorded."""
    return packed_forward(model, pack, temperature=temperature).logprob
