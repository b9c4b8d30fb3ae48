"""PPO's critic gets steps of its own: value warm-up (policy frozen) and value-only passes per step.

The batch is fixed: two tasks (prompts), one whose samples all pass and one whose samples all fail,
so the return is a function of the prompt and a value head on the real tiny-qwen3's hidden states
can explain it. Before any fit V = 0: explained variance 0.
"""

from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from clawgym.policies import load_model
from clawgym.rl.losses import explained_variance, value_moments
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore
from clawgym.trainer import checkpoint as ckpt
from clawgym.trainer.batch import build_batch
from clawgym.trainer.distributed import World
from clawgym.trainer.metrics import STEP_KEYS
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, prepare_packs, update

PASSING = [4096, 11, 12, 13, 14, 15, 16]
FAILING = [4096, 31, 32, 33, 34, 35, 36]
OUTPUTS = [[100, 101, 102, 103], [200, 201, 202, 203], [100, 201, 102, 203]]


def _batch(hand_group):
    groups = [
        hand_group("pass", PASSING, OUTPUTS, [1.0] * 3),
        hand_group("fail", FAILING, OUTPUTS, [0.0] * 3),
    ]
    return build_batch(groups, 0, 1)


def _packs(built, cfg, batch):
    return prepare_packs(built.module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), 64, World())


def _lm_state(built) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in built.module.lm.state_dict().items()}


def test_explained_variance_is_weighted_summed_over_micro_batches_and_undefined_for_equal_returns():
    r, v, w = torch.tensor([0.0, 1.0, 1.0, 0.0]), torch.tensor([0.0, 0.5, 1.0, 0.0]), torch.ones(4)
    whole = explained_variance(value_moments(r, v, w))
    split = explained_variance(value_moments(r[:1], v[:1], w[:1]) + value_moments(r[1:], v[1:], w[1:]))
    e = (r - v).numpy()
    assert whole == pytest.approx(1 - e.var() / r.numpy().var()) and split == pytest.approx(whole), (
        "1 - Var(R - V) / Var(R) over every row at once, however the rows are split"
    )
    weighted = explained_variance(value_moments(r, v, torch.tensor([1.0, 2.0, 2.0, 1.0])))
    dup = explained_variance(value_moments(torch.tensor([0.0, 1, 1, 1, 1, 0]), torch.tensor([0, 0.5, 0.5, 1, 1, 0]),
                                           torch.ones(6)))  # fmt: skip
    assert weighted == pytest.approx(dup), "a row of weight 2 counts as two rows"
    assert explained_variance(value_moments(torch.zeros(3), torch.rand(3), torch.ones(3))) is None, (
        "all-equal returns: undefined, left out (a NaN would fail the step's record)"
    )
    assert explained_variance(np.zeros(5)) is None, "no value rows"


def test_a_value_warmup_step_leaves_the_policy_unchanged_and_fits_the_value_head(trainer_cfg, hand_group):
    """value_only: the LM's weights and its optimizer moments stay as they were; the head learns the
    batch's returns (value loss down in-sample, explained variance up on the same batch afterwards).
    Unclipped: value_clip holds V within ±ε of V_old, whatever the passes."""
    algorithm = {"name": "ppo", "lr": 1e-3, "value_lr": 1e-2, "value_epochs": 30, "value_clip": None}
    cfg = trainer_cfg(algorithm=algorithm)
    built = build_policy(cfg)
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    batch = _batch(hand_group)
    lm_before = _lm_state(built)
    head_before = built.module.value_head.proj.weight.detach().clone()

    d = update(built.module, optimizer, _packs(built, cfg, batch), cfg.algorithm, World(), 0, value_only=True)

    lm_after = _lm_state(built)
    assert all(torch.equal(lm_before[k], lm_after[k]) for k in lm_before), "the policy must not move"
    lm_params = {id(p) for p in built.module.lm.parameters()}
    assert not any(id(p) in lm_params and s for p, s in optimizer.state.items()), (
        "the LM's optimizer state must stay empty: its moments start with the first policy step"
    )
    assert not torch.equal(head_before, built.module.value_head.proj.weight), "the value head must move"
    assert d["value_warmup"] == 1.0 and "explained_variance" in d, d
    assert {"explained_variance", "value_fit_loss", "value_warmup"} <= set(STEP_KEYS), "tracked per step"
    assert d["explained_variance"] == pytest.approx(0.0, abs=1e-9), "V = 0 before the fit explains nothing"
    assert d["value_fit_loss"] < 0.25 * d["value_loss"], f"the passes must fit the batch's returns: {d}"
    again = update(
        built.module, optimizer, _packs(built, cfg, batch), cfg.algorithm, World(), 0, value_only=True
    )
    assert again["explained_variance"] > 0.5, f"the fitted head's V_old must explain the returns: {again}"


def test_value_epochs_move_only_the_value_head_after_the_update(trainer_cfg, hand_group):
    """The joint update is the same with or without value_epochs (the LM lands on the same weights);
    the passes after it fit the head further (value loss after < before)."""
    results = {}
    for epochs in (0, 20):
        algorithm = {"name": "ppo", "lr": 1e-3, "value_lr": 1e-2, "value_epochs": epochs, "value_clip": None}
        cfg = trainer_cfg(algorithm=algorithm)
        built = build_policy(cfg)
        optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
        batch = _batch(hand_group)
        d = update(built.module, optimizer, _packs(built, cfg, batch), cfg.algorithm, World(), 0)
        results[epochs] = (built, d)
    (plain, d0), (fitted, d20) = results[0], results[20]
    same = zip(plain.module.lm.parameters(), fitted.module.lm.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in same), "value passes must not touch the policy"
    assert "value_fit_loss" not in d0 and d20["value_fit_loss"] < 0.5 * d20["value_loss"], (d0, d20)
    assert d0["loss"] == pytest.approx(d20["loss"]) and d0["value_loss"] == pytest.approx(
        d20["value_loss"]
    ), "the step's own diagnostics are those of the joint update, before the passes"


def test_value_warmup_steps_consume_their_groups_and_save_the_next_version(
    sqlite_url, trainer_cfg, make_trainer, runner, engine
):
    """A run of 2 steps, the first a value warm-up: versions 1 and 2 registered with their groups,
    v1's policy weights equal to the initial ones, v2's moved, the engine serving 2."""
    store = SqlStore(sqlite_url, MemoryBus())
    try:
        cfg = trainer_cfg(steps=2, algorithm={"name": "ppo", "lr": 1e-3, "value_warmup_steps": 1})
        trainer = make_trainer(cfg, store)
        trainer.run()
        checkpoints = store.list_checkpoints(trainer.run_id)
        assert [c.version for c in checkpoints] == [1, 2], "a warm-up step is a step: it saves a version"
        assert all(len(c.group_ids) == 2 for c in checkpoints), "each step consumes its groups"
        assert checkpoints[0].metrics.get("value_warmup") == 1.0, checkpoints[0].metrics
        assert "value_warmup" not in checkpoints[1].metrics, "only the first value_warmup_steps"
        assert runner.run(engine.status()).policy_version == 2
    finally:
        store.close()
    initial = load_model("tiny-qwen3").state_dict()

    def weights(version: int) -> dict[str, torch.Tensor]:
        return load_file(Path(ckpt.version_uri(trainer.cfg, version)) / "model.safetensors")

    v1, v2 = weights(1), weights(2)
    assert all(torch.equal(v1[k], initial[k]) for k in v1 if k in initial), "a warm-up step leaves the policy"
    assert any(not torch.equal(v2[k], initial[k]) for k in v2 if k in initial), "the next step trains it"
