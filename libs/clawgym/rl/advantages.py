"""Advantage estimators as pure functions of tensors: GRPO group normalisation and GAE on one path.

Owns the maths only. Where each advantage lands in a tree (which tokens of which paths, with which
weight) is `rl/terms.py`; the losses are `rl/losses.py`.

References:
- GRPO: Shao et al. 2024, "DeepSeekMath", §4.1 (outcome supervision), https://arxiv.org/abs/2402.03300
- Leave-one-out baseline (RLOO): Ahmadian et al. 2024, "Back to Basics", https://arxiv.org/abs/2402.14740
- Dr. GRPO (no std scaling): Liu et al. 2025, "Understanding R1-Zero-Like Training", https://arxiv.org/abs/2503.20783
- GAE: Schulman et al. 2016, "High-Dimensional Continuous Control Using GAE", https://arxiv.org/abs/1506.02438
"""

import torch
from torch import Tensor

from clawgym.errors import InvalidArgument


def grpo_advantages(
    rewards: Tensor,
    group: Tensor,
    *,
    scale_by_std: bool = True,
    leave_one_out: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """Group-normalised rollout advantages.  rewards, group: (R,) -> A: (R,)

        A_i = (r_i - b_i) / (std_{g(i)} r + eps)     if scale_by_std   (GRPO)
        A_i =  r_i - b_i                             otherwise         (Dr. GRPO)

    with the baseline b_i = mean_{g(i)} r (GRPO) or, if leave_one_out, the mean of the *other*
    rollouts of the group, b_i = (Σ_{g(i)} r - r_i) / (n_{g(i)} - 1) (RLOO). `std` is the population
    standard deviation of the group. A group of one rollout gets A = 0 (nothing to compare with).
    """
    if rewards.ndim != 1 or group.shape != rewards.shape:
        raise InvalidArgument(
            f"rewards and group must both be (R,), got {tuple(rewards.shape)}, {tuple(group.shape)}"
        )
    if not torch.isfinite(rewards).all():
        raise InvalidArgument("every rollout needs a finite reward before computing advantages")
    _, g = torch.unique(group, return_inverse=True)  # (R,) dense group index
    n_groups = int(g.max()) + 1 if g.numel() else 0
    count = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, g, torch.ones_like(rewards))
    total = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, g, rewards)
    mean = total / count
    var = torch.zeros(n_groups, dtype=rewards.dtype).index_add_(0, g, (rewards - mean[g]) ** 2) / count
    n = count[g]
    if leave_one_out:
        baseline = torch.where(n > 1, (total[g] - rewards) / (n - 1).clamp(min=1), rewards)
    else:
        baseline = mean[g]
    adv = rewards - baseline
    if scale_by_std:
        adv = adv / (var.sqrt()[g] + eps)
    return torch.where(n > 1, adv, torch.zeros_like(adv))


def gae(rewards: Tensor, values: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation along one path of T steps.  rewards, values: (T,)

        δ_t = r_t + γ V_{t+1} - V_t        (V_T = 0: the episode ends after the last step)
        A_t = δ_t + γ λ A_{t+1}            (A_T = 0)
        R_t = A_t + V_t                    (the value target, "returns" in CleanRL)

    Returns (advantages, returns), both (T,). Same backward loop as CleanRL `ppo.py`.
    """
    if rewards.shape != values.shape or rewards.ndim != 1:
        raise InvalidArgument(
            f"rewards and values must both be (T,), got {tuple(rewards.shape)}, {tuple(values.shape)}"
        )
    r, v = rewards.tolist(), values.tolist()  # python floats: a long path is a plain loop, fast enough
    T = len(r)
    adv = [0.0] * T
    lastgaelam = 0.0
    for t in reversed(range(T)):
        next_value = v[t + 1] if t + 1 < T else 0.0
        delta = r[t] + gamma * next_value - v[t]
        lastgaelam = delta + gamma * lam * lastgaelam
        adv[t] = lastgaelam
    advantages = torch.tensor(adv, dtype=values.dtype)
    return advantages, advantages + values
