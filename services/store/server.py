"""The store service: `create_server(cfg)` serves a `TrajectoryStore` (SqlStore) over gRPC, with /metrics.

A thin shell: each handler decodes the request (`clawgym.store.convert`), calls one store
method and encodes the reply. Typed errors become their gRPC status (`ClawgymError.grpc_code`);
anything else is INTERNAL, with the traceback in this service's log. Every RPC is counted by
method and status code and timed; the standard gRPC health service answers beside it. Every call
but the health service's needs the `rpc` secret (`clawgym.rpc_server`): no one without it records
calls or finishes a rollout with a reward of its choosing.
"""

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from clawgym.assemble import open_sql_store
from clawgym.browse.app import BrowseServer, create_browse_app
from clawgym.generated.v1 import store_pb2 as pb
from clawgym.generated.v1 import store_pb2_grpc
from clawgym.records import Checkpoint
from clawgym.rpc_server import GrpcServer, status_of
from clawgym.store import convert
from clawgym.store.config import StoreConfig
from clawgym.store.interface import TrajectoryStore
from clawgym.store.metrics import StoreMetrics

log = logging.getLogger(__name__)

# Each WatchGroups stream holds a worker thread for as long as the client watches.
MAX_WORKERS = 64


@contextlib.contextmanager
def _answered(metrics: StoreMetrics, name: str, context: grpc.ServicerContext) -> Iterator[None]:
    """Counts and times one RPC by its status code; an exception becomes its status (`status_of`)."""
    start, code = time.perf_counter(), grpc.StatusCode.OK
    try:
        yield
    except Exception as e:
        code, message = status_of("store", name, e)
        context.abort(code, message)
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
    def ListRuns(self, request: pb.ListRunsRequest, context: grpc.ServicerContext) -> pb.ListRunsResponse:
        return pb.ListRunsResponse(runs=[convert.run_to_proto(r) for r in self.store.list_runs()])

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
            breakdown=convert.optional_from_json("reward_breakdown_json", request.reward_breakdown_json),
            verifier_output=request.verifier_output,
            harness_stderr=request.harness_stderr,
        )
        return convert.rollout_to_proto(rollout)

    @unary
    def RecordJudgment(self, request: pb.Judgment, context: grpc.ServicerContext) -> pb.RecordJudgmentResponse:
        return pb.RecordJudgmentResponse(id=self.store.record_judgment(convert.judgment_from_proto(request)))

    @unary
    def GetJudgment(self, request: pb.GetJudgmentRequest, context: grpc.ServicerContext) -> pb.Judgment:
        return convert.judgment_to_proto(self.store.get_judgment(request.rollout_id))

    @unary
    def ListRollouts(
        self, request: pb.ListRolloutsRequest, context: grpc.ServicerContext
    ) -> pb.ListRolloutsResponse:
        found = self.store.list_rollouts(request.run_id, request.group_id)
        return pb.ListRolloutsResponse(rollouts=[convert.rollout_to_proto(r) for r in found])

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

    @unary
    def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.ServicerContext) -> pb.ListGroupsResponse:
        found = self.store.list_groups(request.run_id)
        return pb.ListGroupsResponse(groups=[convert.group_summary_to_proto(g) for g in found])

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
    def OpenGroupVersions(
        self, request: pb.OpenGroupVersionsRequest, context: grpc.ServicerContext
    ) -> pb.OpenGroupVersionsResponse:
        return pb.OpenGroupVersionsResponse(oldest_versions=self.store.open_group_versions(request.run_id))

    @unary
    def OrchestratorHeartbeat(
        self, request: pb.OrchestratorHeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.OrchestratorHeartbeatResponse:
        failed = self.store.orchestrator_heartbeat(request.instance_id, request.name, request.lease_s)
        return pb.OrchestratorHeartbeatResponse(failed_rollout_ids=failed)

    @unary
    def RecordTrainStep(self, request: pb.TrainStep, context: grpc.ServicerContext) -> pb.TrainStep:
        metrics = convert.from_json("metrics_json", request.metrics_json)
        self.store.record_train_step(request.run_id, request.step, metrics)
        return request

    @unary
    def ListTrainSteps(
        self, request: pb.ListTrainStepsRequest, context: grpc.ServicerContext
    ) -> pb.ListTrainStepsResponse:
        found = self.store.list_train_steps(request.run_id)
        return pb.ListTrainStepsResponse(steps=[convert.train_step_to_proto(t) for t in found])

    @unary
    def RecordEval(self, request: pb.Eval, context: grpc.ServicerContext) -> pb.Eval:
        metrics = convert.from_json("metrics_json", request.metrics_json)
        self.store.record_eval(request.run_id, request.version, request.suite, request.harness, metrics)
        return request

    @unary
    def ListEvals(self, request: pb.ListEvalsRequest, context: grpc.ServicerContext) -> pb.ListEvalsResponse:
        return pb.ListEvalsResponse(evals=[convert.eval_to_proto(e) for e in self.store.list_evals(request.run_id)])


class StoreServer(GrpcServer):
    """The store's gRPC server, and beside it the rollout browser (`browse`) when one is given."""

    def __init__(self, *args: Any, browse: BrowseServer | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.browse = browse
        self.browse_port = 0  # the browser's bound port, once started (0: none)

    def start(self) -> int:
        port = super().start()
        if self.browse is not None:
            self.browse_port = self.browse.start()
        return port

    def stop(self, grace: float | None = 5.0) -> None:
        super().stop(grace)
        if self.browse is not None:
            self.browse.stop()


def create_server(
    cfg: StoreConfig, host: str | None = None, store: TrajectoryStore | None = None, *, secret: str
) -> StoreServer:
    """A store server (not started) on host (default `cfg.host`):cfg.port for callers holding `secret`,
    serving `store` or the in-process store `cfg` names, with its RPC counts on /metrics (cfg.metrics_port)
    and the rollout browser on cfg.browse_port when set."""
    metrics = StoreMetrics()
    server = StoreServer(
        "clawgym.v1.Store",
        host or cfg.host,
        cfg.port,
        secret=secret,
        metrics_port=cfg.metrics_port,
        registry=metrics.registry,
        max_message_mb=cfg.grpc_max_message_mb,
        max_workers=MAX_WORKERS,
    )
    if store is None:
        store = open_sql_store(cfg)
        if count := store.reannounce_ready_groups():
            log.info("announced %d ready, unconsumed groups again (a predecessor may have died before it could)", count)
    if cfg.browse_port:
        bound = host or cfg.host
        app = create_browse_app(store, host=bound, allow_hosts=cfg.browse_allowed_hosts)
        server.browse = BrowseServer(app, bound, cfg.browse_port)
    server.add(store_pb2_grpc.add_StoreServicer_to_server, StoreServicer(store, metrics))
    return server
