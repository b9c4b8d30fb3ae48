"""One optimizer step on known advantages moves the policy the right way (GRPO, PPO, LoRA).

The reference for "the policy's logprob of a rollout's output" is a plain, unpacked Hugging Face
forward over prompt + output, independent of the tree packing the update uses.
"""

import dataclasses
import itertools

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from clawgym.policies import load_model
from clawgym.rl import gae_terms, grpo_terms, merge_terms, pack
from clawgym.trainer import checkpoint as ckpt
from clawgym.trainer.batch import build_batch
from clawgym.trainer.distributed import World
from clawgym.trainer.metrics import STEP_KEYS
from clawgym.trainer.optim import lr_factor, make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, has_gradient, prepare_packs, update, whitened

PROMPT = [4096, 11, 12, 13, 14, 15, 16]  # meaningful only as "the task": shared by both samples
GOOD = [100, 101, 102, 103]  # rewarded sample (advantage > 0)
BAD = [200, 201, 202, 203]  # unrewarded sample (advantage < 0)


def output_logprob(lm, prompt: list[int], output: list[int]) -> float:
    """Σ log π(output | prompt) by a plain forward over the linear sequence."""
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = lm(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return float(logp[torch.arange(len(output)), torch.tensor(output)].sum())


def one_step(cfg, groups, version: int = 0):
    built = build_policy(cfg)
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    batch = build_batch(groups, version, cfg.max_policy_lag)
    world = World()
    packs = prepare_packs(built.module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), 64, world)
    before = {
        name: output_logprob(built.module.lm, PROMPT, out) for name, out in (("good", GOOD), ("bad", BAD))
    }
    diagnostics = update(built.module, optimizer, packs, cfg.algorithm, world, version)
    after = {
        name: output_logprob(built.module.lm, PROMPT, out) for name, out in (("good", GOOD), ("bad", BAD))
    }
    return built, optimizer, before, after, diagnostics


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_one_update_raises_positive_advantage_tokens_and_lowers_negative_ones(
    trainer_cfg, hand_group, algorithm
):
    """GRPO: rewards 1/0 in one group give advantages ±1; PPO: rewards ±5 dominate the value baseline."""
    rewards = [1.0, 0.0] if algorithm == "grpo" else [5.0, -5.0]
    cfg = trainer_cfg(algorithm={"name": algorithm, "lr": 1e-3, "tis_cap": None})
    group = hand_group("g", PROMPT, [GOOD, BAD], rewards)
    built, _, before, after, d = one_step(cfg, [group])
    assert after["good"] > before["good"] + 0.1, (
        f"the rewarded output must become likelier: {before} → {after}"
    )
    assert after["bad"] < before["bad"] - 0.1, (
        f"the unrewarded output must become less likely: {before} → {after}"
    )
    assert d["grad_norm"] > 0 and np.isfinite(d["loss"]), (
        f"the step must have a finite loss and gradient: {d}"
    )
    if algorithm == "ppo":
        assert "value_loss" in d and d["value_loss"] > 0, f"PPO must train the value head: {d}"
        assert built.module.value_head is not None, "PPO needs a value head on the LM's hidden states"


def test_a_group_whose_rewards_are_equal_moves_nothing_but_entropy(trainer_cfg, hand_group):
    """GRPO: equal rewards → zero advantages → zero policy gradient (no entropy bonus configured)."""
    cfg = trainer_cfg(algorithm={"lr": 1e-3})
    _, _, before, after, d = one_step(cfg, [hand_group("g", PROMPT, [GOOD, BAD], [1.0, 1.0])])
    assert d["grad_norm"] == 0.0, f"zero advantages must give a zero gradient, got {d['grad_norm']}"
    assert after == before, "the weights must not change without a gradient"


