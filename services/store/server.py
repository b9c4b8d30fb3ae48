"""The store service: `create_server(cfg)` serves a `TrajectoryStore` (SqlStore) over gRPC, with /metrics.

A thin shell: each handler decodes the request (`clawgym.store.convert`), calls one store
method and encodes the reply. Typed errors become their gRPC status (`ClawgymError.grpc_code`);
anything else is INTERNAL, with the traceback in this service's log. Every RPC is counted by
method and status code and timed; the standard gRPC health service answers beside it.
"""

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from prometheus_client import start_http_server

from clawgym.config import StoreConfig
from clawgym.errors import ClawgymError
from clawgym.generated.v1 import store_pb2 as pb
from clawgym.generated.v1 import store_pb2_grpc
from clawgym.rpc import Health, grpc_options
from clawgym.store import convert
from clawgym.store.interface import TrajectoryStore
from clawgym.store.metrics import StoreMetrics
from clawgym.store.records import Checkpoint
from clawgym.store.sql import SqlStore

log = logging.getLogger(__name__)

# Each WatchGroups stream holds a worker thread for as long as the client watches.
MAX_WORKERS = 64


@contextlib.contextmanager
def _answered(metrics: StoreMetrics, name: str, context: grpc.ServicerContext) -> Iterator[None]:
    """Counts and times one RPC by its status code; an exception becomes that status: a typed error
    its own code, anything else INTERNAL, with the traceback in this service's log."""
    start, code = time.perf_counter(), grpc.StatusCode.OK
    try:
        yield
    except Exception as e:
        code = grpc.StatusCode[e.grpc_code] if isinstance(e, ClawgymError) else grpc.StatusCode.INTERNAL
        if isinstance(e, ClawgymError):
            context.abort(code, str(e))
        log.exception("store %s failed", name, exc_info=e)
        context.abort(code, f"store {name} failed: {type(e).__name__}; see the store service's log")
    finally:
        metrics.observe(name, code.name, time.perf_counter() - start)


def unary(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)
    def wrapped(self: "StoreServicer", request: Any, context: grpc.ServicerContext) -> Any:
        with _answered(self.metrics, handler.__name__, context):
            return handler(self, request, context)

    return wrapped


