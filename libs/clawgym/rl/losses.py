"""The RL losses on packed trees: PPO-clip with TIS, KL to a reference, value loss, entropy bonus.

Owns the objective and its diagnostics. The pure functions at the top take tensors and floats; the
bottom section runs a model on one `PackedSequence` and is what the trainer calls per micro-batch
(`tree_loss`). Advantages and row weights come from `terms.py`, the layout from `packing.py`.

Per row c (one trainable position with one engine logprob; see terms.py departure 5):

    r_c     = exp(logπ_θ(c) - logπ_old(c))                 PPO ratio; π_old = π_θ detached if not given
    clip(r) = clamp(r, 1 - ε_low, 1 + ε_high)               separate low/high clip (DAPO clip-higher)
    ρ_c     = min(exp(logπ_old(c) - logπ_engine(c)), C)     truncated importance sampling (TIS), no grad
    L_pg    = -Σ_c ρ_c [min(r A⁺, clip(r) A⁺) + min(r A⁻, clip(r) A⁻)]
    L_kl    =  Σ_c w_c min(k3(c), K),  k3 = exp(logπ_ref - logπ_θ) - (logπ_ref - logπ_θ) - 1
               (with β_kl = 0 and a reference given, measured as `kl_ref` without entering the loss)
    L_v     =  Σ_v w_v ½ max((V - R)², (V_old + clip(V - V_old, ±ε_v) - R)²)   (unclipped without ε_v)
    H       =  Σ_c w_c entropy(π_θ(· | prefix))
    loss    =  L_pg + β_kl L_kl + c_v L_v - c_H H

How this departs from the textbook, numbered:
1. A shared token's rows carry the *sums* of its per-path contributions: A⁺ and A⁻ apart, exact
   for the clip because r is the same on every path through the token (terms.py, 5).
2. Weights (token- or sequence-level aggregation) are folded into A⁺, A⁻ and w when the terms are
   built, over the whole tree, so the losses of micro-batches simply add up (no per-batch mean).
3. TIS corrects the engine/trainer mismatch: ρ multiplies each row's clipped objective.
4. k3 is capped per row at K (`kl_cap`, 10 by default, as verl's low_var_kl bounds it): on a row
   where π_θ is far below π_ref, exp(logπ_ref - logπ_θ) explodes, and one such row made a whole
   step's gradient (bench/stability.py, β = 0.1: kl_ref 817 and a gradient norm of 16,590 before
   clipping at one step). A capped row adds K and no gradient.

References: PPO, Schulman et al. 2017, https://arxiv.org/abs/1707.06347; DAPO clip-higher, Yu et
al. 2025, https://arxiv.org/abs/2503.14476; TIS, Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training", https://fengyao.notion.site/off-policy-rl; k3, Schulman
2020, http://joschu.net/blog/kl-approx.html; value clipping and diagnostics, CleanRL `ppo.py`.
"""

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from clawgym.rl.forward import packed_forward
from clawgym.rl.packing import LossRows, PackedSequence


@dataclass(frozen=True, kw_only=True)
class LossConfig:
    """Coefficients of the tree loss (aggregation is chosen when building terms, see terms.py).

    No defaults here: `clawgym.trainer.config.AlgorithmConfig` owns them (`.loss_config()`)."""

    clip_low: float
    """ε_low: the ratio is clipped below at 1 - ε_low"""
    clip_high: float
    """ε_high: the ratio is clipped above at 1 + ε_high (DAPO's clip-higher; 0.2 gives plain PPO)"""
    tis_cap: float | None
    """C: truncated importance sampling cap against the engine's logprobs (None: no correction)"""
    kl_coef: float
    """β_kl: weight of the k3 KL estimate to the reference policy (needs a reference model)"""
    kl_cap: float | None
    """K: each row's k3 is capped at K (None: uncapped)"""
    entropy_coef: float
    """c_H: entropy bonus"""
    value_coef: float
    """c_v: weight of the value loss (PPO with a value head)"""
    value_clip: float | None
    """ε_v: clip the value change around V_old (None: plain squared error)"""
    temperature: float
    """T: the rollouts' sampling temperature; π is softmax(logits / T), as the engine sampled it"""


# --- pure losses ---


