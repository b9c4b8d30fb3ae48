"""Task sampling by expected signal: the Beta-posterior maths, the draw it drives, its decay and its
state, and the families read from the bundled suite."""

import dataclasses
from collections import Counter

import numpy as np
import pytest

from clawgym.records import Group, RolloutWithCalls
from clawgym.trainer.config import SamplingConfig, TrainerConfig
from clawgym.trainer.curriculum import TaskSampler, expected_signal
from clawgym.trainer.source import make_sampler, plan_batch, train_task_ids
from tests.trainer.conftest import _hand_group

FAMILIES = {"a1": "always", "a2": "always", "m1": "mixed", "m2": "mixed", "n1": "new"}


def group_of(task_id: str, passed: list[bool]) -> Group:
    g = _hand_group(f"g-{task_id}", [1, 2], [[3]] * len(passed), [float(p) for p in passed])
    rollouts = [
        RolloutWithCalls(dataclasses.replace(r.rollout, task_id=task_id), r.calls) for r in g.rollouts
    ]
    return dataclasses.replace(g, rollouts=rollouts)


def sampler(mode: str = "signal", **cfg) -> TaskSampler:
    return TaskSampler(list(FAMILIES), FAMILIES, group_size=8, cfg=SamplingConfig(mode=mode, **cfg))


def test_expected_signal_is_the_chance_that_a_groups_rewards_differ():
    # Beta(1, 1): E[p^G] = 1 / (G + 1)
    assert expected_signal(0, 0, 8) == pytest.approx(1 - 2 / 9)
    rng = np.random.default_rng(0)
    for passes, fails in ((0, 40), (3, 5), (30, 2)):
        p = rng.beta(1 + passes, 1 + fails, 400_000)
        monte_carlo = float(np.mean(1 - p**8 - (1 - p) ** 8))
        assert expected_signal(passes, fails, 8) == pytest.approx(monte_carlo, abs=3e-3), (passes, fails)
    assert expected_signal(0, 400, 8) < 0.03 and expected_signal(400, 0, 8) < 0.03, (
        "a settled family gives none"
    )
    assert expected_signal(0, 0, 1) == 0.0, "one rollout never differs from itself"


def test_signal_draws_families_with_mixed_outcomes_and_still_tries_the_rest():
    s = sampler(min_weight=0.05)
    for _ in range(5):  # evidence decays a step at a time; five steps of it
        s.observe([group_of("a1", [False] * 8), group_of("m1", [True, False] * 4)])
    w = s.weights()
    assert w["mixed"] > 3 * w["always"], f"mixed outcomes are worth more than constant ones: {w}"
    assert w["new"] > w["always"], f"an unexplored family's wide posterior is worth trying: {w}"
    drawn = Counter(FAMILIES[t] for t in s.draw(6000, np.random.default_rng(1)))
    for family, share in w.items():
        assert drawn[family] / 6000 == pytest.approx(share, abs=0.02), (family, drawn)
    assert {t for t in s.draw(600, np.random.default_rng(2)) if FAMILIES[t] == "mixed"} == {"m1", "m2"}, (
        "a family's tasks are drawn uniformly"
    )
    floor = sampler(min_weight=0.3)
    floor.observe([group_of("a1", [False] * 400)])
    assert floor.weight("always") == 0.3, "min_weight keeps a settled family in the draw"


def test_uniform_ignores_the_evidence_and_draws_as_before():
    s = sampler("uniform")
    s.observe([group_of("a1", [False] * 80)])
    rng, old = np.random.default_rng(3), np.random.default_rng(3)
    assert s.draw(50, rng) == [list(FAMILIES)[i] for i in old.choice(len(FAMILIES), size=50).tolist()]


def test_evidence_halves_over_the_half_life_and_survives_a_state_round_trip():
    s = sampler(half_life_steps=4)
    s.observe([group_of("m1", [True] * 3 + [False] * 5)])
    for _ in range(4):
        s.observe([])
    assert s.evidence["mixed"] == pytest.approx([1.5, 2.5]), s.evidence
    again = sampler(half_life_steps=4)
    again.load_state(s.state())
    assert again.weights() == s.weights()
    assert s.family("unknown-task") == "unknown-task", "a task without a family is its own"


def test_infrastructure_failures_are_not_evidence():
    s = sampler()
    g = group_of("a1", [False] * 4)
    failed = [RolloutWithCalls(dataclasses.replace(r.rollout, passed=None), r.calls) for r in g.rollouts]
    s.observe([dataclasses.replace(g, rollouts=failed)])
    assert s.evidence.get("always", [0.0, 0.0]) == [0.0, 0.0]


def test_the_bundled_suite_gives_signal_sampling_its_families():
    cfg = TrainerConfig(model="tiny-qwen3", group_size=8, groups_per_step=4, sampling={"mode": "signal"})
    ids = train_task_ids("mini")
    s = make_sampler(cfg, ids)
    families = {s.family(t) for t in ids}
    assert len(families) >= 24 and all(not f.startswith("mini-") for f in families), sorted(families)[:5]
    assert s.weights() == pytest.approx({f: 1 / len(families) for f in families}), (
        "no evidence: families alike"
    )
    batch = plan_batch(cfg, s, "run", 0, np.random.default_rng(0))
    assert len(batch.rollouts) == 4 and all(r.samples == 8 and r.task_id in ids for r in batch.rollouts)
