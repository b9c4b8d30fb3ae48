"""One supervised optimizer step on a rank's demonstration trees: NLL terms → packed micro-batches →
gradient accumulation, as `update.py` does for RL.

Owns the SFT update; the loss is `clawgym.rl.sft`, the batch `demonstrations.Demonstrations`, the
step's save, commit and publish the trainer's (`Trainer._sft_step`). Same departures from
single-process training as `update.py` (1, 2): the normaliser spans every rank's trees, each rank's
loss is multiplied by the world size, and ranks with fewer micro-batches run zero-weighted dummies.
"""

import numpy as np
import torch

from clawgym.rl import combine_diagnostics, merge_terms, pack
from clawgym.rl.packing import PackedSequence
from clawgym.rl.sft import nll_loss, rescaled, sft_terms
from clawgym.trainer.batch import GroupTree
from clawgym.trainer.config import AlgorithmConfig
from clawgym.trainer.distributed import World, full_tensor
from clawgym.trainer.policy import PolicyModule, dummy_pack
from clawgym.trainer.update import Normaliser, _zero_missing_grads


def sft_packs(
    trees: list[GroupTree], algo: AlgorithmConfig, norm: Normaliser, budget: int
) -> list[PackedSequence]:
    """This rank's micro-batches: every demonstrated token, weighted over the whole batch."""
    packs: list[PackedSequence] = []
    for tree in trees:
        terms = rescaled(sft_terms(tree.flat, algo.aggregation), norm.scale(tree, algo.aggregation))
        packs += pack(tree.flat, budget, merge_terms(terms))
    return packs


def sft_update(
    policy: PolicyModule, optimizer: torch.optim.Optimizer, packs: list[PackedSequence], algo: AlgorithmConfig,
    world: World,
) -> dict[str, float]:  # fmt: skip
    """One optimizer step on this rank's packs; the batch's loss, entropy and grad norm (every rank)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    optimizer.zero_grad(set_to_none=True)
    parts = []
    n_steps = world.max_int(len(packs))
    for k in range(n_steps):
        real = k < len(packs)
        p = packs[k] if real else dummy_pack()
        logprob, entropy, _ = policy(p)
        loss, diagnostics = nll_loss(logprob, entropy, p.rows.to(logprob.device, logprob.dtype))
        if real:
            parts.append(diagnostics)
        (loss * (world.size if real else 0.0)).backward()
    if n_steps == 0:  # no rank had a demonstration: AdamW still steps, as update.py's does
        _zero_missing_grads(params)
    grad_norm = float(full_tensor(torch.nn.utils.clip_grad_norm_(params, algo.max_grad_norm)))
    if np.isfinite(grad_norm):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)  # as in update.py: freed for the rollouts; NaN/inf dropped unused
    combined = combine_diagnostics([d for d in world.gather(combine_diagnostics(parts)) if d])
    return {
        "loss": combined.get("loss", 0.0),
        "entropy": combined.get("entropy", 0.0),
        "grad_norm": grad_norm,
    }