def ppo_clip_objective(
    ratio: Tensor, adv_pos: Tensor, adv_neg: Tensor, clip_low: float, clip_high: float
) -> Tensor:
    """Per-row clipped surrogate loss on merged rows.  ratio, adv_pos, adv_neg: (C,) -> (C,)

        ℓ = -[min(r A⁺, clip(r) A⁺) + min(r A⁻, clip(r) A⁻)],  clip(r) = clamp(r, 1-ε_low, 1+ε_high)

    With only one of A⁺, A⁻ non-zero this is CleanRL's max(-A r, -A clip(r)).
    """
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_pos = torch.min(ratio * adv_pos, clipped * adv_pos)
    pg_neg = torch.min(ratio * adv_neg, clipped * adv_neg)
    return -(pg_pos + pg_neg)


def truncated_is_weight(old_logprob: Tensor, engine_logprob: Tensor, cap: float) -> Tensor:
    """ρ = min(π_old / π_engine, C), without gradient.  (C,) -> (C,)"""
    return torch.exp(old_logprob - engine_logprob).clamp(max=cap).detach()


def kl_k3(logprob: Tensor, ref_logprob: Tensor, cap: float | None = None) -> Tensor:
    """k3 = exp(logπ_ref - logπ) - (logπ_ref - logπ) - 1 >= 0, an unbiased KL(π‖π_ref) estimate on π's
    samples; with `cap`, min(k3, cap) per row (a capped row has no gradient)."""
    log_ratio = ref_logprob - logprob
    if cap is None:
        return torch.exp(log_ratio) - log_ratio - 1.0
    # beyond ±(cap + 1) k3 already exceeds the cap (k3(x) >= |x| - 1), so this clamp changes no capped
    # value and keeps exp finite
    log_ratio = log_ratio.clamp(-(cap + 1), cap + 1)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(max=cap)


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip_eps: float | None) -> Tensor:
    """Per-row value loss.  values, old_values, returns: (V,) -> (V,)

    ½ (V - R)²                                               without clip_eps
    ½ max((V - R)², (V_old + clamp(V - V_old, ±ε) - R)²)     with it (CleanRL `clip_vloss`)
    """
    v_loss_unclipped = (values - returns) ** 2
    if clip_eps is None:
        return 0.5 * v_loss_unclipped
    v_clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    v_loss_clipped = (v_clipped - returns) ** 2
    return 0.5 * torch.max(v_loss_unclipped, v_loss_clipped)


