"""The RL losses on packed trees: PPO-clip with off-policy correction, KL, value loss, entropy bonus.

Owns the objective and its diagnostics. The pure functions at the top take tensors and floats; the
bottom section runs a model on one `PackedSequence` and is what the trainer calls per micro-batch
(`tree_loss`). Advantages and row weights come from `terms.py`, the layout from `packing.py`.

Per row c (one trainable position with one engine logprob; see terms.py departure 5):

    r_c     = exp(logπ_θ(c) - logπ_old(c))                 PPO ratio; π_old = π_θ detached if not given
    clip(r) = clamp(r, 1 - ε_low, 1 + ε_high)               separate low/high clip (DAPO clip-higher)
    ρ_c     = min(exp(logπ_old(c) - logπ_engine(c)), C)     truncated importance sampling (TIS), no grad
    ρ_s     = exp(1/|s| Σ_{c∈s} (logπ_old(c) - logπ_engine(c)))  geometric-mean ratio of sequence s, no grad
    m_c     = 1[L <= ρ_s(c) <= H]                          band mask of the row's sequence (1 unless *_mask)
    ρ'_c    = min(ρ_c, C)     token_tis (`off_policy`; ρ'_c = 1 with C = None)
            = min(ρ_s(c), C)  call_geo_tis, rollout_geo_tis
            = m_c min(ρ_c, C) call_geo_mask, rollout_geo_mask
    L_pg    = -Σ_c ρ'_c [min(r A⁺, clip(r) A⁺) + min(r A⁻, clip(r) A⁻)]
    L_kl    =  Σ_c m_c w_c min(k3(c), K),  k3 = exp(logπ_ref - logπ_θ) - (logπ_ref - logπ_θ) - 1
               (with β_kl = 0 and a reference given, measured as `kl_ref` without entering the loss)
    L_v     =  Σ_v w_v ½ max((V - R)², (V_old + clip(V - V_old, ±ε_v) - R)²)   (unclipped without ε_v)
    H       =  Σ_c m_c w_c entropy(π_θ(· | prefix))
    loss    =  L_pg + β_kl L_kl + c_v L_v - c_H H

How this departs from the textbook, numbered:
1. A shared token's rows carry the *sums* of its per-path contributions: A⁺ and A⁻ apart, exact
   for the clip because r is the same on every path through the token (terms.py, 5).
2. Weights (token- or sequence-level aggregation) are folded into A⁺, A⁻ and w when the terms are
   built, over the whole tree, so the losses of micro-batches simply add up (no per-batch mean).
3. TIS corrects the engine/trainer mismatch: ρ' multiplies each row's clipped objective. A long
   agent rollout's calls may be served by several policy versions (and a call's tokens by two, when
   weights load mid-call); the sequence-level options weigh a whole call (or rollout) by its
   geometric-mean ratio ρ_s, as verl's "rollout correction" does per response: s is a call (terms.py,
   departure 7) or a rollout, |s| its own generated tokens, each once however many paths pass it.
   A call whose ρ_s leaves [L, H] is masked (IcePop-style rejection): no policy, KL or entropy
   gradient, still counted by the normaliser, so the step is smaller, not the rest reweighted. ρ_s
   needs every row of s, which may span micro-batches: `sequence_ratios` computes it from π_old at
   every pack's rows before the first backward (one no-grad forward more when `epochs` is 1).
4. k3 is capped per row at K (`kl_cap`, 10 by default, as verl's low_var_kl bounds it): on a row
   where π_θ is far below π_ref, exp(logπ_ref - logπ_θ) explodes, and one such row made a whole
   step's gradient (bench/stability.py, β = 0.1: kl_ref 817 and a gradient norm of 16,590 before
   clipping at one step). A capped row adds K and no gradient.

References: PPO, Schulman et al. 2017, https://arxiv.org/abs/1707.06347; DAPO clip-higher, Yu et
al. 2025, https://arxiv.org/abs/2503.14476; TIS, Yao et al. 2025, "Your Efficient RL Framework
Secretly Brings You Off-Policy RL Training", https://fengyao.notion.site/off-policy-rl; geometric
rejection, Liu, Li et al. 2025, "When Speed Kills Stability", https://richardli.xyz/rl-collapse, and
verl's docs/algo/rollout_corr.md; IcePop masking, Ling Team 2025 (the Ring-1T report); k3, Schulman
2020, http://joschu.net/blog/kl-approx.html; value clipping and diagnostics, CleanRL `ppo.py`.
"""

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from clawgym.errors import InvalidArgument
from clawgym.rl.forward import packed_forward
from clawgym.rl.packing import LossRows, PackedSequence

OffPolicy = Literal["token_tis", "call_geo_tis", "rollout_geo_tis", "call_geo_mask", "rollout_geo_mask"]


