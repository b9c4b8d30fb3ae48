"""The composition root: every part of clawgym built from one `ClawgymConfig`, one way.

Owns the choice between an in-process part and a client of its service, for each part. One verb
per kind: `open_` gives a part ready to use that its caller closes (a store, a bus, an engine, a
started orchestrator, a served proxy); `build_` one constructed but not started, or with nothing to
release (an orchestrator to start, a trainer, an app to serve, a tokenizer).

    open_store(cfg)          SqlStore on `store.url`, or the store service at `store.grpc_url`
    open_bus(cfg, store)     the store's own bus, or the one `store.bus_url` names
    open_engine(cfg)         the in-process engine (`inference.engine`), or the inference service at
                             `inference.grpc_url`: one replica, or several (comma-separated) behind
                             a `ReplicatedEngine` that keeps a rollout on one replica
    open_local_engine(i)     the in-process engine alone (what the inference service serves)
    build_tokenizer(cfg)     the served policy's tokenizer (the proxy renders with it)
    build_proxy_app(cfg, …)  the proxy's HTTP app on given parts (what the proxy service serves)
    open_embedded_proxy      that app on a loopback port in this process (an embedded run)
    run_config(cfg)          `cfg` as a run sees it: the served policy is the trained one
    build_orchestrator(cfg)  the in-process `Orchestrator` on the sandboxes of `sandbox`, not started
    open_rollouts(cfg)       that orchestrator started, or the orchestrator service at
                             `orchestrator.grpc_url`
    build_trainer(cfg)       a `Trainer` whose rollouts come from `open_rollouts` (or the toy source)

Every service's `__main__`, the embedded runtime, `clawgym session new`, the benches and the tests
build parts through these functions and nothing else. Heavy imports (torch, transformers,
kubernetes) happen inside the function that needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clawgym.config import ClawgymConfig
from clawgym.errors import FailedPrecondition
from clawgym.inference.config import InferenceConfig
from clawgym.store.config import StoreConfig

if TYPE_CHECKING:
    from fastapi import FastAPI

    from clawgym.inference.interface import Engine
    from clawgym.orchestrator.catalog import Catalog
    from clawgym.orchestrator.interface import RolloutService, RolloutStatus
    from clawgym.orchestrator.runner import Orchestrator
    from clawgym.store.bus import EventBus
    from clawgym.store.interface import TrajectoryStore
    from clawgym.store.sql import SqlStore
    from clawgym.trainer.demonstrations import Demonstrations
    from clawgym.trainer.distributed import World
    from clawgym.trainer.loop import Trainer
    from clawgym.trainer.loop_thread import LoopThread
    from clawgym.trainer.source import RolloutSource


def open_store(cfg: ClawgymConfig, *, writable: bool = True) -> TrajectoryStore:
    """The store service's client when `store.grpc_url` is set, else an in-process `SqlStore`: read-only
    and never migrated when not `writable` (the reading commands)."""
    s = cfg.store
    if s.grpc_url:
        from clawgym.store.grpc_client import StoreClient

        return StoreClient(s.grpc_url, secret=cfg.rpc.shared_secret(), max_message_mb=s.grpc_max_message_mb)
    return open_sql_store(s, writable=writable)


def open_sql_store(s: StoreConfig, *, writable: bool = True) -> SqlStore:
    """The in-process store on `store.url` with the bus of `store.bus_url` (what the store service serves)."""
    from clawgym.store.bus import make_bus
    from clawgym.store.sql import SqlStore

    return SqlStore(
        s.url,
        make_bus(s.bus_url),
        max_call_bytes=s.max_call_mb * 2**20,
        pool_size=s.pool_size,
        pg_batches_in_flight=s.pg_batches_in_flight,
        writable=writable,
    )


def open_bus(cfg: ClawgymConfig, store: TrajectoryStore | None = None) -> EventBus:
    """The event bus: the in-process store's own (one connection), else the one `store.bus_url` names."""
    from clawgym.store.bus import make_bus

    bus = getattr(store, "bus", None)
    return bus if bus is not None else make_bus(cfg.store.bus_url)


