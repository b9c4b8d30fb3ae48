"""The loss maths: PPO clip (and why A⁺/A⁻ stay apart), TIS, k3, value loss, diagnostics."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from clawgym.rl import LossRows, combine_diagnostics, rows_loss
from clawgym.rl.losses import (
    explained_variance,
    kl_k3,
    ppo_clip_objective,
    truncated_is_weight,
    value_loss,
    value_moments,
)
from clawgym.trainer.config import AlgorithmConfig


def cleanrl_pg_loss(
    ratio: torch.Tensor, adv: torch.Tensor, clip_low: float, clip_high: float
) -> torch.Tensor:
    """CleanRL ppo.py, with separate low/high clip."""
    pg_loss1 = -adv * ratio
    pg_loss2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    return torch.max(pg_loss1, pg_loss2)


@settings(max_examples=100, deadline=None)
@given(st.floats(0.3, 3.0), st.floats(-3, 3), st.floats(0.05, 0.4), st.floats(0.05, 0.4))
def test_clip_objective_is_cleanrls_for_a_single_advantage(r, a, lo, hi):
    ratio, adv = torch.tensor([r], dtype=torch.float64), torch.tensor([a], dtype=torch.float64)
    ours = ppo_clip_objective(ratio, adv.clamp(min=0), adv.clamp(max=0), lo, hi)
    assert ours.item() == pytest.approx(cleanrl_pg_loss(ratio, adv, lo, hi).item(), abs=1e-12), (
        "same surrogate"
    )


@settings(max_examples=100, deadline=None)
@given(st.floats(0.3, 3.0), st.lists(st.floats(-3, 3), min_size=1, max_size=6))
def test_summing_positive_and_negative_advantages_apart_is_exact_in_value_and_gradient(r, advs):
    """Σ_k min(r a_k, clip(r) a_k) = min(r A⁺, clip(r) A⁺) + min(r A⁻, clip(r) A⁻) for a shared ratio."""
    a = torch.tensor(advs, dtype=torch.float64)
    r1 = torch.tensor([r], dtype=torch.float64, requires_grad=True)
    per_path = ppo_clip_objective(r1.expand(len(a)), a.clamp(min=0), a.clamp(max=0), 0.2, 0.28).sum()
    (g1,) = torch.autograd.grad(per_path, r1)
    r2 = torch.tensor([r], dtype=torch.float64, requires_grad=True)
    merged = ppo_clip_objective(r2, a.clamp(min=0).sum()[None], a.clamp(max=0).sum()[None], 0.2, 0.28).sum()
    (g2,) = torch.autograd.grad(merged, r2)
    assert merged.item() == pytest.approx(per_path.item(), abs=1e-12), "merged value must equal the path sum"
    assert g2.item() == pytest.approx(g1.item(), abs=1e-12), "and so must its gradient"


def test_netting_advantages_of_opposite_sign_would_be_wrong():
    """Why two sums: with a = +1 and -1 at r = 1.5 the paths give min(1.5, 1.28) + min(-1.5, -1.28) =
    -0.22, while a single net advantage of 0 gives 0."""
    r = torch.tensor([1.5], dtype=torch.float64)
    apart = -ppo_clip_objective(r, torch.tensor([1.0]), torch.tensor([-1.0]), 0.2, 0.28)
    netted = -ppo_clip_objective(r, torch.tensor([0.0]), torch.tensor([0.0]), 0.2, 0.28)
    assert apart.item() == pytest.approx(1.28 - 1.5), "the split form keeps both clipped terms"
    assert netted.item() == 0.0 and apart.item() != netted.item(), "netting loses the asymmetric clip"


def test_truncated_importance_weight_caps_and_carries_no_gradient():
    old = torch.tensor([-1.0, -1.0, -3.0], requires_grad=True)
    engine = torch.tensor([-1.0, -2.0, -1.0])
    w = truncated_is_weight(old, engine, cap=2.0)
    assert w.tolist() == pytest.approx([1.0, 2.0, math.exp(-2.0)]), "min(π_old/π_engine, C)"
    assert not w.requires_grad, "the TIS weight is a constant of the objective"


def test_k3_is_zero_on_equal_policies_and_matches_its_formula():
    lp = torch.log(torch.tensor([0.5, 0.5]))
    ref = torch.log(torch.tensor([0.5, 0.25]))
    k3 = kl_k3(lp, ref)
    assert k3[0].item() == 0.0, "no divergence from itself"
    assert k3[1].item() == pytest.approx(0.5 + math.log(2) - 1), "exp(Δ) - Δ - 1 with Δ = log(0.25/0.5)"


def test_capped_k3_bounds_a_row_far_below_the_reference_and_takes_its_gradient_away():
    # π_θ far below π_ref on rows 2 and 3 (Δ = 12 and 40): uncapped, k3 ≈ e^Δ; row 4 the other way
    lp = torch.tensor([-1.0, -1.0, -13.0, -41.0, -1.0], requires_grad=True)
    ref = torch.tensor([-1.0, -1.5, -1.0, -1.0, -30.0])
    uncapped = kl_k3(lp, ref)
    assert uncapped[2].item() == pytest.approx(math.exp(12) - 13, rel=1e-5)
    capped = kl_k3(lp, ref, cap=10.0)
    assert capped[:2].tolist() == pytest.approx(uncapped[:2].tolist()), "rows under the cap are unchanged"
    assert capped[2:].tolist() == [10.0, 10.0, 10.0], "min(k3, K), even at Δ = 40"
    capped.sum().backward()
    assert lp.grad[2:].tolist() == [0.0, 0.0, 0.0], "a capped row adds K and no gradient"
    assert lp.grad[1].item() == pytest.approx(1 - math.exp(-0.5)), "d k3 / d logπ = 1 - exp(Δ) below the cap"


def test_value_loss_clips_the_change_around_the_old_value():
    v, old, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), torch.tensor([2.0, 0.5])
    assert value_loss(v, old, ret, None).tolist() == pytest.approx([0.5, 0.125]), "½ (V - R)²"
    # row 0: clipped V = 0.2 -> ½ max(1, 3.24); row 1 unchanged
    assert value_loss(v, old, ret, 0.2).tolist() == pytest.approx([1.62, 0.125]), "pessimistic max of the two"


def rows(**kw) -> LossRows:
    n = len(kw["adv_pos"])
    base = {
        "token": torch.arange(n), "engine_logprob": torch.full((n,), -1.0), "weight": torch.full((n,), 1.0 / n),
        "version": torch.zeros(n, dtype=torch.long), "temperature": torch.full((n,), float("nan")),
        "seq": torch.full((n,), -1, dtype=torch.long), "value_token": torch.zeros(0, dtype=torch.long),
        "returns": torch.zeros(0), "old_value": torch.zeros(0), "value_weight": torch.zeros(0),
    }  # fmt: skip
    base.update(kw)
    return LossRows(
        **{k: torch.as_tensor(v) if not isinstance(v, torch.Tensor) else v for k, v in base.items()}
    )


def test_diagnostics_report_clipping_ratio_tis_and_mismatch_by_value():
    logprob = torch.log(
        torch.tensor([1.5, 1.0, 0.5, 1.1]) * 0.25
    )  # ratios 1.5, 1, 0.5, 1.1 against old = log .25
    old = torch.full((4,), math.log(0.25))
    r = rows(
        adv_pos=[1.0, 1.0, 0.0, 0.0],
        adv_neg=[0.0, 0.0, -1.0, -1.0],
        engine_logprob=torch.full((4,), math.log(0.5)),
    )
    cfg = AlgorithmConfig(clip_low=0.2, clip_high=0.28, tis_cap=2.0).loss_config()
    loss, d = rows_loss(logprob, torch.ones(4), None, r, cfg, old_logprob=old, policy_version=3)
    tis = 0.5  # π_old / π_engine = 0.25 / 0.5
    want = -tis * (min(1.5, 1.28) + 1.0 - max(0.5, 0.8) - max(1.1, 1.1))
    assert loss.item() == pytest.approx(want), "Σ ρ · clipped surrogate"
    assert d["clipfrac"] == pytest.approx(0.5), "ratios 1.5 and 0.5 are outside [0.8, 1.28]"
    assert (d["ratio_min"], d["ratio_max"]) == pytest.approx((0.5, 1.5)), "ratio extremes"
    assert d["ratio_mean"] == pytest.approx((1.5 + 1 + 0.5 + 1.1) / 4), "weighted ratio mean"
    assert d["tis_mean"] == pytest.approx(0.5) and d["tis_truncated_frac"] == 0.0, "TIS stats"
    assert d["logprob_mismatch"] == pytest.approx(math.log(2)), "|log π_old - log π_engine|"
    assert d["kl_engine_train"] == pytest.approx(0.5 - 1 + math.log(2)), "k3 with ρ = 0.5"
    assert d["policy_lag"] == pytest.approx(3.0), "policy 3 trained on version-0 samples"
    assert d["entropy"] == pytest.approx(1.0), "weighted entropy"


def test_combine_diagnostics_adds_sums_and_weights_means():
    a = {"weight": 1.0, "loss": 2.0, "clipfrac": 0.5, "ratio_min": 0.9, "ratio_max": 1.1}
    b = {"weight": 3.0, "loss": 1.0, "clipfrac": 0.1, "ratio_min": 0.7, "ratio_max": 1.05}
    c = combine_diagnostics([a, b])
    assert c["loss"] == 3.0 and c["weight"] == 4.0, "losses of micro-batches add up"
    assert c["clipfrac"] == pytest.approx((0.5 + 0.3) / 4), "means are weighted by row weight"
    assert (c["ratio_min"], c["ratio_max"]) == (0.7, 1.1), "extremes stay extremes"


def test_explained_variance_is_left_out_where_every_return_is_equal():
    """A PPO step whose rewards are all 0 with V = 0 (the value head's start) has equal returns:
    explained variance is undefined, and a NaN among the metrics would fail the step's record. The
    step's figure comes from `value_moments` summed over its micro-batches (trainer/update.py), not
    from each micro-batch's loss."""
    r = rows(adv_pos=[0.0, 0.0], adv_neg=[0.0, 0.0], value_token=torch.arange(2), returns=torch.zeros(2),
             old_value=torch.zeros(2), value_weight=torch.full((2,), 0.5))  # fmt: skip
    cfg = AlgorithmConfig(value_coef=0.5).loss_config()
    logprob = torch.full((2,), -1.0)
    _, d = rows_loss(logprob, torch.ones(2), torch.zeros(2), r, cfg, old_logprob=logprob)
    assert "explained_variance" not in d and all(math.isfinite(v) for v in d.values())
    assert explained_variance(value_moments(r.returns, torch.zeros(2), r.value_weight)) is None
    returns, values = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.5])
    ev = explained_variance(value_moments(returns, values, r.value_weight))
    assert ev == pytest.approx(1 - 0.0625 / 0.25), "1 - Var(R - V) / Var(R)"
