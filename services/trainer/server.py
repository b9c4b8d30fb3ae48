"""The trainer service: `create_server(cfg)` runs a run in a thread, reports it over gRPC, exports /metrics.

A thin shell around the library's `clawgym.run.Run`, the same run `clawgym train` drives: resume,
the evaluations (`evaluation.at_start`, `every_steps`, `at_end`: Pass@k of held-out tasks through
the orchestrator the loop uses), the trackers, the summary and the report, in the run's folder
(`trainer.run_dir`, default: the run's checkpoint folder). The service shows the run in its log and answers
`Trainer.Status`; its metrics are `Trainer.metrics.registry`. Under torchrun only rank 0 listens
(gRPC and HTTP), evaluates and reports; every rank steps.
"""

import json
import logging
import threading
from pathlib import Path

import grpc

from clawgym.assemble import build_trainer
from clawgym.config import ClawgymConfig
from clawgym.evaluation.runner import EvalResult, EvalSpec, evaluate
from clawgym.generated.v1 import trainer_pb2 as pb
from clawgym.generated.v1 import trainer_pb2_grpc
from clawgym.report.run_folder import RUNS_ROOT
from clawgym.rpc_server import GrpcServer
from clawgym.run import LogObserver, OnStatus, Run
from clawgym.trainer.checkpoint import run_folder
from clawgym.trainer.distributed import init_world
from clawgym.trainer.loop import Trainer
from clawgym.trainer.source import RolloutServiceSource

log = logging.getLogger(__name__)


class ServiceParts:
    """The service's `clawgym.run.RunParts`: its one trainer, and evaluations through the
    orchestrator that trainer's rollouts use (none with the toy rollout source)."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        self.store = trainer.store
        self.evaluates = isinstance(trainer.source, RolloutServiceSource)

    def trainer(self, on_status: OnStatus) -> Trainer:
        return self._trainer  # built before the run (Status answers from the start); no progress bars here

    def evaluate(
        self, spec: EvalSpec, *, version: int, record_run_id: str, on_status: OnStatus | None
    ) -> EvalResult:
        source = self._trainer.source
        assert isinstance(source, RolloutServiceSource)
        return source.runner.run(
            evaluate(
                source.service, self.store, spec, version=version, record_run_id=record_run_id,
                proxy_url=source.proxy_url, on_status=on_status,
            )
        )  # fmt: skip


class StatusObserver(LogObserver):
    """The log, plus each evaluation's Pass@1 in `Trainer.Status` metrics."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def eval_done(self, label: str, result: EvalResult) -> None:
        super().eval_done(label, result)
        for harness, h in result.harnesses.items():
            metrics = h.metrics(result.suite, result.version)
            self.trainer.status.metrics[f"eval_{label}_pass@1/{harness}"] = metrics.get("pass@1")


def run_dir_of(cfg: ClawgymConfig) -> Path:
    """The run's folder: `trainer.run_dir`; else its checkpoint folder when that is local (the one
    volume a deployment keeps for the run: compose's, the chart's), else runs/<run_name>."""
    if cfg.trainer.run_dir:
        return Path(cfg.trainer.run_dir)
    folder = run_folder(cfg.trainer)
    if "://" not in folder or folder.startswith("file://"):
        return Path(folder.removeprefix("file://"))
    return Path(RUNS_ROOT) / cfg.trainer.run_name


class TrainerServicer(trainer_pb2_grpc.TrainerServicer):
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def Status(self, request: pb.TrainerStatusRequest, context: grpc.ServicerContext) -> pb.TrainerStatus:
        s = self.trainer.status
        return pb.TrainerStatus(
            run_id=s.run_id,
            step=s.step,
            policy_version=s.policy_version,
            state=s.state,
            metrics_json=json.dumps(s.metrics, default=float),
        )


class TrainerServer:
    """The loop thread plus (on rank 0) the gRPC Status server and the Prometheus endpoint."""

    def __init__(self, cfg: ClawgymConfig, trainer: Trainer) -> None:
        self.run_cfg = cfg
        self.cfg = cfg.trainer
        self.trainer = trainer
        self.port = 0
        self.metrics_port = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._rpc: GrpcServer | None = None
        if trainer.world.is_main:
            self._rpc = GrpcServer(
                "clawgym.v1.Trainer",
                self.cfg.host,
                self.cfg.port,
                secret=cfg.rpc.shared_secret(),
                metrics_port=self.cfg.metrics_port,
                registry=trainer.metrics.registry,
                max_workers=4,
            )
            self._rpc.add(trainer_pb2_grpc.add_TrainerServicer_to_server, TrainerServicer(trainer))
        self._loop = threading.Thread(target=self._run, name="trainer-loop", daemon=True)

    def start(self) -> int:
        """Starts listening (rank 0) and the loop; returns the gRPC port (0 on other ranks)."""
        if self._rpc is not None:
            # SERVING before the loop starts: a loop that ends at once leaves NOT_SERVING
            self.port = self._rpc.start()
            self.metrics_port = self._rpc.metrics_port
        self._loop.start()
        return self.port

    def _run(self) -> None:
        try:
            folder = run_dir_of(self.run_cfg)
            if self.trainer.world.is_main:
                folder.mkdir(parents=True, exist_ok=True)
            run = Run(
                self.run_cfg, ServiceParts(self.trainer), folder, StatusObserver(self.trainer),
                title=f"clawgym serve trainer: {self.cfg.run_name}", stop=self._stop,
                settings={"mode": "trainer service"},
            )  # fmt: skip
            outcome = run.run()
            if outcome.report is not None:
                log.info("run %s: report %s", outcome.run_id, outcome.report)
        except BaseException as e:
            log.exception("the trainer loop failed")
            self.error = e
        finally:  # the run ended (finished, stopped or failed): Status still answers, health says so
            if self._rpc is not None:
                self._rpc.serving(False)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Waits for the loop to end (run finished, failed or stopped); True if it has."""
        self._loop.join(timeout_s)
        return not self._loop.is_alive()

    @property
    def finished(self) -> bool:
        """The run reached trainer.steps, its final evaluation included, without an error."""
        return not self._loop.is_alive() and self.error is None and self.trainer.version >= self.cfg.steps

    def wait_for_stop_request(self) -> None:
        """Returns once `request_stop` was called (a signal handler may call it)."""
        while not self._stop.wait(1.0):
            pass

    def request_stop(self) -> None:
        """Asks the loop to end after the current step (safe from a signal handler)."""
        self._stop.set()

    def stop(self, grace: float = 5.0) -> None:
        """Stops after the current step (a step in progress finishes or is redone on restart)."""
        self._stop.set()
        self._loop.join(grace if grace else None)
        if self._rpc is not None:
            self._rpc.stop(grace=1)
        self.trainer.close()


def create_server(cfg: ClawgymConfig, trainer: Trainer | None = None) -> TrainerServer:
    """The trainer service for `cfg` (not started); builds the trainer (and joins torchrun's ranks) if not given."""
    return TrainerServer(cfg, trainer if trainer is not None else build_trainer(cfg, world=init_world()))