def open_engine(cfg: ClawgymConfig) -> Engine:
    """The inference service's client (one replica or several), else the in-process engine.

    Loading an in-process engine loads the model (seconds)."""
    i = cfg.inference
    targets = i.grpc_targets
    if len(targets) > 1:
        from clawgym.inference.replicas import ReplicatedEngine

        return ReplicatedEngine.from_targets(
            targets,
            secret=cfg.rpc.shared_secret(),
            max_message_mb=i.grpc_max_message_mb,
            load_timeout_s=i.replica_load_timeout_s,
            probe_interval_s=i.replica_probe_interval_s,
            probe_timeout_s=i.replica_probe_timeout_s,
        )
    if targets:
        from clawgym.inference.grpc_client import GrpcEngine

        return GrpcEngine(targets[0], secret=cfg.rpc.shared_secret(), max_message_mb=i.grpc_max_message_mb)
    return open_local_engine(i)


def open_local_engine(i: InferenceConfig) -> Engine:
    """The in-process engine `inference.engine` names (what the inference service serves); loads the model."""
    from clawgym.inference.factory import create_engine

    return create_engine(i)


def build_tokenizer(cfg: ClawgymConfig) -> Any:
    """The served policy's tokenizer (`inference.model`): the proxy renders prompts with it."""
    from clawgym.policies import load_tokenizer

    return load_tokenizer(cfg.inference.model, cache_dir=Path(cfg.inference.cache_dir).expanduser())


def is_embedded(cfg: ClawgymConfig) -> bool:
    """Embedded when no orchestrator service is named: everything then runs in this process."""
    return not cfg.orchestrator.grpc_url


def run_config(cfg: ClawgymConfig) -> ClawgymConfig:
    """`cfg` as a run sees it: the served policy is the trained one (`trainer.model`, when named), and
    in one process (embedded) the engine is in-process."""
    if not cfg.trainer.model:
        return cfg
    update = {"model": cfg.trainer.model, **({"grpc_url": ""} if is_embedded(cfg) else {})}
    return cfg.model_copy(update={"inference": cfg.inference.model_copy(update=update)})


def build_proxy_app(cfg: ClawgymConfig, engine: Engine, store: TrajectoryStore, tokenizer: Any) -> FastAPI:
    """The proxy's HTTP app (`clawgym.proxy.app`) on these parts, rendering tools as the served policy
    (`inference.model`) does and reading its tool calls in the format its template teaches; an oracle
    teacher without suites answers from the run's (`trainer.suite`, `evaluation.suite`)."""
    from clawgym.policies import policy_spec
    from clawgym.proxy.app import create_app

    spec = policy_spec(cfg.inference.model)
    proxy = cfg.proxy
    if proxy.teacher.kind == "oracle" and not proxy.teacher.suites:  # the suites this run takes tasks from
        suites = list(dict.fromkeys(s for s in (cfg.trainer.suite, cfg.evaluation.suite) if s))
        proxy = proxy.model_copy(update={"teacher": proxy.teacher.model_copy(update={"suites": suites})})
    return create_app(
        proxy,
        engine,
        store,
        tokenizer,
        supports_tools=spec.supports_tools,
        tool_call_format=spec.tool_call_format,
    )


def open_embedded_proxy(
    cfg: ClawgymConfig, engine: Engine, store: TrajectoryStore, tokenizer: Any
) -> tuple[str, Callable[[], None]]:
    """`build_proxy_app` served in this process on a free loopback port (`ServerThread`, with the read
    deadline of `cfg.proxy`): its root URL, and the function that stops it."""
    from clawgym.proxy.serving import ServerThread

    server = ServerThread(build_proxy_app(cfg, engine, store, tokenizer), cfg.proxy)
    return server.start(), server.stop


def build_orchestrator(
    cfg: ClawgymConfig,
    store: TrajectoryStore,
    *,
    catalog: Catalog | None = None,
) -> Orchestrator:
    """The in-process orchestrator on the sandbox backend `cfg` names (not started). Processes that
    share a sandbox owner (the default: the host name) never reap each other's live sandboxes
    (`sandbox.owners`), and each reaps what a dead one left."""
    from clawgym.harnesses.base import DEFAULT_CACHE_DIR
    from clawgym.orchestrator.runner import Orchestrator
    from clawgym.sandbox import make_sandbox_backend
    from clawgym.tasks.provision import PROVISION_DIR

    o = cfg.orchestrator
    cache = o.harness_cache_dir or str(DEFAULT_CACHE_DIR)
    backend = make_sandbox_backend(cfg.sandbox.with_ro_paths([cache, str(PROVISION_DIR)]))
    return Orchestrator(o, store, backend, catalog=catalog)