def streaming(handler: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
    @functools.wraps(handler)
    def wrapped(self: "StoreServicer", request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        with _answered(self.metrics, handler.__name__, context):
            yield from handler(self, request, context)

    return wrapped


class StoreServicer(store_pb2_grpc.StoreServicer):
    def __init__(self, store: TrajectoryStore, metrics: StoreMetrics) -> None:
        self.store = store
        self.metrics = metrics

    @unary
    def CreateRun(self, request: pb.CreateRunRequest, context: grpc.ServicerContext) -> pb.Run:
        run = self.store.create_run(request.name, convert.from_json("config_json", request.config_json))
        return convert.run_to_proto(run)

    @unary
    def GetRun(self, request: pb.GetRunRequest, context: grpc.ServicerContext) -> pb.Run:
        return convert.run_to_proto(self.store.get_run(request.run_id))

    @unary
    def SetRunStatus(self, request: pb.SetRunStatusRequest, context: grpc.ServicerContext) -> pb.Run:
        return convert.run_to_proto(self.store.set_run_status(request.run_id, request.status))

    @unary
    def RegisterRollouts(
        self, request: pb.RegisterRolloutsRequest, context: grpc.ServicerContext
    ) -> pb.RegisterRolloutsResponse:
        specs = [convert.spec_from_proto(s) for s in request.rollouts]
        registered = self.store.register_rollouts(request.run_id, specs)
        return pb.RegisterRolloutsResponse(rollouts=[convert.registered_to_proto(r) for r in registered])

    @unary
    def ResolveToken(self, request: pb.ResolveTokenRequest, context: grpc.ServicerContext) -> pb.Rollout:
        return convert.rollout_to_proto(self.store.resolve_token(request.token))

    @unary
    def GetRollout(self, request: pb.GetRolloutRequest, context: grpc.ServicerContext) -> pb.Rollout:
        return convert.rollout_to_proto(self.store.get_rollout(request.rollout_id))

    @unary
    def StartRollout(self, request: pb.StartRolloutRequest, context: grpc.ServicerContext) -> pb.Rollout:
        return convert.rollout_to_proto(self.store.start_rollout(request.rollout_id, request.sandbox))

    @unary
    def FinishRollout(self, request: pb.FinishRolloutRequest, context: grpc.ServicerContext) -> pb.Rollout:
        rollout = self.store.finish_rollout(
            request.rollout_id,
            request.status,
            reward=request.reward if request.HasField("reward") else None,
            passed=request.passed if request.HasField("passed") else None,
            error=request.error,
            timings=convert.from_json("timings_json", request.timings_json),
        )
        return convert.rollout_to_proto(rollout)

    @unary
    def RecordCall(self, request: pb.Call, context: grpc.ServicerContext) -> pb.RecordCallResponse:
        call = convert.call_from_proto(request)
        call_id = self.store.record_call(call)
        self.metrics.calls.inc()
        self.metrics.tokens.inc(len(call.prompt_ids) + len(call.output_ids))
        return pb.RecordCallResponse(call_id=call_id)

    @unary
    def ListCalls(self, request: pb.ListCallsRequest, context: grpc.ServicerContext) -> pb.ListCallsResponse:
        return pb.ListCallsResponse(
            calls=[convert.call_to_proto(c) for c in self.store.list_calls(request.rollout_id)]
        )

    @unary
    def GetGroup(self, request: pb.GetGroupRequest, context: grpc.ServicerContext) -> pb.Group:
        return convert.group_to_proto(self.store.get_group(request.group_id))

    @streaming
    def WatchGroups(
        self, request: pb.WatchGroupsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.GroupReady]:
        # Watch in 1 s slices so a client that went away frees this worker thread promptly.
        after = request.after_id
        self.store.get_run(request.run_id)
        while context.is_active():
            for ready in self.store.watch_groups(request.run_id, after, timeout_s=1.0):
                after = ready.message_id
                yield convert.group_ready_to_proto(ready)

    @unary
    def RecordCheckpoint(self, request: pb.Checkpoint, context: grpc.ServicerContext) -> pb.Checkpoint:
        checkpoint: Checkpoint = convert.checkpoint_from_proto(request)
        return convert.checkpoint_to_proto(self.store.record_checkpoint(checkpoint))

    @unary
    def ListCheckpoints(
        self, request: pb.ListCheckpointsRequest, context: grpc.ServicerContext
    ) -> pb.ListCheckpointsResponse:
        found = self.store.list_checkpoints(request.run_id)
        return pb.ListCheckpointsResponse(checkpoints=[convert.checkpoint_to_proto(c) for c in found])

    @unary
    def ListUnconsumedGroups(
        self, request: pb.ListUnconsumedGroupsRequest, context: grpc.ServicerContext
    ) -> pb.ListUnconsumedGroupsResponse:
        return pb.ListUnconsumedGroupsResponse(group_ids=self.store.list_unconsumed_groups(request.run_id))

    @unary
    def RecordTrainStep(self, request: pb.TrainStep, context: grpc.ServicerContext) -> pb.TrainStep:
        metrics = convert.from_json("metrics_json", request.metrics_json)
        self.store.record_train_step(request.run_id, request.step, metrics)
        return request

    @unary
    def RecordEval(self, request: pb.Eval, context: grpc.ServicerContext) -> pb.Eval:
        metrics = convert.from_json("metrics_json", request.metrics_json)
        self.store.record_eval(request.run_id, request.version, request.suite, request.harness, metrics)
        return request


class StoreServer:
    """A started-on-demand gRPC server (with health) and /metrics endpoint around one store."""

    def __init__(self, cfg: StoreConfig, host: str, store: TrajectoryStore) -> None:
        self.cfg = cfg
        self.host = host
        self.metrics = StoreMetrics()
        self.port = 0
        self.metrics_port = 0
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=MAX_WORKERS), options=grpc_options(cfg.grpc_max_message_mb)
        )
        store_pb2_grpc.add_StoreServicer_to_server(StoreServicer(store, self.metrics), self._server)
        self.health = Health(self._server, "clawgym.v1.Store")
        self._http = None

    def start(self) -> int:
        """Binds host:cfg.port (0 = any free port), serves, starts /metrics; returns the gRPC port."""
        address = f"{self.host}:{self.cfg.port}"
        self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"store service cannot listen on {address}")
        self._server.start()
        if self.cfg.metrics_port:
            self._http, _ = start_http_server(
                self.cfg.metrics_port, addr=self.host, registry=self.metrics.registry
            )
            self.metrics_port = self._http.server_port
        self.health.serving()
        return self.port

    def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        return self._server.wait_for_termination(timeout_s)

    def stop(self, grace: float | None = 5.0) -> None:
        """NOT_SERVING at once, then stops; in-flight RPCs get `grace` seconds."""
        self.health.shutting_down()
        self._server.stop(grace).wait()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()


def create_server(
    cfg: StoreConfig, host: str = "0.0.0.0", store: TrajectoryStore | None = None
) -> StoreServer:
    """A store server (not started) on host:cfg.port, serving `store` or a SqlStore built from `cfg`."""
    return StoreServer(cfg, host, store if store is not None else SqlStore.from_config(cfg))
