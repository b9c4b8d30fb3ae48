"""Training rollout paths one at a time: the baseline tree packing replaces, and its exactness reference.

Owns the linearised computation: each rollout path (terms.py, departure 1) as its own causal
sequence through the model's ordinary forward (`model(input_ids).logits`, HF's own causal mask
and positions 0..L-1), with that path's unmerged rows. Summed over paths, loss and gradients must
equal the packed tree's (tests/rl/test_exactness.py). `pack_paths` is the same baseline with
sequence packing (paths side by side in one sequence, no sharing); `bench/tree_training.py` times
all three.
"""

import numpy as np
import torch
from torch import Tensor, nn

from clawgym.errors import InvalidArgument
from clawgym.rl.losses import LossConfig, rows_loss
from clawgym.rl.packing import LossRows, PackedSequence
from clawgym.rl.terms import PathTerms
from clawgym.trajectory.flat import FlatTree


def path_rows(
    terms: PathTerms, p: int, positions: np.ndarray, dtype: torch.dtype = torch.float32
) -> LossRows:
    """The unmerged LossRows of path p; slots are indices along the path (= depth)."""
    rows = terms.rows_of(p)
    slot = torch.from_numpy(np.searchsorted(positions, terms.pos[rows]))
    wa = terms.weight[rows] * terms.adv[rows]

    def f(x: np.ndarray) -> Tensor:
        return torch.from_numpy(np.asarray(x, dtype=np.float64)).to(dtype)

    has_values = terms.returns is not None and terms.old_value is not None
    empty = torch.zeros(0, dtype=dtype)
    return LossRows(
        token=slot,
        engine_logprob=f(terms.engine_logprob[rows]),
        adv_pos=f(np.maximum(wa, 0.0)),
        adv_neg=f(np.minimum(wa, 0.0)),
        weight=f(terms.weight[rows]),
        version=torch.from_numpy(terms.version[rows].astype(np.int64)),
        temperature=torch.from_numpy(terms.temperature[rows].astype(np.float32)),
        seq=torch.from_numpy(terms.call[rows].astype(np.int64)),
        value_token=slot if has_values else torch.zeros(0, dtype=torch.long),
        returns=f(terms.returns[rows]) if has_values else empty,
        old_value=f(terms.old_value[rows]) if has_values else empty,
        value_weight=f(terms.weight[rows]) if has_values else empty,
    )


