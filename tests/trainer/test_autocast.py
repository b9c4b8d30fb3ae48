"""`trainer.autocast: bfloat16`: the policy's forwards and backwards compute in bfloat16 while its
parameters, gradients and optimizer stay float32. One GRPO step moves the weights as the float32 step
does (to bfloat16's precision), the layers really ran in bfloat16, and recomputing checkpointed layers
in the backward keeps the autocast (the same step, bit for bit)."""

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


def _step(autocast: str, checkpointing: bool = False) -> tuple[dict[str, torch.Tensor], set[torch.dtype]]:
    """The weights after one GRPO step (sgd-like: AdamW's first step), and the dtypes an MLP computed in."""
    cfg = TrainerConfig(
        model="tiny-qwen3",
        autocast=autocast,
        activation_checkpointing=checkpointing,
        algorithm={"name": "grpo", "lr": 1e-3},
    )
    built = build_policy(cfg)
    seen: set[torch.dtype] = set()
    built.module.decoder_layers()[0].mlp.register_forward_hook(lambda m, i, o: seen.add(o.dtype))
    batch = build_batch(synthetic_groups(SHAPE, seed=5), version=0, max_policy_lag=1)
    packs = prepare_packs(built.module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), 96, World())
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    update(built.module, optimizer, packs, cfg.algorithm, World(), 0)
    return {n: p.detach().clone() for n, p in built.module.named_parameters()}, seen


def test_a_bfloat16_autocast_step_keeps_float32_weights_and_moves_them_as_the_float32_step():
    initial = {
        n: p.detach().clone()
        for n, p in build_policy(TrainerConfig(model="tiny-qwen3")).module.named_parameters()
    }
    exact, exact_dtypes = _step("off")
    mixed, mixed_dtypes = _step("bfloat16")
    assert exact_dtypes == {torch.float32} and mixed_dtypes == {torch.bfloat16}, (exact_dtypes, mixed_dtypes)
    assert all(p.dtype == torch.float32 for p in mixed.values()), "parameters stay float32"
    a = torch.cat([(exact[n] - initial[n]).flatten() for n in exact])
    b = torch.cat([(mixed[n] - initial[n]).flatten() for n in exact])
    assert a.norm() > 1e-3, "setup: the step must move the weights"
    cosine = float(a @ b / (a.norm() * b.norm()))
    assert cosine > 0.95, f"the bfloat16 step goes elsewhere than the float32 one (cosine {cosine:.3f})"
    assert not torch.equal(a, b), "autocast must change the arithmetic"


def test_checkpointed_layers_recompute_under_the_same_autocast():
    plain, _ = _step("bfloat16", checkpointing=False)
    kept, _ = _step("bfloat16", checkpointing=True)
    for name in plain:
        torch.testing.assert_close(kept[name], plain[name], rtol=0, atol=0, msg=name)
