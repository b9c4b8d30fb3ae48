"""Supervised fine-tuning on prefix trees: the NLL of demonstrated (generated) tokens, tree-packed.

Owns the SFT objective on the same rows, packing and forward as the RL losses; not which rollouts
are demonstrations (`clawgym.trainer.demonstrations`) nor the optimizer step (`trainer/sft.py`).

    L_sft = -Σ_c w_c logπ_θ(c),   π_θ = softmax(logits)    (T = 1)

over every generated (rollout path, position) c of the trees, w_c its aggregation weight
(terms.py, departures 1-4): with "token" aggregation Σ w = 1 over a batch, so L_sft is the mean NLL
per demonstrated token, whichever trees and micro-batches it is split into.

How this departs from textbook SFT on linear sequences, numbered:
1. A shared token is computed once: rows merge by position alone (every path through a position
   sees the same prefix, so logπ_θ there is one number) and carry the sum of their weights. The
   engine logprobs, versions and temperatures that keep RL rows apart mean nothing here (a teacher's
   tokens, an earlier policy's): the terms set them equal so that they never split a row.
2. π is the policy at temperature 1, whatever temperature sampled the demonstration: SFT fits the
   model's own distribution; serving at T rescales it as it does for the RL-trained policy.
Exactness: `path_nll` trains each rollout path alone through HF's causal forward; summed over
paths its loss and gradients equal the packed tree's (tests/rl/test_sft_exactness.py).
"""

import dataclasses

import numpy as np
import torch
from torch import Tensor, nn

from clawgym.rl.forward import packed_forward
from clawgym.rl.packing import LossRows, PackedSequence
from clawgym.rl.per_path import path_logits, path_rows
from clawgym.rl.terms import Aggregation, PathTerms, _steps
from clawgym.trajectory.flat import FlatTree


def sft_terms(flat: FlatTree, aggregation: Aggregation = "token") -> PathTerms:
    """Every generated token of every rollout path of `flat`, weighted (terms.py 1-4), advantage 1;
    engine logprob 0, version 0 and temperature 1 on every row (departures 1-2)."""
    s = _steps(flat, aggregation)
    k = len(s.pos)
    return PathTerms(
        path_rollout=s.path_rollout,
        path_node=s.path_node,
        path=s.path,
        pos=s.pos,
        adv=np.ones(k),
        weight=s.weight,
        engine_logprob=np.zeros(k, np.float32),
        version=np.zeros(k, np.int32),
        temperature=np.ones(k, np.float32),
        call=s.call,
    )


def rescaled(terms: PathTerms, scale: float) -> PathTerms:
    """`terms` with every weight times `scale` (a tree's share of the batch normaliser)."""
    return dataclasses.replace(terms, weight=terms.weight * scale)


def nll_loss(logprob: Tensor, entropy: Tensor, rows: LossRows) -> tuple[Tensor, dict[str, float]]:
    """L_sft on loss rows (merged rows of a packed tree, or one path's rows), with diagnostics.
    logprob, entropy: (C,)"""
    loss = -(rows.weight * logprob).sum()
    with torch.no_grad():
        W = float(rows.weight.sum())
        diagnostics = {
            "weight": W,
            "rows": float(len(logprob)),
            "loss": float(loss),
            "entropy": float((rows.weight * entropy).sum()) / W if W > 0 else 0.0,
        }
    return loss, diagnostics


def tree_nll(model: nn.Module, pack: PackedSequence) -> tuple[Tensor, dict[str, float]]:
    """L_sft of one micro-batch: `loss.backward()` per micro-batch, the losses add up (as `tree_loss`)."""
    out = packed_forward(model, pack, temperature=1.0)
    return nll_loss(out.logprob, out.entropy, pack.rows.to(out.logprob.device, out.logprob.dtype))


def path_nll(model: nn.Module, flat: FlatTree, terms: PathTerms, p: int) -> tuple[Tensor, dict[str, float]]:
    """L_sft of rollout path p trained alone, HF's plain causal forward on its tokens: the exactness
    reference of `tree_nll`."""
    positions = flat.path_positions(int(terms.path_node[p]))
    ids = torch.from_numpy(flat.tokens[positions].astype(np.int64))
    logits, _ = path_logits(model, ids)
    rows = path_rows(terms, p, positions, logits.dtype).to(logits.device, logits.dtype)
    logp = torch.log_softmax(logits[rows.token - 1], dim=-1)
    logprob = logp.gather(-1, ids.to(logits.device)[rows.token][:, None]).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1).detach()
    return nll_loss(logprob, entropy, rows)