def test_groups_without_reward_variance_are_not_packed_and_the_gradient_is_unchanged(trainer_cfg, hand_group):
    """GRPO, no KL or entropy term: a group whose rewards are all equal gets no pack (its forward and
    backward would add nothing); the step's gradient is the one its zero-advantage rows give."""
    cfg = trainer_cfg(algorithm={"lr": 1e-3, "tis_cap": None})
    signal = hand_group("signal", PROMPT, [GOOD, BAD], [1.0, 0.0])
    flat = hand_group("flat", [4096, 21, 22, 23], [GOOD, BAD], [1.0, 1.0])
    batch = build_batch([signal, flat], 0, cfg.max_policy_lag)
    norm = Normaliser.of(batch.trees)
    built = build_policy(cfg)
    world = World()
    skipped = prepare_packs(built.module, batch.trees, cfg.algorithm, norm, 64, world)
    alone = prepare_packs(built.module, batch.trees[:1], cfg.algorithm, norm, 64, world)
    assert sum(p.rows.token.numel() for p in skipped) == sum(p.rows.token.numel() for p in alone), (
        "the group without reward variance must not be packed"
    )
    # every group packed, as the update did before the skip: the same pieces prepare_packs uses
    flat_terms = grpo_terms(batch.trees[1].flat, aggregation="token")
    assert not has_gradient(flat_terms, cfg.algorithm)
    flat_terms = dataclasses.replace(
        flat_terms, weight=flat_terms.weight * norm.scale(batch.trees[1], "token")
    )
    every = skipped + pack(batch.trees[1].flat, 64, merge_terms(flat_terms))

    def grads(packs) -> list[torch.Tensor]:
        model = build_policy(cfg).module
        optimizer, _ = make_optimizer(model, cfg.algorithm, cfg.steps)
        seen: list[torch.Tensor] = []
        # keep the weights and read the gradients the step is given (the update frees them after it)
        optimizer.step = lambda: seen.extend(p.grad.clone() for p in model.parameters() if p.grad is not None)
        update(model, optimizer, packs, cfg.algorithm, world, 0)
        assert all(p.grad is None for p in model.parameters()), "the update frees its gradients"
        return seen

    with_skip, without = grads(skipped), grads(every)
    assert len(with_skip) == len(without) and all(
        torch.allclose(a, b, atol=1e-7, rtol=1e-5) for a, b in zip(with_skip, without, strict=True)
    ), "skipping a zero-advantage group must not change the gradient"
    assert any(float(g.abs().max()) > 0 for g in with_skip), "the group with variance must give a gradient"
    assert has_gradient(flat_terms, cfg.algorithm.model_copy(update={"entropy_coef": 0.01})), (
        "an entropy term gives every group a gradient: none is skipped then"
    )


def test_mismatch_is_measured_against_the_engine_logprobs(trainer_cfg, hand_group):
    """hand_group's engine logprobs are all -8: the step's mismatch is mean |logπ_train + 8|."""
    cfg = trainer_cfg()
    group = hand_group("g", PROMPT, [GOOD, BAD], [1.0, 0.0])
    lm = load_model("tiny-qwen3")
    expected = np.mean([
        abs(output_logprob(lm, PROMPT + out[:k], [out[k]]) + 8.0) for out in (GOOD, BAD) for k in range(len(out))
    ])  # fmt: skip
    _, _, _, _, d = one_step(cfg, [group])
    assert d["logprob_mismatch"] == pytest.approx(expected, rel=1e-4), (
        f"mismatch must compare the trainer's logprobs with the engine's: {d['logprob_mismatch']} vs {expected}"
    )


