"""Shared-prefix decoding: the running rows whose prompts start alike read one copy of that prefix's KV.

Every call of a harness starts with the same system prompt and tools (7,700 tokens for opencode,
a few hundred for the reference harness), so in a batch of rollouts most of each row's keys and
values are the same columns, computed by the same weights. Keeping them once per row costs memory
(the KV budget then admits a few rows of a long-prompt harness) and time (each decode step reads
every row's copy). Here the batch keeps a `SharedPrefix` once; a row holds only the columns after
it, and its decode step attends to both (cascade attention, as FlashInfer and vLLM do it on a GPU),
as does the prefill of a prompt admitted beside such rows (n tokens a row, causal among them):

    s_p = q · K_pᵀ · scale            (one matrix product for all rows of the prefix: K_p read once)
    s_o = q · K_oᵀ · scale + mask     (each row's own columns: padding, and a prefill's later tokens, masked)
    w   = softmax([s_p, s_o])         (one softmax over both: exactly the attention over the
    out = w_p · V_p + w_o · V_o        concatenated keys, up to the order of float sums)

Owns the `clawgym_shared_prefix` attention implementation (registered in transformers'
`AttentionInterface`, plain SDPA when a forward passes no `shared_prefix`), the prefix record and
the choice of how long a new prefix is. It does not lay out the cache (`kv_cache`) or decide
which rows join (`batch_loop`).
"""

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

from clawgym.inference.prefix_cache import common_prefix

SHARED_PREFIX_ATTENTION = "clawgym_shared_prefix"
# scores computed at once, at most (rows × heads × queries × columns; 4 MB in float32): a batched
# prefill of 32 prompts' 27 tokens over opencode's 7.7k prefix would otherwise hold 240 MB of them
# per layer, three times over (scores, their softmax, its prefix part)
SCORE_CHUNK = 1 << 20


@dataclass(eq=False)
class SharedPrefix:
    """The first `len(tokens)` prompt tokens of some running rows, their KV computed by `version`."""

    tokens: Tensor  # (p,) int64
    keys: list[Tensor]  # per layer, (1, H_kv, p, D)
    values: list[Tensor]
    version: int

    def __len__(self) -> int:
        return len(self.tokens)

    def starts(self, prompt: Tensor, version: int) -> bool:
        """Whether a prompt computed by `version` begins with this prefix (and has a token after it:
        a row needs at least its last prompt token of its own)."""
        p = len(self.tokens)
        return version == self.version and len(prompt) > p and bool(torch.equal(prompt[:p], self.tokens))


@dataclass
class PrefixGroups:
    """A decode step's rows by prefix: `groups[i]` = (row indices, their prefix; None: every row, the
    usual case, read without gathering); rows in no group attend to their own columns only. Built
    once per step, read by every layer."""

    groups: list[tuple[Tensor | None, SharedPrefix]]
    plain: Tensor | None  # rows without a prefix, or None when there are none


def distinct(prefixes: "Iterable[SharedPrefix | None]") -> list[SharedPrefix]:
    """Each prefix once (rows share them by identity), in first-seen order."""
    return list({id(p): p for p in prefixes if p is not None}.values())


def group_rows(prefixes: list["SharedPrefix | None"], device: torch.device) -> PrefixGroups | None:
    """The rows of each prefix (in row order); None when no row has one (the plain SDPA path)."""
    by_prefix: dict[int, tuple[SharedPrefix, list[int]]] = {}
    plain = []
    for row, prefix in enumerate(prefixes):
        if prefix is None:
            plain.append(row)
        else:
            by_prefix.setdefault(id(prefix), (prefix, []))[1].append(row)
    if not by_prefix:
        return None
    if len(by_prefix) == 1 and not plain:
        return PrefixGroups([(None, next(iter(by_prefix.values()))[0])], None)
    groups = [(torch.tensor(rows, device=device), prefix) for prefix, rows in by_prefix.values()]
    return PrefixGroups(groups, torch.tensor(plain, device=device) if plain else None)


def shared_length(prompt: Tensor, others: list[Tensor], min_share: int) -> int:
    """How long a new prefix for `prompt` should be: its common prefix with the least alike of the
    `others` that still share at least `min_share` tokens (so the prefix is what prompts of other
    tasks share, a harness's system prompt and tools, not one task's whole prompt, when such
    prompts are there); at most len(prompt) - 1. 0 when no other shares `min_share`."""
    shared = [common_prefix(prompt, other) for other in others]
    shared = [n for n in shared if n >= min_share]
    return min(min(shared), len(prompt) - 1) if shared else 0


