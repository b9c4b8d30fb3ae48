"""`trainer.stale_calls: mask`: a group whose oldest call is past `max_policy_lag` is trained without
its stale tokens (no loss on them; they stay in the tree as context and in the normaliser) instead
of being waited for or dropped; dropped only when no token is left within the bound.

The reference gradient is a plain Hugging Face forward over each rollout's linear sequence, the
GRPO loss written out by hand over the fresh tokens only.
"""

import numpy as np
import pytest
import torch

from clawgym.records import Call, Group, Rollout, RolloutWithCalls
from clawgym.trainer.batch import build_batch
from clawgym.trainer.distributed import World
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, prepare_packs, update

PROMPT = [4096, 11, 12, 13]
# per rollout: (first output, observation, second output), reward
ROLLOUTS = [
    (([100, 101, 102], [7, 8], [110, 111]), 1.0),
    (([200, 201], [9], [210, 211, 212]), 0.0),
]


def _call(rid: str, seq: int, prompt: list[int], out: list[int], version: int) -> Call:
    return Call(
        rollout_id=rid, seq=seq, protocol="openai_chat", request={}, response={},
        prompt_ids=np.asarray(prompt, np.int32), output_ids=np.asarray(out, np.int32),
        output_logprobs=np.full(len(out), -8.0, np.float32), output_versions=np.full(len(out), version, np.int32),
        policy_version=version, finish_reason="stop",
    )  # fmt: skip


def two_call_group(first_version: int, second_version: int) -> Group:
    """Two rollouts of two calls each: the first calls served by `first_version`, the second ones (the
    first call's prompt, output and an observation, then a new output) by `second_version`."""
    rollouts = []
    for i, ((out1, obs, out2), reward) in enumerate(ROLLOUTS):
        rid = f"g-r{i}"
        calls = [
            _call(rid, 0, PROMPT, out1, first_version),
            _call(rid, 1, PROMPT + out1 + obs, out2, second_version),
        ]
        rollout = Rollout(
            id=rid, run_id="run", group_id="g", task_id="t", harness="reference", status="finished",
            reward=reward, passed=reward > 0, error="", policy_version_start=first_version, sandbox="",
            timings={}, created_at=0.0,
        )  # fmt: skip
        rollouts.append(RolloutWithCalls(rollout, calls))
    return Group(id="g", run_id="run", rollouts=rollouts)


def test_a_group_past_the_bound_is_kept_from_the_bound_on_only_when_masking():
    group = two_call_group(first_version=0, second_version=3)
    dropped = build_batch([group], version=4, max_policy_lag=2)
    assert dropped.dropped == ["g"] and not dropped.trees, (
        "waiting mode: a token 4 versions old drops the group"
    )

    masked = build_batch([group], version=4, max_policy_lag=2, mask_stale=True)
    assert [t.group_id for t in masked.trees] == ["g"] and not masked.dropped
    tree = masked.trees[0]
    assert tree.trained_from == 2 and tree.oldest_version == 3, (
        "trained from the bound; its lag is the fresh tokens'"
    )
    assert masked.stale_tokens_masked == 5 and masked.lags == [1], "the first calls' 3 + 2 tokens are masked"

    all_stale = build_batch([two_call_group(0, 1)], version=4, max_policy_lag=2, mask_stale=True)
    assert all_stale.dropped == ["g"] and all_stale.stale_tokens_masked == 0, (
        "nothing within the bound: dropped"
    )


def reference_gradient(lm, n_generated: int, masked: bool = True) -> list[torch.Tensor]:
    """∇ of -(1/N) Σ_rollouts A_r Σ_{second-call tokens} log π, N counting every generated token: the
    GRPO loss (π_old = π_θ, token aggregation) with the first calls' tokens masked (`masked`), or with
    both calls' tokens."""
    rewards = np.array([r for _, r in ROLLOUTS])
    adv = (rewards - rewards.mean()) / rewards.std()
    lm.zero_grad()
    loss = torch.zeros(())
    for ((out1, obs, out2), _), a in zip(ROLLOUTS, adv, strict=True):
        ids = PROMPT + out1 + obs + out2
        logits = lm(input_ids=torch.tensor([ids])).logits[0].float()
        logp = torch.log_softmax(logits[:-1], dim=-1)
        targets = torch.tensor(ids[1:])
        trained = torch.zeros(len(ids) - 1, dtype=torch.bool)
        trained[len(ids) - len(out2) - 1 :] = True
        if not masked:
            trained[len(PROMPT) - 1 : len(PROMPT) + len(out1) - 1] = True
        token_logp = logp[torch.arange(len(targets)), targets]
        loss = loss - float(a) * token_logp[trained].sum() / n_generated
    loss.backward()
    return [p.grad.clone() for p in lm.parameters() if p.grad is not None]


def test_masked_tokens_get_no_loss_and_the_rest_trains_as_the_plain_reference(trainer_cfg):
    cfg = trainer_cfg(algorithm={"lr": 1e-3, "tis_cap": None, "max_grad_norm": 1e9}, stale_calls="mask")
    batch = build_batch([two_call_group(0, 3)], version=4, max_policy_lag=2, mask_stale=True)
    built = build_policy(cfg)
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    seen: list[torch.Tensor] = []
    optimizer.step = lambda: seen.extend(
        p.grad.clone() for p in built.module.parameters() if p.grad is not None
    )
    world = World()
    packs = prepare_packs(built.module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), 64, world)
    rows = [(int(v), float(w)) for p in packs for v, w in zip(p.rows.version, p.rows.weight, strict=True)]
    assert {v for v, w in rows if w > 0} == {3} and any(v == 0 for v, _ in rows), (
        f"the stale call's rows are packed (context) with weight 0, the fresh ones weighted: {rows}"
    )
    update(built.module, optimizer, packs, cfg.algorithm, world, 4)
    want = reference_gradient(build_policy(cfg).module.lm, n_generated=batch.trees[0].n_generated)
    assert len(seen) == len(want) > 0
    err = max(float((got - ref).norm() / ref.norm()) for got, ref in zip(seen, want, strict=True))
    assert err < 1e-4, (
        f"the masked update's gradient must be the fresh tokens' plain GRPO gradient: {err:.3g}"
    )
    unmasked = reference_gradient(build_policy(cfg).module.lm, batch.trees[0].n_generated, masked=False)
    gap = max(float((got - ref).norm() / ref.norm()) for got, ref in zip(seen, unmasked, strict=True))
    assert gap > 0.1, f"the check can fail: with the first calls trained the gradient differs ({gap:.3g})"


def test_masking_is_a_trainer_setting_with_two_values(trainer_cfg):
    assert trainer_cfg().stale_calls == "wait"
    with pytest.raises(ValueError):
        trainer_cfg(stale_calls="drop")