async def open_rollouts(
    cfg: ClawgymConfig,
    store: TrajectoryStore | None = None,
    *,
    catalog: Catalog | None = None,
) -> RolloutService:
    """The orchestrator service's client when `orchestrator.grpc_url` is set, else an in-process
    `Orchestrator` (on `store`, or the one `open_store` gives), started. Call it on the event loop
    that will use it (a gRPC aio channel and the orchestrator's semaphores belong to that loop)."""
    if cfg.orchestrator.grpc_url:
        from clawgym.orchestrator.grpc_client import OrchestratorClient

        return OrchestratorClient(cfg.orchestrator.grpc_url, secret=cfg.rpc.shared_secret())
    orchestrator = build_orchestrator(cfg, store if store is not None else open_store(cfg), catalog=catalog)
    await orchestrator.start()
    return orchestrator


def build_trainer(
    cfg: ClawgymConfig,
    *,
    world: World | None = None,
    store: TrajectoryStore | None = None,
    rollouts: RolloutService | None = None,
    engines: list[Engine] | None = None,
    runner: LoopThread | None = None,
    tokenizer: Any = None,
    proxy_url: str = "",
    on_status: Callable[[RolloutStatus], None] | None = None,
    sft_threads: int = 0,
) -> Trainer:
    """A `Trainer` for `cfg.trainer`. Parts not given are opened from `cfg`: the runner and the
    orchestrator client close with the trainer, a store it opens lives as long as the process; given
    ones stay the caller's. Rollouts come from `rollouts` (or
    `open_rollouts(cfg)`), or from the toy source with `trainer.rollout_source: toy`. The engines the
    trainer publishes checkpoints to: `engines`, else the inference service if one is named. Batches name
    `proxy_url` (an embedded run's own proxy), else none: the orchestrator's `orchestrator.proxy_url`. Under
    torchrun only rank 0 opens the store, bus, source and engines. `sft_threads`: the torch threads of
    its SFT steps (0: the process's)."""
    from clawgym.trainer.config import check_trainer_config
    from clawgym.trainer.distributed import World
    from clawgym.trainer.loop import Trainer
    from clawgym.trainer.loop_thread import LoopThread

    t = cfg.trainer
    check_trainer_config(t)
    world = world or World()
    cache_dir = cfg.inference.cache_dir  # built-in policies: the trainer's and the engine's are one cache
    if tokenizer is None:
        from clawgym.policies import load_tokenizer

        tokenizer = load_tokenizer(t.model, cache_dir=Path(cache_dir).expanduser())
    if not world.is_main:
        return Trainer(
            t, store=None, bus=None, source=None, tokenizer=tokenizer, world=world, cache_dir=cache_dir
        )
    owns_runner = runner is None
    runner = runner or LoopThread()
    if store is None:
        store = open_store(cfg)
    engines = list(engines) if engines is not None else []
    if not engines and cfg.inference.grpc_url:
        engines = [open_engine(cfg)]
    pushes = [getattr(e, "weight_sync", "files") == "cuda_ipc" for e in engines]
    if cfg.inference.weight_sync == "cuda_ipc" and (world.size > 1 or not engines or not all(pushes)):
        raise FailedPrecondition(
            "inference.weight_sync=cuda_ipc hands one trainer process's tensors to a vLLM engine in that "
            "process (one GPU); an inference service, the torch engine or torchrun ranks reload from "
            "checkpoint files: use weight_sync files"
        )
    source: RolloutSource
    if t.rollout_source == "toy":
        source, engines = _toy_source(cfg, store, tokenizer, runner, engines)
    else:
        source = _rollout_service_source(cfg, store, runner, rollouts, proxy_url, on_status)
    sync = cfg.inference.weight_sync
    in_process = [getattr(e, "weight_sync", "files") == sync for e in engines]
    if sync in ("shared", "copy") and (
        world.size > 1
        or not engines
        or not all(in_process)
        or (sync == "shared" and t.lora.enabled)
        or t.model != cfg.inference.model
    ):
        source.close()
        raise FailedPrecondition(
            f"inference.weight_sync={sync} hands one trainer process's parameters to the torch engine in that "
            f"process (the same model{', no LoRA' if sync == 'shared' else ''}, no torchrun); an inference "
            "service or torchrun ranks reload from checkpoint files: use weight_sync files"
        )
    return Trainer(
        t,
        store=store,
        bus=open_bus(cfg, store),
        source=source,
        tokenizer=tokenizer,
        engines=engines,
        runner=runner,
        world=world,
        close_runner=owns_runner,
        cache_dir=cache_dir,
        demonstrations=open_demonstrations(cfg, store) if t.is_sft_step(0) else None,
        sft_threads=sft_threads,
    )