@dataclass(frozen=True, kw_only=True)
class LossConfig:
    """Coefficients of the tree loss (aggregation is chosen when building terms, see terms.py).

    No defaults here: `clawgym.trainer.config.AlgorithmConfig` owns them (`.loss_config()`)."""

    clip_low: float
    """ε_low: the ratio is clipped below at 1 - ε_low"""
    clip_high: float
    """ε_high: the ratio is clipped above at 1 + ε_high (DAPO's clip-higher; 0.2 gives plain PPO)"""
    tis_cap: float | None
    """C: cap of the importance weight against the engine's logprobs, per token or with *_geo_tis per
    sequence (None: uncapped; no correction at all with token_tis)"""
    off_policy: OffPolicy
    """which correction ρ' is (module docstring)"""
    geo_mask_low: float
    """L: *_geo_mask masks a sequence whose ρ_s is below L"""
    geo_mask_high: float
    """H: *_geo_mask masks a sequence whose ρ_s is above H"""
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

    @property
    def sequence_level(self) -> Literal["call", "rollout"] | None:
        """The sequence ρ_s is taken over: `merge_terms(by=...)` must merge rows within it."""
        if self.off_policy.startswith("call_"):
            return "call"
        return "rollout" if self.off_policy.startswith("rollout_") else None


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


@torch.no_grad()
def geometric_ratio(old_logprob: Tensor, engine_logprob: Tensor, seq: Tensor) -> Tensor:
    """ρ_s = exp(mean_{c∈s} (logπ_old(c) - logπ_engine(c))) of each row's sequence s, without
    gradient.  (C,) -> (C,). The rows must hold each token of s once (merge_terms(by=...)); the mean
    is taken in float64 so that its order of summation does not show."""
    _, inverse = torch.unique(seq, return_inverse=True)
    n = int(inverse.max()) + 1 if len(inverse) else 0
    diff = (old_logprob - engine_logprob).double()
    total = torch.zeros(n, dtype=torch.float64, device=diff.device).index_add_(0, inverse, diff)
    count = torch.bincount(inverse, minlength=n).to(torch.float64)
    return torch.exp(total / count)[inverse].to(old_logprob.dtype)


def sequence_ratios(rows: list[LossRows], old_logprob: list[Tensor]) -> list[Tensor]:
    """ρ_s at every row of several packs (the micro-batches of one rank, whose trees are whole), from
    π_old at their rows: a sequence's rows may lie in several packs.  -> one (C_k,) per pack."""
    if not rows:
        return []
    device = old_logprob[0].device
    cat = geometric_ratio(
        torch.cat([o.detach() for o in old_logprob]),
        torch.cat([r.engine_logprob.to(device, old_logprob[0].dtype) for r in rows]),
        torch.cat([r.seq.to(device) for r in rows]),
    )
    return list(torch.split(cat, [len(r.seq) for r in rows]))


def off_policy_weight(
    cfg: LossConfig, old_logprob: Tensor, engine_logprob: Tensor, seq_ratio: Tensor | None
) -> tuple[Tensor, Tensor]:
    """(ρ', m) per row, without gradient: the weight of the clipped objective and the band mask (1
    outside the *_mask modes).  (C,) -> (C,), (C,)"""
    ones = torch.ones_like(old_logprob)
    tis = ones if cfg.tis_cap is None else truncated_is_weight(old_logprob, engine_logprob, cfg.tis_cap)
    if cfg.off_policy == "token_tis":
        return tis, ones
    if seq_ratio is None:
        raise InvalidArgument(
            f"off_policy {cfg.off_policy} needs each row's sequence ratio (losses.sequence_ratios)"
        )
    seq_ratio = seq_ratio.detach().to(old_logprob)
    if cfg.off_policy.endswith("_geo_tis"):
        return (seq_ratio if cfg.tis_cap is None else seq_ratio.clamp(max=cfg.tis_cap)), ones
    keep = ((seq_ratio >= cfg.geo_mask_low) & (seq_ratio <= cfg.geo_mask_high)).to(old_logprob.dtype)
    return keep * tis, keep


def off_policy_counts(seq: Tensor, seq_ratio: Tensor, cfg: LossConfig) -> np.ndarray:
    """float64 (6,): sequences, masked sequences, tokens, masked tokens, Σ ρ_s, max ρ_s over the rows
    of one rank's packs (each token of a sequence once), for `off_policy_metrics`."""
    if len(seq) == 0:
        return np.array([0.0, 0.0, 0.0, 0.0, 0.0, -np.inf])
    _, first, tokens = np.unique(seq.cpu().numpy(), return_index=True, return_counts=True)
    rho = seq_ratio.detach().double().cpu().numpy()[first]
    masked = np.zeros(len(rho), bool)
    if cfg.off_policy.endswith("_geo_mask"):
        masked = (rho < cfg.geo_mask_low) | (rho > cfg.geo_mask_high)
    return np.array(
        [len(rho), masked.sum(), tokens.sum(), tokens[masked].sum(), rho.sum(), rho.max()], dtype=np.float64
    )