def test_lora_trains_only_adapters_and_its_checkpoint_serves_the_merged_policy(
    trainer_cfg, hand_group, tiny_tok, tmp_path
):
    """With LoRA the base weights stay, the adapters move, and the saved HF folder equals base ⊕ adapters."""
    cfg = trainer_cfg(lora={"enabled": True, "r": 4, "alpha": 8}, algorithm={"lr": 1e-2, "tis_cap": None})
    group = hand_group("g", PROMPT, [GOOD, BAD], [1.0, 0.0])
    built, optimizer, before, after, _ = one_step(cfg, [group])
    assert after["good"] > before["good"], "the adapters must move the policy toward the rewarded output"
    base = load_model("tiny-qwen3").state_dict()
    lm_state = built.module.lm.state_dict()
    q = "model.layers.0.self_attn.q_proj"
    assert torch.equal(lm_state[f"{q}.base_layer.weight"], base[f"{q}.weight"]), (
        "LoRA must not touch base weights"
    )
    _, scheduler = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    ckpt.save_checkpoint(built, optimizer, scheduler, tiny_tok, str(tmp_path / "v1"), {"version": 1}, World())
    merged = load_model(str(tmp_path / "v1"))
    assert output_logprob(merged, PROMPT, GOOD) == pytest.approx(after["good"], abs=1e-4), (
        "the checkpoint (adapters merged) must give the trained policy's logprobs"
    )
    saved = load_file(str(tmp_path / "v1" / "model.safetensors"))
    assert not any("lora_" in k for k in saved), "the served checkpoint must be a plain HF model"


def test_lora_on_all_linear_layers_adapts_every_decoder_projection_but_not_the_head(trainer_cfg):
    """target_modules [all-linear] (the quickstart's): adapters on attention and MLP in every layer, whatever
    the model calls them, none on the LM head; only they train."""
    lora = {"enabled": True, "r": 2, "alpha": 4, "target_modules": ["all-linear"]}
    lm = build_policy(trainer_cfg(lora=lora)).module.lm
    layers = lm.config.num_hidden_layers
    adapted = [name for name, module in lm.named_modules() if hasattr(module, "lora_A")]
    kinds = {name.rsplit(".", 1)[-1] for name in adapted}
    assert kinds == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, kinds
    assert len(adapted) == 7 * layers, f"every layer's 7 projections: {len(adapted)} for {layers} layers"
    trained = {name for name, p in lm.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in name for name in trained), "only the adapters train"


def test_the_lr_schedule_warms_up_then_decays_to_the_floor(trainer_cfg):
    """Warmup reaches lr at its last step; cosine and linear end at min_lr_ratio; constant stays."""
    algo = trainer_cfg(algorithm={"warmup_steps": 4, "lr_schedule": "cosine", "min_lr_ratio": 0.1}).algorithm
    factors = [lr_factor(s, algo, 20) for s in range(21)]
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0], f"linear warmup over 4 steps, got {factors[:4]}"
    assert factors[20] == pytest.approx(0.1) and all(a >= b for a, b in itertools.pairwise(factors[3:])), (
        f"cosine must decay monotonically to the floor: {factors}"
    )
    linear = algo.model_copy(update={"lr_schedule": "linear"})
    assert lr_factor(12, linear, 20) == pytest.approx(1 - 0.9 * 0.5), "linear is halfway at mid-decay"
    assert lr_factor(15, algo.model_copy(update={"lr_schedule": "constant"}), 20) == 1.0, (
        "constant stays at lr"
    )


