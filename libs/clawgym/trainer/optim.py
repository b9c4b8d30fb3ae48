"""AdamW and the learning-rate schedule: linear warmup, then constant, linear or cosine decay.

Owns the optimizer's parameter groups (the value head may have its own learning rate) and the
schedule as a pure function of the step, so that a resumed run continues the same curve.
"""

import math

import torch

from clawgym.trainer.config import AlgorithmConfig
from clawgym.trainer.policy import PolicyModule


def lr_factor(step: int, algo: AlgorithmConfig, total_steps: int) -> float:
    """The multiplier of `algo.lr` for optimizer step `step` (0-based).

    warmup (step < W):  (step + 1) / W
    then, with progress p = (step - W) / max(total - W, 1) clipped to [0, 1] and floor m:
      constant: 1     linear: 1 - (1 - m) p     cosine: m + (1 - m) (1 + cos π p) / 2
    """
    warmup = algo.warmup_steps
    if step < warmup:
        return (step + 1) / warmup
    progress = min(max((step - warmup) / max(total_steps - warmup, 1), 0.0), 1.0)
    floor = algo.min_lr_ratio
    if algo.lr_schedule == "linear":
        return 1.0 - (1.0 - floor) * progress
    if algo.lr_schedule == "cosine":
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def make_optimizer(
    policy: PolicyModule, algo: AlgorithmConfig, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters (LM, and the value head at `value_lr` if set) and its schedule."""
    value_ids = {id(p) for p in policy.value_head.parameters()} if policy.value_head is not None else set()
    lm = [p for p in policy.parameters() if p.requires_grad and id(p) not in value_ids]
    groups = [{"params": lm, "lr": algo.lr}]
    if value_ids:
        value = [p for p in policy.parameters() if id(p) in value_ids]
        groups.append({"params": value, "lr": algo.value_lr or algo.lr})
    optimizer = torch.optim.AdamW(
        groups, lr=algo.lr, betas=algo.betas, eps=algo.adam_eps, weight_decay=algo.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, algo, total_steps))
    return optimizer, scheduler
