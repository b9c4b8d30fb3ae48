"""The trainer service: `create_server(cfg)` runs the RL loop in a thread, reports it over gRPC, exports /metrics.

A thin shell around `clawgym.trainer`: the loop is `Trainer.run`, the status is `Trainer.status`,
the metrics are `Trainer.metrics.registry`. Under torchrun only rank 0 listens (gRPC and HTTP);
every rank runs the loop.
"""

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
from prometheus_client import start_http_server

from clawgym.config import ClawgymConfig
from clawgym.generated.v1 import trainer_pb2 as pb
from clawgym.generated.v1 import trainer_pb2_grpc
from clawgym.rpc import Health
from clawgym.trainer.build import build_trainer
from clawgym.trainer.distributed import init_world
from clawgym.trainer.loop import Trainer

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
        self.trainer = trainer
        self.port = 0
        self.metrics_port = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._grpc: grpc.Server | None = None
        self._health: Health | None = None
        self._http = None
        self._loop = threading.Thread(target=self._run, name="trainer-loop", daemon=True)

    def start(self) -> int:
        """Starts listening (rank 0) and the loop; returns the gRPC port (0 on other ranks)."""
        if self.trainer.world.is_main:
            self._grpc = grpc.server(ThreadPoolExecutor(max_workers=4))
            trainer_pb2_grpc.add_TrainerServicer_to_server(TrainerServicer(self.trainer), self._grpc)
            self._health = Health(self._grpc, "clawgym.v1.Trainer")
            self.port = self._grpc.add_insecure_port(f"{self.cfg.host}:{self.cfg.port}")
            if self.port == 0:
                raise OSError(f"trainer service cannot listen on {self.cfg.host}:{self.cfg.port}")
            self._grpc.start()
            if self.cfg.metrics_port:
                self._http, _ = start_http_server(
                    self.cfg.metrics_port, addr=self.cfg.host, registry=self.trainer.metrics.registry
                )
                self.metrics_port = self._http.server_port
        if self._health is not None:
            self._health.serving()  # before the loop starts: a loop that ends at once leaves NOT_SERVING
        self._loop.start()
        return self.port

    def _run(self) -> None:
        try:
            self.trainer.run(stop=self._stop)
        except BaseException as e:
            log.exception("the trainer loop failed")
            self.error = e
        finally:  # the run ended (finished, stopped or failed): Status still answers, health says so
            if self._health is not None:
                self._health.serving(False)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Waits for the loop to end (run finished, failed or stopped); True if it has."""
        self._loop.join(timeout_s)
        return not self._loop.is_alive()

    def request_stop(self) -> None:
        """Asks the loop to end after the current step (safe from a signal handler)."""
        self._stop.set()

    def stop(self, grace: float = 5.0) -> None:
        """Stops after the current step (a step in progress finishes or is redone on restart)."""
        self._stop.set()
        self._loop.join(grace if grace else None)
        if self._grpc is not None:
            self._health.shutting_down()
            self._grpc.stop(grace=1)
        if self._http is not None:
            self._http.shutdown()
        self.trainer.close()


def create_server(cfg: ClawgymConfig, trainer: Trainer | None = None) -> TrainerServer:
    """The trainer service for `cfg` (not started); builds the trainer (and joins torchrun's ranks) if not given."""
    return TrainerServer(cfg, trainer if trainer is not None else build_trainer(cfg, world=init_world()))