def rows_loss(
    logprob: Tensor,
    entropy: Tensor,
    values: Tensor | None,
    rows: LossRows,
    cfg: LossConfig,
    old_logprob: Tensor | None = None,
    ref_logprob: Tensor | None = None,
    policy_version: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The whole objective on loss rows, with diagnostics.  logprob, entropy: (C,); values: (V,)

    Works on any rows: the merged rows of a packed tree or the per-path rows of one linear
    sequence (the exactness tests compare the two).
    """
    old = logprob.detach() if old_logprob is None else old_logprob.to(logprob)
    logratio = logprob - old
    ratio = torch.exp(logratio)
    tis = (
        torch.ones_like(ratio)
        if cfg.tis_cap is None
        else truncated_is_weight(old, rows.engine_logprob, cfg.tis_cap)
    )
    pg_loss = (tis * ppo_clip_objective(ratio, rows.adv_pos, rows.adv_neg, cfg.clip_low, cfg.clip_high)).sum()
    entropy_sum = (rows.weight * entropy).sum()
    loss = pg_loss - cfg.entropy_coef * entropy_sum
    kl = None
    if ref_logprob is not None:  # with β_kl = 0 measured only (a diagnostic): no graph, no gradient
        with torch.set_grad_enabled(cfg.kl_coef > 0 and torch.is_grad_enabled()):
            kl = (rows.weight * kl_k3(logprob, ref_logprob.to(logprob), cfg.kl_cap)).sum()
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl
    v_loss = None
    if values is not None:
        v_loss = (rows.value_weight * value_loss(values, rows.old_value, rows.returns, cfg.value_clip)).sum()
        loss = loss + cfg.value_coef * v_loss
    diagnostics = _diagnostics(
        rows, cfg, loss, pg_loss, entropy_sum, kl, v_loss, ratio, logratio, tis, old, values, policy_version
    )
    return loss, diagnostics


@torch.no_grad()
def _diagnostics(
    rows, cfg, loss, pg_loss, entropy_sum, kl, v_loss, ratio, logratio, tis, old, values, version
):
    w = rows.weight
    W = float(w.sum())

    def wmean(x: Tensor) -> float:
        return float((w * x).sum()) / W if W > 0 else 0.0

    d: dict[str, float] = {
        "weight": W,
        "rows": float(len(w)),
        "loss": float(loss),
        "policy_loss": float(pg_loss),
        "entropy": float(entropy_sum) / W if W > 0 else 0.0,
        "approx_kl": wmean((ratio - 1) - logratio),
        "clipfrac": wmean(((ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)).to(w.dtype)),
        "ratio_mean": wmean(ratio),
        "ratio_min": float(ratio.min()) if len(ratio) else 1.0,
        "ratio_max": float(ratio.max()) if len(ratio) else 1.0,
        "tis_mean": wmean(tis),
        "tis_truncated_frac": wmean((tis >= (cfg.tis_cap or float("inf"))).to(w.dtype)),
        "logprob_mismatch": wmean((old - rows.engine_logprob).abs()),
        "kl_engine_train": wmean(kl_k3(rows.engine_logprob, old)),
    }
    if kl is not None:
        d["kl_ref"] = float(kl)
    if v_loss is not None and values is not None:
        d["value_loss"] = float(v_loss)
        var_ret = torch.var(rows.returns, unbiased=False) if len(values) > 1 else torch.tensor(0.0)
        err = torch.var(rows.returns - values, unbiased=False) if len(values) > 1 else torch.tensor(0.0)
        if var_ret > 0:  # undefined when every return is equal (a step of all-0 rewards, V = 0): left out,
            d["explained_variance"] = float(1 - err / var_ret)  # a NaN would fail the step's record
    if version is not None:
        d["policy_lag"] = wmean(version - rows.version.to(w.dtype))
    return d


_SUMS = ("weight", "rows", "loss", "policy_loss", "kl_ref", "value_loss")


def combine_diagnostics(parts: list[dict[str, float]]) -> dict[str, float]:
    """Diagnostics of a whole step from its micro-batches: sums add, *_min and *_max take the
    extreme, everything else is a mean weighted by each micro-batch's total row weight."""
    out: dict[str, float] = {}
    W = sum(p.get("weight", 0.0) for p in parts)
    for key in {k for p in parts for k in p}:
        vals = [(p[key], p.get("weight", 0.0)) for p in parts if key in p]
        if key in _SUMS:
            out[key] = sum(v for v, _ in vals)
        elif key.endswith("_min"):
            out[key] = min(v for v, _ in vals)
        elif key.endswith("_max"):
            out[key] = max(v for v, _ in vals)
        else:
            out[key] = sum(v * w for v, w in vals) / W if W > 0 else 0.0
    return out


# --- the tree loss the trainer calls ---


def tree_loss(
    model: nn.Module,
    pack: PackedSequence,
    cfg: LossConfig,
    value_head: nn.Module | None = None,
    ref_model: nn.Module | None = None,
    old_logprob: Tensor | None = None,
    policy_version: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Loss and diagnostics of one micro-batch. Call `loss.backward()` per micro-batch and step
    once: the terms are normalised over the whole tree, so the micro-batch losses add up to the
    tree's loss and their gradients to its gradient.

    `old_logprob` (C,): π_old at the rows for several updates on one batch (`forward.old_logprobs`
    before the first); None means one update, π_old = π_θ detached (ratio 1, gradient ∇logπ).
    `ref_model`: the frozen reference policy for the KL term (used when cfg.kl_coef > 0).
    """
    out = packed_forward(
        model, pack, value_head, entropy_grad=cfg.entropy_coef > 0, temperature=cfg.temperature
    )
    rows = pack.rows.to(out.logprob.device, out.logprob.dtype)
    ref_logprob = None
    if ref_model is not None and cfg.kl_coef > 0:
        with torch.no_grad():
            ref_logprob = packed_forward(ref_model, pack, temperature=cfg.temperature).logprob
    return rows_loss(
        out.logprob, out.entropy, out.values, rows, cfg, old_logprob, ref_logprob, policy_version
    )