def off_policy_metrics(counts: list[np.ndarray]) -> dict[str, float]:
    """The step's sequence-level figures from every rank's `off_policy_counts`: mean and max ρ_s over
    sequences, the fraction of sequences and of their tokens masked."""
    n, n_masked, tokens, tokens_masked, total = np.sum(counts, axis=0)[:5].tolist()
    top = max(float(c[5]) for c in counts)
    if n == 0:
        return {}
    return {
        "off_policy_ratio_mean": total / n,
        "off_policy_ratio_max": top,
        "off_policy_masked_frac": n_masked / n,
        "off_policy_masked_token_frac": tokens_masked / max(tokens, 1.0),
    }


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
    seq_ratio: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The whole objective on loss rows, with diagnostics.  logprob, entropy: (C,); values: (V,)

    Works on any rows: the merged rows of a packed tree or the per-path rows of one linear
    sequence (the exactness tests compare the two). `seq_ratio` (C,): ρ_s of each row's sequence
    (`sequence_ratios`), needed by the call_* and rollout_* corrections.
    """
    old = logprob.detach() if old_logprob is None else old_logprob.to(logprob)
    logratio = logprob - old
    ratio = torch.exp(logratio)
    tis, keep = off_policy_weight(cfg, old, rows.engine_logprob, seq_ratio)
    pg_loss = (tis * ppo_clip_objective(ratio, rows.adv_pos, rows.adv_neg, cfg.clip_low, cfg.clip_high)).sum()
    w_kept = keep * rows.weight  # a masked row adds no entropy or KL gradient either
    entropy_sum = (w_kept * entropy).sum()
    loss = pg_loss - cfg.entropy_coef * entropy_sum
    kl = None
    if ref_logprob is not None:  # with β_kl = 0 measured only (a diagnostic): no graph, no gradient
        with torch.set_grad_enabled(cfg.kl_coef > 0 and torch.is_grad_enabled()):
            kl = (w_kept * kl_k3(logprob, ref_logprob.to(logprob), cfg.kl_cap)).sum()
        if cfg.kl_coef > 0:
            loss = loss + cfg.kl_coef * kl
    v_loss = None
    if values is not None:
        v_loss = (rows.value_weight * value_loss(values, rows.old_value, rows.returns, cfg.value_clip)).sum()
        loss = loss + cfg.value_coef * v_loss
    entropy_all = (rows.weight * entropy.detach()).sum()  # the policy's entropy, masked rows included
    diagnostics = _diagnostics(
        rows, cfg, loss, pg_loss, entropy_all, kl, v_loss, ratio, logratio, tis, old, values, policy_version
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
    if version is not None:
        d["policy_lag"] = wmean(version - rows.version.to(w.dtype))
    return d


def value_moments(returns: Tensor, values: Tensor, weight: Tensor) -> np.ndarray:
    """float64 (5,): Σw, Σw·R, Σw·R², Σw·e, Σw·e² with e = R - V, over value rows; moments of several
    micro-batches and ranks add up, and `explained_variance` takes their sum."""
    w, r = weight.detach().double().cpu(), returns.detach().double().cpu()
    e = r - values.detach().double().cpu()
    return np.array([float(w.sum()), float((w * r).sum()), float((w * r * r).sum()),
                     float((w * e).sum()), float((w * e * e).sum())])  # fmt: skip


def explained_variance(moments: np.ndarray, eps: float = 1e-12) -> float | None:
    """1 - Var_w(R - V) / Var_w(R) from summed `value_moments` (CleanRL's, weighted by the value rows'
    loss weights, so a token shared by paths counts once); None where it is undefined: no rows, or
    every return equal (a step of all-0 rewards), where a NaN would fail the step's record."""
    total, r1, r2, e1, e2 = (float(x) for x in moments)
    if total <= 0:
        return None
    var_r = r2 / total - (r1 / total) ** 2
    var_e = e2 / total - (e1 / total) ** 2
    if var_r <= eps * max(r2 / total, 1.0):
        return None
    return 1.0 - max(var_e, 0.0) / var_r


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
    seq_ratio: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Loss and diagnostics of one micro-batch. Call `loss.backward()` per micro-batch and step
    once: the terms are normalised over the whole tree, so the micro-batch losses add up to the
    tree's loss and their gradients to its gradient.

    `old_logprob` (C,): π_old at the rows for several updates on one batch (`forward.old_logprobs`
    before the first); None means one update, π_old = π_θ detached (ratio 1, gradient ∇logπ).
    `ref_model`: the frozen reference policy for the KL term (used when cfg.kl_coef > 0).
    `seq_ratio` (C,): ρ_s at the rows, from `sequence_ratios` over all the tree's packs.
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
        out.logprob, out.entropy, out.values, rows, cfg, old_logprob, ref_logprob, policy_version, seq_ratio
    )