def test_kl_to_the_initial_policy_is_measured_without_entering_the_loss(
    trainer_cfg, hand_group, tiny_tok, tmp_path
):
    """kl_diagnostic with kl_coef 0: kl_ref is the token mean of k3(logπ_θ, logπ_initial) on the batch's
    tokens (0 at the first step), the update is the same as without it, and a trainer resuming from a
    checkpoint still measures against the initial policy, not the checkpoint."""
    group = hand_group("g", PROMPT, [GOOD, BAD], [1.0, 0.0])
    plain = trainer_cfg(algorithm={"lr": 1e-3, "tis_cap": None})
    measured = trainer_cfg(algorithm={"lr": 1e-3, "tis_cap": None, "kl_diagnostic": True})
    assert build_policy(plain).reference is None, "no KL term and no diagnostic: no frozen copy kept"
    _, _, _, after_plain, _ = one_step(plain, [group])

    built = build_policy(measured)
    assert built.reference is not None, "kl_diagnostic keeps a frozen copy of the initial policy"
    optimizer, scheduler = make_optimizer(built.module, measured.algorithm, measured.steps)
    world = World()
    batch = build_batch([group], 0, measured.max_policy_lag)
    packs = prepare_packs(
        built.module, batch.trees, measured.algorithm, Normaliser.of(batch.trees), 64, world
    )
    first = update(built.module, optimizer, packs, measured.algorithm, world, 0, built.reference)
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-6), (
        f"the initial policy is at KL 0 from itself: {first}"
    )
    after = output_logprob(built.module.lm, PROMPT, GOOD)
    assert after == pytest.approx(after_plain["good"], abs=1e-6), (
        "measuring the KL must not change the update (kl_coef 0: it is no part of the loss)"
    )

    initial = load_model("tiny-qwen3")

    def k3(out: list[int], k: int) -> float:
        now = output_logprob(built.module.lm, PROMPT + out[:k], [out[k]])
        ref = output_logprob(initial, PROMPT + out[:k], [out[k]])
        return float(np.exp(ref - now) - (ref - now) - 1.0)

    expected = np.mean([k3(out, k) for out in (GOOD, BAD) for k in range(len(out))])
    second = update(built.module, optimizer, packs, measured.algorithm, world, 1, built.reference)
    assert expected > 1e-4 and second["kl_ref"] == pytest.approx(expected, rel=1e-3), (
        f"after one step kl_ref is the mean k3 over the batch's generated tokens: {second['kl_ref']} vs {expected}"
    )

    ckpt.save_checkpoint(built, optimizer, scheduler, tiny_tok, str(tmp_path / "v2"), {"version": 2}, World())
    resumed = build_policy(measured, weights=str(tmp_path / "v2"))
    ref_state, initial_state = resumed.reference.lm.state_dict(), initial.state_dict()
    assert all(torch.equal(ref_state[k], initial_state[k]) for k in initial_state), (
        "a resumed trainer's reference is the initial policy, not the checkpoint it resumes from"
    )


def test_a_step_without_any_signal_moves_the_weights_as_the_unskipped_update_would(trainer_cfg, hand_group):
    """After a step with signal, AdamW's momentum keeps moving the weights on a zero gradient. A step
    whose every group was skipped (no pack at all) still steps the optimizer, so weights, Adam's moments
    and its step count match the update that forwarded the zero-advantage group, and its loss is 0."""
    cfg = trainer_cfg(algorithm={"lr": 1e-3, "tis_cap": None})  # β1 = 0.9
    signal = build_batch([hand_group("signal", PROMPT, [GOOD, BAD], [1.0, 0.0])], 0, cfg.max_policy_lag)
    flat = build_batch([hand_group("flat", PROMPT, [GOOD, BAD], [1.0, 1.0])], 1, cfg.max_policy_lag)
    world = World()

    def two_steps(skip: bool):
        model = build_policy(cfg).module
        optimizer, _ = make_optimizer(model, cfg.algorithm, cfg.steps)
        first = prepare_packs(model, signal.trees, cfg.algorithm, Normaliser.of(signal.trees), 64, world)
        update(model, optimizer, first, cfg.algorithm, world, 0)
        if skip:
            second = prepare_packs(model, flat.trees, cfg.algorithm, Normaliser.of(flat.trees), 64, world)
            assert second == [], "a group without reward variance is not packed"
        else:
            terms = grpo_terms(flat.trees[0].flat, aggregation="token")
            second = pack(flat.trees[0].flat, 64, merge_terms(terms))
        d = update(model, optimizer, second, cfg.algorithm, world, 1)
        return model, optimizer, d

    skipped, opt_skipped, d = two_steps(skip=True)
    forwarded, opt_forwarded, _ = two_steps(skip=False)
    assert d["loss"] == 0.0 and d["grad_norm"] == 0.0, f"nothing trained: loss and gradient are 0: {d}"
    steps = {int(s["step"]) for s in opt_skipped.state.values()}
    assert steps == {int(s["step"]) for s in opt_forwarded.state.values()} == {2}, (
        f"AdamW stepped twice: {steps}"
    )
    moved = [
        (a, b) for a, b in zip(skipped.parameters(), forwarded.parameters(), strict=True) if a.requires_grad
    ]
    assert all(torch.equal(a, b) for a, b in moved), "the skip must not change where the weights go"


