"""`trainer.activation_checkpointing`: each decoder layer's forward runs again in the backward (its
activations are not kept), and the update is the same, bit for bit, as without it."""

import torch

from clawgym.trainer.batch import build_batch
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.distributed import World
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy
from clawgym.trainer.update import Normaliser, prepare_packs, update
from clawgym.trajectory.synthetic import TraceShape, synthetic_groups

SHAPE = TraceShape(
    n_groups=2, group_size=3, calls=(2, 3), system_tokens=24, task_tokens=8, observation_tokens=6,
    output_tokens=6, vocab_size=4000, p_compaction=0.2, p_subagent=0.2, subagent_system_tokens=10,
)  # fmt: skip


def _step(checkpointing: bool) -> tuple[dict[str, torch.Tensor], int, int]:
    """The weights after one GRPO step, how often the first decoder layer's MLP ran forward, and packs."""
    cfg = TrainerConfig(
        model="tiny-qwen3", activation_checkpointing=checkpointing, algorithm={"name": "grpo", "lr": 1e-3}
    )
    built = build_policy(cfg)
    calls = []
    mlp = built.module.decoder_layers()[0].mlp
    forward = mlp.forward

    def counted(*args, **kwargs):  # not a forward hook: torch runs none while it recomputes
        calls.append(1)
        return forward(*args, **kwargs)

    mlp.forward = counted
    batch = build_batch(synthetic_groups(SHAPE, seed=5), version=0, max_policy_lag=1)
    packs = prepare_packs(built.module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), 96, World())
    calls.clear()  # prepare_packs' no-grad forwards (old logprobs) are not the update's
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    update(built.module, optimizer, packs, cfg.algorithm, World(), 0)
    weights = {n: p.detach().clone() for n, p in built.module.named_parameters()}
    return weights, len(calls), len(packs)


def test_checkpointed_layers_run_again_in_the_backward_and_the_update_is_unchanged():
    plain, plain_calls, packs = _step(False)
    kept, kept_calls, _ = _step(True)
    assert packs > 1 and plain_calls == packs, "setup: one MLP forward per pack without checkpointing"
    assert kept_calls == 2 * plain_calls, "with checkpointing each layer's forward runs again in the backward"
    moved = max((plain[k] - _initial(k)).abs().max().item() for k in plain)
    assert moved > 1e-5, "setup: the step must move the weights"
    for name in plain:
        torch.testing.assert_close(kept[name], plain[name], rtol=0, atol=0, msg=name)


_INITIAL: dict[str, torch.Tensor] = {}


def _initial(name: str) -> torch.Tensor:
    if not _INITIAL:
        built = build_policy(TrainerConfig(model="tiny-qwen3", algorithm={"name": "grpo"}))
        _INITIAL.update({n: p.detach().clone() for n, p in built.module.named_parameters()})
    return _INITIAL[name]