def shared_prefix_attention(
    module: nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    shared_prefix: PrefixGroups | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers' attention signature: query (B, H, n, D), key/value (B, H_kv, w, D) →
    ((B, n, H, D), None). With `shared_prefix` (passed through the model's kwargs) each row's n new
    tokens attend to its prefix's columns (all before them) and then its own, which
    `attention_mask` (B, 1, n, w) masks: padding, and the causal order among a prefill's tokens;
    a decode step is n = 1. Without, plain SDPA."""
    if shared_prefix is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    B, H, n, D = query.shape
    Hkv = key.shape[1]
    g = H // Hkv
    m = g * n  # query rows per key head: head h reads key head h // g, as repeat_kv pairs them
    scale = scaling if scaling is not None else D**-0.5
    q = query.reshape(B, Hkv, m, D)
    s_own = torch.matmul(q, key.transpose(2, 3)) * scale  # (B, Hkv, g·n, w)
    if attention_mask is not None:  # (B, 1, n, w): the same for every head
        s_own = (s_own.view(B, Hkv, g, n, -1) + attention_mask[:, :, None]).view(B, Hkv, m, -1)
    out = torch.empty((B, Hkv, m, D), dtype=query.dtype, device=query.device)
    layer = module.layer_idx

    def take(x: Tensor, rows: Tensor | None) -> Tensor:
        return x if rows is None else x.index_select(0, rows)

    for group, prefix in shared_prefix.groups:
        k_p, v_p = prefix.keys[layer][0], prefix.values[layer][0]  # (Hkv, p, D)
        p = k_p.shape[1]
        # rows a pass: their scores stay ~SCORE_CHUNK elements (a decode step's rows at once; a
        # prefill's n tokens a row over thousands of prefix columns, a few rows at a time)
        per_pass = max(1, SCORE_CHUNK // (Hkv * m * (p + key.shape[2])))
        if group is None and per_pass >= B:
            passes = [None]  # every row at once, read without gathering
        else:
            passes = list((torch.arange(B, device=query.device) if group is None else group).split(per_pass))
        for rows in passes:
            b = B if rows is None else len(rows)
            q_g = take(q, rows).permute(1, 0, 2, 3).reshape(Hkv, b * m, D)
            s_p = torch.bmm(q_g, k_p.transpose(1, 2)) * scale  # (Hkv, b·g·n, p)
            s_p = s_p.view(Hkv, b, m, p).permute(1, 0, 2, 3)  # (b, Hkv, g·n, p)
            w = torch.softmax(torch.cat([s_p, take(s_own, rows)], dim=-1), dim=-1, dtype=torch.float32)
            w = w.to(query.dtype)
            w_p = w[..., :p].permute(1, 0, 2, 3).reshape(Hkv, b * m, p)
            o_p = torch.bmm(w_p, v_p).view(Hkv, b, m, D).permute(1, 0, 2, 3)
            o_own = torch.matmul(w[..., p:], take(value, rows))  # (b, Hkv, g·n, D)
            if rows is None:
                out = o_p + o_own
            else:
                out.index_copy_(0, rows, o_p + o_own)
    if shared_prefix.plain is not None:
        rows = shared_prefix.plain
        w = torch.softmax(s_own.index_select(0, rows), dim=-1, dtype=torch.float32).to(query.dtype)
        out.index_copy_(0, rows, torch.matmul(w, value.index_select(0, rows)))
    return out.reshape(B, H, n, D).transpose(1, 2).contiguous(), None


def register() -> None:
    """Makes `clawgym_shared_prefix` a valid `attn_implementation` (idempotent): the attention above,
    and SDPA's mask builder for the forwards that run without a prefix."""
    if SHARED_PREFIX_ATTENTION not in ALL_MASK_ATTENTION_FUNCTIONS:
        AttentionInterface.register(SHARED_PREFIX_ATTENTION, shared_prefix_attention)
        AttentionMaskInterface.register(SHARED_PREFIX_ATTENTION, sdpa_mask)


register()
