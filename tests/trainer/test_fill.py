"""A step that trains while it waits (`trainer.max_groups_per_step`): trees added in rounds after the
first backward give exactly the update of one batch of all the trees (update.py, departure 6).

The gradients are read where the optimizer would step (AdamW's first step is nearly blind to the
gradient's scale, so comparing weights would not see a wrong normaliser).
"""

import numpy as np
import pytest
import torch

from clawgym.trainer.batch import build_batch
from clawgym.trainer.distributed import World
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, prepare_packs, update

# Outputs of several lengths, so that the token and the rollout normalisers differ.
FIRST = [
    ("a", [4096, 11, 12, 13], [[100, 101, 102, 103], [200, 201]], [1.0, 0.0]),
    ("b", [4096, 21, 22], [[110, 111], [210, 211, 212, 213, 214]], [0.0, 1.0]),
]
LATER = [
    ("c", [4096, 31, 32, 33, 34], [[120, 121, 122, 123, 124, 125], [220]], [1.0, 0.0]),
    ("d", [4096, 41], [[130, 131, 132], [230, 231, 232]], [1.0, 0.0]),
]
KEYS = (
    "loss",
    "policy_loss",
    "kl_ref",
    "value_loss",
    "entropy",
    "off_policy_ratio_mean",
    "off_policy_masked_frac",
)


class Rounds:
    """update.Fill over fixed rounds of trees, packed with the first round's normaliser."""

    def __init__(self, module, algo, first, rounds, renormalise: bool = True) -> None:
        self.module, self.algo, self.rounds = module, algo, list(rounds)
        self.first = Normaliser.of(first)
        self.whole = Normaliser.of(first + [t for r in rounds for t in r])
        self.renormalise = renormalise

    def next_packs(self):
        if not self.rounds:
            return None
        return prepare_packs(self.module, self.rounds.pop(0), self.algo, self.first, 64, World())

    def rescale(self) -> float:
        return self.first.ratio(self.whole, self.algo.aggregation) if self.renormalise else 1.0


def step_gradients(cfg, hand_group, fill: str) -> tuple[list[list[torch.Tensor]], dict[str, float]]:
    """Every gradient the optimizer is given in one update (the policy step, then PPO's value-head
    passes), and the diagnostics: all four groups in one batch (`fill` "none"), or two of them first
    and the others in two rounds ("rounds", or "unscaled": without the rescale)."""
    torch.manual_seed(0)
    built = build_policy(cfg)
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    seen: list[list[torch.Tensor]] = []
    # keep the weights (both sides start every pass from the same ones) and read the gradients
    optimizer.step = lambda: seen.append(
        [p.grad.clone() for p in built.module.parameters() if p.grad is not None]
    )
    trees = [
        build_batch([hand_group(g, prompt, outs, rewards)], 0, cfg.max_policy_lag).trees[0]
        for g, prompt, outs, rewards in FIRST + LATER
    ]
    first, later = trees[: len(FIRST)], [trees[len(FIRST) :][:1], trees[len(FIRST) :][1:]]
    algo, world = cfg.algorithm, World()
    if fill == "none":
        packs = prepare_packs(built.module, trees, algo, Normaliser.of(trees), 64, world)
        d = update(built.module, optimizer, packs, algo, world, 0, built.reference)
    else:
        packs = prepare_packs(built.module, first, algo, Normaliser.of(first), 64, world)
        rounds = Rounds(built.module, algo, first, later, renormalise=fill == "rounds")
        d = update(built.module, optimizer, packs, algo, world, 0, built.reference, fill=rounds)
    return seen, d


@pytest.mark.parametrize(
    "algorithm",
    [
        {"tis_cap": None},
        {"aggregation": "sequence", "kl_coef": 0.1, "entropy_coef": 0.01},
        {"off_policy": "call_geo_mask", "geo_mask_low": 1e-9, "aggregation": "sum"},
        {"name": "ppo", "whiten_advantages": False, "value_epochs": 2},
    ],
    ids=["grpo-token", "grpo-sequence-kl-entropy", "grpo-call-mask-sum", "ppo-value-passes"],
)
def test_a_step_filled_in_rounds_is_the_update_of_all_its_trees(trainer_cfg, hand_group, algorithm):
    # no clipping: a clipped gradient has the norm of the clip whatever its scale
    cfg = trainer_cfg(algorithm={"lr": 1e-3, "max_grad_norm": 1e9} | algorithm, max_groups_per_step=4)
    whole, d_whole = step_gradients(cfg, hand_group, "none")
    filled, d_filled = step_gradients(cfg, hand_group, "rounds")
    assert len(filled) == len(whole) >= 1, f"the same optimizer steps: {len(filled)} vs {len(whole)}"
    for i, (a, b) in enumerate(zip(filled, whole, strict=True)):
        assert len(a) == len(b) and all(
            torch.allclose(x, y, rtol=1e-5, atol=1e-5 * float(y.abs().max())) for x, y in zip(a, b, strict=True)
        ), f"optimizer step {i}: the filled step's gradient must be the whole batch's"
    for key in KEYS:
        if key in d_whole:
            assert d_filled[key] == pytest.approx(d_whole[key], rel=1e-5, abs=1e-8), (
                f"{key}: {d_filled[key]} filled vs {d_whole[key]} in one batch"
            )
    assert d_filled["grad_norm"] == pytest.approx(d_whole["grad_norm"], rel=1e-5)

    if cfg.algorithm.aggregation != "sum":  # the check can fail: without the rescale it differs
        unscaled, _ = step_gradients(cfg, hand_group, "unscaled")
        norm = float(np.sqrt(sum(float((g**2).sum()) for g in whole[0])))
        gap = float(
            np.sqrt(sum(float(((x - y) ** 2).sum()) for x, y in zip(unscaled[0], whole[0], strict=True)))
        )
        assert gap > 0.1 * norm, "the first round's normaliser alone must give another gradient"


def test_a_whitened_ppo_step_refuses_to_fill(trainer_cfg):
    with pytest.raises(ValueError, match="whiten_advantages"):
        trainer_cfg(algorithm={"name": "ppo"}, max_groups_per_step=4)
    with pytest.raises(ValueError, match="below groups_per_step"):
        trainer_cfg(max_groups_per_step=1)