def test_ppo_advantages_are_whitened_over_the_whole_batch_and_the_value_targets_are_not(
    trainer_cfg, hand_group
):
    """Two groups' GAE advantages (V = 0: each token's advantage is its rollout's reward) become one
    batch of weighted mean 0 and std 1 by one affine map; the value targets stay the rewards."""
    cfg = trainer_cfg(algorithm={"name": "ppo"})
    groups = [
        hand_group("a", PROMPT, [GOOD, BAD], [1.0, 0.0]),
        hand_group("b", [4096, 21, 22, 23], [GOOD, BAD, GOOD[:2]], [0.0, 0.0, 3.0]),
    ]
    batch = build_batch(groups, 0, cfg.max_policy_lag)
    norm = Normaliser.of(batch.trees)
    placed = [
        (t, dataclasses.replace(terms, weight=terms.weight * norm.scale(t, "token")))
        for t in batch.trees
        for terms in [gae_terms(t.flat, np.zeros(t.flat.n_positions), gamma=1.0, lam=1.0)]
    ]
    out = whitened(placed, World())
    adv = np.concatenate([t.adv for _, t in out])
    raw = np.concatenate([t.adv for _, t in placed])
    w = np.concatenate([t.weight for _, t in out])
    mean = (w * adv).sum() / w.sum()
    std = np.sqrt((w * (adv - mean) ** 2).sum() / w.sum())
    assert abs(mean) < 1e-9 and abs(std - 1.0) < 1e-5, f"weighted mean {mean}, std {std}"
    assert sorted(set(raw.round(9))) == [0.0, 1.0, 3.0], "V = 0, λ = 1: advantages are the rewards"
    scale, shift = np.polyfit(raw, adv, 1)
    assert scale > 0 and np.allclose(raw * scale + shift, adv), "one increasing affine map for every tree"
    for (_, before), (_, after) in zip(placed, out, strict=True):
        assert np.array_equal(before.returns, after.returns), "value targets are not whitened"


def test_call_level_masking_reports_its_calls_and_trains_only_calls_inside_the_band(trainer_cfg, hand_group):
    """call_geo_mask in the trainer's update: π_old comes from a pass over every pack before the first
    backward, each call's geometric-mean ratio against its engine logprobs (all -8 here, far below
    the model's) is reported as off_policy_*, and a call outside the band trains nothing."""
    group = hand_group("g", PROMPT, [GOOD, BAD], [1.0, 0.0])
    algo = {"lr": 1e-3, "off_policy": "call_geo_mask", "tis_cap": None}
    _, _, before, after, d = one_step(trainer_cfg(algorithm=algo), [group])
    want = {name: np.exp(before[name] / len(out) + 8.0) for name, out in (("good", GOOD), ("bad", BAD))}
    assert d["off_policy_ratio_mean"] == pytest.approx(np.mean(list(want.values())), rel=1e-3), (
        f"the mean over calls of exp(mean(logπ_old - logπ_engine)): {d} vs {want}"
    )
    assert d["off_policy_ratio_max"] == pytest.approx(max(want.values()), rel=1e-3), "the largest call ratio"
    assert max(want.values()) < 0.99, "test setup: both calls' ratios lie below the default band"
    assert d["off_policy_masked_frac"] == 1.0 and d["off_policy_masked_token_frac"] == 1.0, (
        f"both calls are out of band: {d}"
    )
    assert after == pytest.approx(before, abs=1e-6), (
        f"masked calls must not move the policy: {before} → {after}"
    )
    assert {k for k in d if k.startswith("off_policy_")} <= set(STEP_KEYS), "tracked as step keys"

    wide = algo | {"geo_mask_low": 1e-6}
    _, _, before, after, d = one_step(trainer_cfg(algorithm=wide), [group])
    assert d["off_policy_masked_frac"] == 0.0, f"a band reaching down to 1e-6 keeps both calls: {d}"
    assert after["good"] > before["good"] + 0.01 and after["bad"] < before["bad"] - 0.01, (
        f"calls inside the band train, weighted by their ratio: {before} → {after}"
    )
