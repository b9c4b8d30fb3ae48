"""`Runtime`: every part a run needs, assembled from one `ClawgymConfig`, in-process or as clients.

Owns the deployment modes of ARCHITECTURE.md §8 from the app's side:

- embedded (`orchestrator.grpc_url` empty): one process. SqlStore (SQLite by default) with its bus
  (in-memory by default), the torch engine, the proxy app served by uvicorn on a loopback port in
  a thread (`clawgym.assemble.open_embedded_proxy`), the in-process `Orchestrator` with local
  sandboxes, and the trainer loop. Same interfaces as the services, in-process implementations.
- services (compose, cluster, or `runtime.services.ServiceStack` on loopback): the store, engine and
  orchestrator are gRPC clients (`StoreClient`, `GrpcEngine`, `OrchestratorClient`); the proxy is
  the one the harnesses reach at `orchestrator.proxy_url`; this process runs the trainer loop (and
  evaluations) against them.

The trainer loop, the rollout source and the eval runner see only the interfaces, so both modes run
the same code. Not here: what a command does with the parts (quickstart, train, eval, rollout).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from clawgym.assemble import (
    build_tokenizer,
    build_trainer,
    is_embedded,
    open_embedded_proxy,
    open_engine,
    open_rollouts,
    open_store,
    run_config,
)
from clawgym.config import ClawgymConfig
from clawgym.evaluation.runner import EvalResult, EvalSpec, evaluate
from clawgym.inference.interface import Engine
from clawgym.orchestrator.interface import RolloutService, RolloutStatus
from clawgym.store.interface import TrajectoryStore
from clawgym.trainer.loop import Trainer
from clawgym.trainer.loop_thread import LoopThread

log = logging.getLogger(__name__)


class Runtime:
    """The store, engine, proxy URL and rollout service of one config, plus the loop that drives them."""

    evaluates = True  # every rollout service runs harnesses (`clawgym.run.RunParts`)

    def __init__(self, cfg: ClawgymConfig, sft_threads: int = 0) -> None:
        self.cfg = run_config(cfg)
        self.sft_threads = sft_threads  # the trainer's torch threads in SFT steps (0: the process's)
        self.embedded = is_embedded(self.cfg)
        self.loop = LoopThread("clawgym-runtime")
        self._closers: list[Callable[[], Any]] = [self.loop.close]
        self.store: TrajectoryStore
        self.engine: Engine
        self.tokenizer: Any = None
        self.proxy_url = ""
        self.rollouts: RolloutService

    # --- assembly ---

    @classmethod
    def open(cls, cfg: ClawgymConfig, *, engine: Engine | None = None, sft_threads: int = 0) -> Runtime:
        """Builds (embedded) or connects to (services) every part; `close()` releases them. The
        harnesses run with `orchestrator.harness_settings` (turn caps, reply lengths). `sft_threads`:
        the trainer's torch threads in SFT steps, where the engine of an embedded run sits idle."""
        rt = cls(cfg, sft_threads)
        try:
            rt._open(engine)
        except BaseException:
            rt.close()
            raise
        return rt

    def _open(self, engine: Engine | None) -> None:
        cfg = self.cfg
        self.tokenizer = build_tokenizer(cfg)  # the served policy's, which is the trained one
        self.store = open_store(cfg)
        self._closers.append(self.store.close)
        self.engine = engine if engine is not None else open_engine(cfg)
        if engine is None:
            self._closers.append(self._close_engine)
        if self.embedded:
            self.proxy_url = self._start_proxy()
            cfg = cfg.model_copy(
                update={"orchestrator": cfg.orchestrator.model_copy(update={"proxy_url": self.proxy_url})}
            )
            self.rollouts = self.loop.run(open_rollouts(cfg, self.store))
        else:
            self.proxy_url = cfg.orchestrator.proxy_url
            self.rollouts = self.loop.run(open_rollouts(cfg))
        self._closers.append(lambda: self.loop.run(self.rollouts.close(), timeout_s=60))

    def _start_proxy(self) -> str:
        url, stop = open_embedded_proxy(self.cfg, self.engine, self.store, self.tokenizer)
        self._closers.append(stop)
        log.info("embedded proxy on %s", url)
        return url

    def _close_engine(self) -> None:
        self.loop.run(self.engine.aclose(), timeout_s=60)

    # --- what commands use ---

    def trainer(self, on_status: Callable[[RolloutStatus], None] | None = None) -> Trainer:
        """A trainer for `cfg.trainer` whose rollouts this runtime's rollout service runs (train split);
        closed with the runtime."""
        from clawgym.trainer.distributed import init_world

        trainer = build_trainer(
            self.cfg,
            world=init_world(),  # the GPU when there is one, as `serve trainer` does
            store=self.store,
            rollouts=self.rollouts,
            engines=[self.engine],
            runner=self.loop,
            tokenizer=self.tokenizer,
            proxy_url=self.proxy_url,
            on_status=on_status,
            sft_threads=self.sft_threads,
        )
        self._closers.append(trainer.close)
        return trainer

    def evaluate(
        self,
        spec: EvalSpec,
        *,
        version: int,
        eval_run_id: str = "",
        record_run_id: str = "",
        on_status: Callable[[RolloutStatus], None] | None = None,
    ) -> EvalResult:
        """Runs an evaluation of whatever the engine serves now (see `clawgym.evaluation.runner`)."""
        return self.loop.run(
            evaluate(
                self.rollouts,
                self.store,
                spec,
                version=version,
                eval_run_id=eval_run_id,
                record_run_id=record_run_id,
                proxy_url=self.proxy_url,
                on_status=on_status,
            )
        )

    def load_checkpoint(self, version: int, uri: str) -> float:
        """Makes the engine serve checkpoint `version` at `uri`; returns the seconds it took."""
        return self.loop.run(self.engine.load_weights(version, uri), timeout_s=600)

    def served_version(self) -> int:
        return self.loop.run(self.engine.status(), timeout_s=60).policy_version

    def close(self) -> None:
        """Releases every part this runtime opened, newest first (errors are logged, not raised)."""
        for close in reversed(self._closers):
            try:
                close()
            except Exception:
                log.exception("closing %s failed", getattr(close, "__qualname__", close))
        self._closers.clear()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