def open_demonstrations(cfg: ClawgymConfig, store: TrajectoryStore) -> Demonstrations:
    """`trainer.sft`'s demonstrations: from an export folder, a run folder's store (read-only), or
    `store` (the run's own) when `sft.source` is empty; the run is `sft.run_id`, else the source's
    newest training run. Filtered (`trainer.demonstrations.select`) and made trees."""
    from clawgym.errors import InvalidArgument, NotFound
    from clawgym.export.reading import export_groups, export_run_id, is_export
    from clawgym.report.run_folder import folder_store_url
    from clawgym.trainer.demonstrations import Demonstrations, select, store_groups

    s, t = cfg.trainer.sft, cfg.trainer
    folder = Path(s.source).expanduser() if s.source else None
    if folder is not None and is_export(folder):
        if s.run_id and s.run_id != export_run_id(folder):
            raise InvalidArgument(
                f"trainer.sft.run_id: {folder} holds run {export_run_id(folder)}, not {s.run_id}"
            )
        groups, where = export_groups(folder), f"export folder {folder}"
    else:
        source = store
        if folder is not None:
            url = folder_store_url(folder) if folder.is_dir() else ""
            if not url:
                raise InvalidArgument(
                    f"trainer.sft.source: {folder} is neither a run folder nor an export folder"
                )
            source = open_sql_store(StoreConfig(url=url), writable=False)
        try:
            run_id = s.run_id or _newest_training_run(source, str(folder))
            try:
                source.get_run(run_id)
            except NotFound:
                raise NotFound(f"trainer.sft.run_id: no run {run_id!r} in {folder or 'the store'}") from None
            groups, where = store_groups(source, run_id), f"run {run_id}"
        finally:
            if source is not store:
                source.close()
    kept = select(groups, s.min_reward, s.teacher_only, s.harnesses)
    return Demonstrations.of(kept, s.groups_per_step, t.seed, where)


def _newest_training_run(store: TrajectoryStore, where: str) -> str:
    """The newest run that is no evaluation's (a run folder's store also holds its evaluations')."""
    runs = [r for r in store.list_runs() if (r.config or {}).get("kind") != "eval"]
    if not runs:
        raise FailedPrecondition(f"trainer.sft.source: {where} holds no training run")
    return runs[0].id


def _rollout_service_source(
    cfg: ClawgymConfig,
    store: TrajectoryStore,
    runner: LoopThread,
    rollouts: RolloutService | None,
    proxy_url: str,
    on_status: Callable[[RolloutStatus], None] | None,
) -> RolloutSource:
    from clawgym.trainer.source import RolloutServiceSource, train_task_ids

    t = cfg.trainer
    tasks = list(t.tasks) or train_task_ids(t.suite)
    owned = rollouts is None
    if rollouts is None:
        if not cfg.orchestrator.grpc_url:
            raise FailedPrecondition(
                "orchestrator.grpc_url: empty; the trainer needs the orchestrator service for rollouts "
                "(or trainer.rollout_source: toy, or an embedded run: clawgym train)"
            )
        rollouts = runner.run(open_rollouts(cfg, store))
    return RolloutServiceSource(
        rollouts,
        runner,
        tasks,
        proxy_url=proxy_url,
        on_status=on_status,
        close_service=owned,
    )


def _toy_source(
    cfg: ClawgymConfig, store: TrajectoryStore, tokenizer: Any, runner: LoopThread, engines: list
):
    """The toy rollout source on the configured engine, or on an in-process torch engine of the policy."""
    from clawgym.trainer.toy import ToyRolloutSource

    if not engines:
        t = cfg.trainer
        engines = [open_local_engine(cfg.inference.model_copy(update={"model": t.model, "dtype": t.dtype}))]
    return ToyRolloutSource(store, engines[0], tokenizer, runner, seed=cfg.trainer.seed), engines