def path_forward(
    model: nn.Module, ids: Tensor, value_head: nn.Module | None = None, keep: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """(log_softmax logits (L, vocab), values (L,) or None) of one causal sequence; row t predicts t+1."""
    logits, values = path_logits(model, ids, value_head, keep)
    return torch.log_softmax(logits, dim=-1), values


def path_logits(
    model: nn.Module, ids: Tensor, value_head: nn.Module | None = None, keep: Tensor | None = None
) -> tuple[Tensor, Tensor | None]:
    """(logits (L, vocab), values (L,) or None) of one causal sequence, half precision upcast.

    With `keep` (slots), the LM head runs only there (HF `logits_to_keep`) and the logits are
    (len(keep), vocab), row i for slot keep[i]; values stay (L,).
    """
    device = next(model.parameters()).device
    out = model(
        input_ids=ids[None].to(device),
        use_cache=False,
        output_hidden_states=value_head is not None,
        logits_to_keep=0 if keep is None else keep.to(device),
    )
    logits = out.logits[0]
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    values = value_head(out.hidden_states[-1][0]) if value_head is not None else None
    return logits, values


def path_loss(
    model: nn.Module,
    flat: FlatTree,
    terms: PathTerms,
    p: int,
    cfg: LossConfig,
    value_head: nn.Module | None = None,
    ref_model: nn.Module | None = None,
    old_logprob: Tensor | None = None,
    policy_version: int | None = None,
    trim_logits: bool = False,
    seq_ratio: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Loss of rollout path p trained alone, with the same objective as `losses.tree_loss`.

    `old_logprob` and `seq_ratio` are per row of this path (see `path_rows`); None means π_old = π_θ
    detached, and no sequence ratio.
    `trim_logits` runs the LM head only where a row needs it, as the packed forward does (a fair
    baseline for timing); without it the reference is HF's plain full-logits forward.
    """
    positions = flat.path_positions(int(terms.path_node[p]))
    ids = torch.from_numpy(flat.tokens[positions].astype(np.int64))
    rows = path_rows(terms, p, positions, next(model.parameters()).dtype)
    keep, slot_of = None, None
    if trim_logits:
        keep, slot_of = torch.unique(rows.token - 1, return_inverse=True)
    logits, values = path_logits(model, ids, value_head, keep)
    rows = rows.to(logits.device, logits.dtype)
    ctx = rows.token - 1 if slot_of is None else slot_of.to(logits.device)
    target = ids.to(logits.device)[rows.token]
    temperature = rows.temperatures(cfg.temperature).to(logits.dtype)[:, None]  # π = softmax(logits / T)

    def row_logp(all_logits: Tensor) -> Tensor:  # (C, vocab): each row at its own temperature
        return torch.log_softmax(all_logits[ctx] / temperature, dim=-1)

    logp = row_logp(logits)
    logprob = logp.gather(-1, target[:, None]).squeeze(-1)
    with torch.set_grad_enabled(cfg.entropy_coef > 0 and torch.is_grad_enabled()):
        entropy = -(logp.exp() * logp).sum(-1)
    ref_logprob = None
    if ref_model is not None and cfg.kl_coef > 0:
        with torch.no_grad():
            ref_logp = row_logp(path_logits(ref_model, ids, keep=keep)[0])
            ref_logprob = ref_logp.gather(-1, target[:, None]).squeeze(-1)
    v = values[rows.value_token - 1] if values is not None else None
    return rows_loss(logprob, entropy, v, rows, cfg, old_logprob, ref_logprob, policy_version, seq_ratio)


def pack_paths(
    flat: FlatTree, terms: PathTerms, budget: int | None = None, dtype: torch.dtype = torch.float32
) -> list[PackedSequence]:
    """The linearised baseline at its best: rollout paths as separate causal segments packed into
    sequences of at most `budget` tokens (sequence packing, as varlen attention does it), no
    prefix shared. Same forward and loss code as tree packing (`losses.tree_loss`), so timing it
    against `packing.pack` isolates what sharing saves.
    """
    segments = []
    for p in range(len(terms.path_rollout)):
        positions = flat.path_positions(int(terms.path_node[p]))
        segments.append((positions, flat.tokens[positions], path_rows(terms, p, positions, dtype)))
    longest = max((len(s[0]) for s in segments), default=0)
    budget = budget or sum(len(s[0]) for s in segments)
    if longest > budget:
        raise InvalidArgument(f"a path of {longest} tokens does not fit the packing budget ({budget})")
    bins: list[list[tuple[np.ndarray, np.ndarray, LossRows]]] = [[]]
    used = 0
    for seg in segments:
        if used + len(seg[0]) > budget:
            bins.append([])
            used = 0
        bins[-1].append(seg)
        used += len(seg[0])
    return [_concat(b) for b in bins if b]


def _concat(segments: list[tuple[np.ndarray, np.ndarray, LossRows]]) -> PackedSequence:
    ids, pos, parent, end, tree_pos, rows = [], [], [], [], [], []
    offset = 0
    for positions, tokens, r in segments:
        L = len(positions)
        local = np.arange(L)
        ids.append(tokens)
        tree_pos.append(positions)
        pos.append(local)
        parent.append(np.where(local > 0, offset + local - 1, -1))
        end.append(np.full(L, offset + L))
        shifted = dict(r.__dict__)
        shifted["token"] = r.token + offset
        shifted["value_token"] = r.value_token + offset
        rows.append(shifted)
        offset += L
    tp = np.concatenate(tree_pos)

    def cat(x: list[np.ndarray]) -> Tensor:
        return torch.from_numpy(np.concatenate(x).astype(np.int64))

    return PackedSequence(
        input_ids=cat(ids),
        position_ids=cat(pos),
        parent=cat(parent),
        subtree_end=cat(end),
        tree_pos=torch.from_numpy(tp.astype(np.int64)),
        owned=torch.ones(len(tp), dtype=torch.bool),
        rows=LossRows(**{k: torch.cat([r[k] for r in rows]) for k in rows[0]}),
    )
