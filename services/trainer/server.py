"""The trainer service: `create_server(cfg)` runs a run in a thread, reports it over gRPC, exports /metrics.

A thin shell around `clawgym.trainer`: the loop is `Trainer.run`, the status is `Trainer.status`,
the metrics are `Trainer.metrics.registry`. Around the loop it runs the config's evaluations
(`evaluation.at_start` / `at_end`: Pass@k of held-out tasks through the orchestrator, recorded in the
store beside the run's steps), as `clawgym train` does in one process. Under torchrun only rank 0
listens (gRPC and HTTP) and evaluates; every rank runs the loop.
"""

import json
import logging
import threading

import grpc

from clawgym.assemble import build_trainer
from clawgym.config import ClawgymConfig
from clawgym.evaluation.runner import evaluate
from clawgym.evaluation.select import eval_spec
from clawgym.generated.v1 import trainer_pb2 as pb
from clawgym.generated.v1 import trainer_pb2_grpc
from clawgym.rpc_server import GrpcServer
from clawgym.trainer.distributed import init_world
from clawgym.trainer.loop import Trainer
from clawgym.trainer.source import RolloutServiceSource

log = logging.getLogger(__name__)


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
        self.cfg = cfg.trainer
        self.evaluation = cfg.evaluation
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
            if self.trainer.policy is None:
                self.trainer.start()
            e = self.evaluation
            if e.at_start and self.trainer.version == 0:  # a resumed run was evaluated before it started
                self._evaluate("before")
            self.trainer.run(stop=self._stop)
            if e.at_end and self.trainer.version >= self.cfg.steps and not self._stop.is_set():
                self._evaluate("after")
        except BaseException as e:
            log.exception("the trainer loop failed")
            self.error = e
        finally:  # the run ended (finished, stopped or failed): Status still answers, health says so
            if self._rpc is not None:
                self._rpc.serving(False)

    def _evaluate(self, label: str) -> None:
        """Pass@k of the served policy on held-out tasks, through the orchestrator the loop uses;
        recorded in the store on the run (its report and `clawgym status` show it)."""
        source, t = self.trainer.source, self.trainer
        if not isinstance(source, RolloutServiceSource):  # the toy source has no harness to evaluate through
            return
        if any(r.version == t.version for r in t.store.list_evals(t.run_id)):
            # a restarted trainer (a pod rescheduled, a crash) repeats no recorded evaluation
            log.info("evaluation %s of policy v%d already recorded: not repeated", label, t.version)
            return
        spec = eval_spec(self.evaluation, self.cfg.suite, [h.name for h in self.cfg.harnesses])
        result = source.runner.run(
            evaluate(
                source.service,
                t.store,
                spec,
                version=t.version,
                record_run_id=t.run_id,
                proxy_url=source.proxy_url,
            )
        )
        for harness, h in result.harnesses.items():
            m = h.metrics(spec.suite, t.version)
            t.status.metrics[f"eval_{label}_pass@1/{harness}"] = m.get("pass@1")
            log.info("evaluation %s (policy v%d, %s, %s): %s", label, t.version, harness, spec.suite,
                     json.dumps(m, default=float))  # fmt: skip

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
