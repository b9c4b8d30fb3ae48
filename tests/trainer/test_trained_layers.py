"""`trainer.trained_layers`: only the top N decoder layers (and the final norm) train; the embeddings,
the LM head and the layers below keep their weights, record no graph, and are not run again by
activation checkpointing, while the trained layers get the very update full training gives them."""

import pytest
import torch

from clawgym.errors import InvalidArgument
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
LAYERS = 4  # tiny-qwen3's
# no clipping: the global norm of every weight's gradient would scale full training's step differently
ALGORITHM = {"name": "grpo", "lr": 1e-3, "max_grad_norm": 1e9}


def _step(trained_layers: int, checkpointing: bool = True):
    """One GRPO step: (weights before, weights after, {layer index: MLP forwards in the update},
    {layer index: whether its output needed a gradient})."""
    cfg = TrainerConfig(
        model="tiny-qwen3",
        trained_layers=trained_layers,
        activation_checkpointing=checkpointing,
        algorithm=ALGORITHM,
    )
    built = build_policy(cfg)
    layers = built.module.decoder_layers()
    calls = {i: 0 for i in range(len(layers))}
    graph: dict[int, bool] = {}
    for i, layer in enumerate(layers):
        forward = layer.mlp.forward

        def counted(*args, _i=i, _forward=forward, **kwargs):  # torch runs no hooks while it recomputes
            calls[_i] += 1
            return _forward(*args, **kwargs)

        layer.mlp.forward = counted

        def needs_grad(_module, _inputs, out, _i=i) -> None:
            hidden = out if isinstance(out, torch.Tensor) else out[0]
            graph.setdefault(_i, hidden.requires_grad)

        layer.register_forward_hook(needs_grad)
    batch = build_batch(synthetic_groups(SHAPE, seed=5), version=0, max_policy_lag=1)
    packs = prepare_packs(built.module, batch.trees, cfg.algorithm, Normaliser.of(batch.trees), 96, World())
    # prepare_packs' no-grad forwards (old logprobs) are not the update's
    calls.update(dict.fromkeys(calls, 0))
    graph.clear()
    before = {n: p.detach().clone() for n, p in built.module.named_parameters()}
    optimizer, _ = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    update(built.module, optimizer, packs, cfg.algorithm, World(), 0)
    after = {n: p.detach().clone() for n, p in built.module.named_parameters()}
    return before, after, calls, graph


def _trained(name: str, trained_layers: int) -> bool:
    if name.startswith("lm.model.layers."):
        return int(name.split(".")[3]) >= LAYERS - trained_layers
    return name == "lm.model.norm.weight"


def test_only_the_top_layers_move_and_each_by_what_full_training_gives_it():
    before, full, _, _ = _step(0)
    _, top, _, _ = _step(2)
    for name in before:
        if _trained(name, 2):
            assert (top[name] - before[name]).abs().max() > 0, f"{name} is trained and must move"
            torch.testing.assert_close(top[name], full[name], rtol=0, atol=1e-7, msg=name)
        else:
            torch.testing.assert_close(top[name], before[name], rtol=0, atol=0, msg=f"{name} is frozen")
    assert any((full[n] - before[n]).abs().max() > 0 for n in before if not _trained(n, 2)), (
        "setup: full training moves the weights frozen here"
    )


def test_the_frozen_layers_record_no_graph_and_are_not_recomputed():
    _, _, calls, graph = _step(2)
    packs = calls[LAYERS - 1] // 2
    assert packs > 1, f"setup: several packs, got {calls}"
    assert calls == {0: packs, 1: packs, 2: 2 * packs, 3: 2 * packs}, (
        f"checkpointing reruns the trained layers' forwards in the backward, not the frozen ones': {calls}"
    )
    assert graph == {0: False, 1: False, 2: True, 3: True}, (
        f"no graph below the lowest trained layer: {graph}"
    )


def test_with_lora_only_the_top_layers_adapters_train():
    lora = {"enabled": True, "r": 2, "alpha": 4, "target_modules": ["all-linear"]}
    lm = build_policy(TrainerConfig(model="tiny-qwen3", trained_layers=1, lora=lora)).module.lm
    trained = {name for name, p in lm.named_parameters() if p.requires_grad}
    adapted_top = {n for n, _ in lm.named_parameters() if "lora_" in n and f"layers.{LAYERS - 1}." in n}
    assert trained == adapted_top and len(trained) == 14, f"the top layer's 7 adapters (A and B): {trained}"


def test_more_layers_than_the_model_has_is_refused():
    with pytest.raises(InvalidArgument, match="trained_layers: 5, but the model has 4 layers"):
        build_policy(TrainerConfig(model="tiny-qwen3", trained_layers=5, algorithm={"name": "grpo"}))
