"""Assembling a trainer from the config: store, bus, tokenizer, rollout source and engines to reload.

Owns the choices `clawgym serve trainer` makes from a `ClawgymConfig`; the embedded runtime may
instead build the parts itself and call `Trainer(...)` directly (same interfaces, in-process
objects). Under torchrun only rank 0 opens the store, bus, source and engines.
"""

from pathlib import Path

from clawgym.config import ClawgymConfig
from clawgym.errors import FailedPrecondition
from clawgym.inference.interface import Engine
from clawgym.store.bus import make_bus
from clawgym.trainer.config import check_trainer_config
from clawgym.trainer.distributed import World
from clawgym.trainer.loop import Trainer
from clawgym.trainer.loop_thread import LoopThread
from clawgym.trainer.source import OrchestratorSource, RolloutSource, suite_task_ids


def build_trainer(
    cfg: ClawgymConfig,
    *,
    world: World | None = None,
    source: RolloutSource | None = None,
    engines: list[Engine] | None = None,
) -> Trainer:
    """A `Trainer` for `cfg.trainer`, wired to the store/bus of `cfg.store` and the engine of
    `cfg.inference` (its gRPC service, or with `trainer.rollout_source: toy` an in-process torch
    engine that also generates the toy rollouts)."""
    from clawgym.policies import load_tokenizer

    t = cfg.trainer
    check_trainer_config(t)
    world = world or World()
    tokenizer = load_tokenizer(t.model, cache_dir=Path(t.cache_dir).expanduser())
    if not world.is_main:
        return Trainer(t, store=None, bus=None, source=None, tokenizer=tokenizer, world=world)
    from clawgym.store import open_store

    store = open_store(cfg.store)
    bus = getattr(store, "bus", None) or make_bus(cfg.store.bus_url)
    runner = LoopThread()
    engines = list(engines) if engines is not None else []
    if not engines and cfg.inference.grpc_url:
        from clawgym.inference.grpc_client import GrpcEngine

        engines = [GrpcEngine(cfg.inference.grpc_url, max_message_mb=cfg.inference.grpc_max_message_mb)]
    if source is None and t.rollout_source == "toy":
        source, engines = _toy_source(cfg, store, tokenizer, runner, engines)
    if source is None:
        source = _orchestrator_source(cfg)
    return Trainer(
        t,
        store=store,
        bus=bus,
        source=source,
        tokenizer=tokenizer,
        engines=engines,
        runner=runner,
        world=world,
        close_runner=True,
    )


def _toy_source(cfg: ClawgymConfig, store, tokenizer, runner: LoopThread, engines: list[Engine]):
    """The toy rollout source on the configured engine, or on an in-process torch engine of the policy."""
    from clawgym.trainer.toy import ToyRolloutSource

    if not engines:
        import torch

        from clawgym.inference.torch_engine import TorchEngine

        t = cfg.trainer
        engines = [
            TorchEngine.from_spec(
                t.model, dtype=getattr(torch, t.dtype), cache_dir=Path(t.cache_dir).expanduser()
            )
        ]
    return ToyRolloutSource(store, engines[0], tokenizer, runner, seed=cfg.trainer.seed), engines


def _orchestrator_source(cfg: ClawgymConfig) -> OrchestratorSource:
    section = getattr(cfg, "orchestrator", None)
    target = getattr(section, "grpc_url", "") if section is not None else ""
    if not target:
        raise FailedPrecondition(
            "orchestrator.grpc_url: empty; the trainer needs the orchestrator service for rollouts "
            "(or trainer.rollout_source: toy)"
        )
    tasks = list(cfg.trainer.tasks) or suite_task_ids(cfg.trainer.suite)
    return OrchestratorSource(target, proxy_url=cfg.trainer.proxy_url, suite_tasks=tasks)
