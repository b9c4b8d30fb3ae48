"""`StoreClient`: the `TrajectoryStore` of a remote store service (`clawgym serve store`), over gRPC.

Owns the channel (every call carrying the `rpc` secret), per-call deadlines and turning gRPC statuses back into the typed errors the
server rendered (INVALID_ARGUMENT → InvalidArgument, …), so callers cannot tell it from an
in-process `SqlStore`; not the mapping of fields (`clawgym.store.convert`).
"""

from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any, TypeVar

import grpc

from clawgym.generated.v1 import store_pb2 as pb
from clawgym.generated.v1.store_pb2_grpc import StoreStub
from clawgym.records import (
    Call,
    Checkpoint,
    EvalRecord,
    Group,
    GroupReady,
    GroupSummary,
    Judgment,
    RegisteredRollout,
    Rollout,
    RolloutSpec,
    Run,
    TrainStep,
)
from clawgym.rpc import error_from_rpc, grpc_options, open_channel
from clawgym.store import convert

T = TypeVar("T")
WARM_UP_S = 2.0  # a proxy's startup waits this long at most for a store that is not up


class StoreClient:
    """A `TrajectoryStore` backed by a store service at `target` ("host:port")."""

    def __init__(
        self, target: str, *, secret: str, timeout_s: float = 60.0, max_message_mb: int = 1024
    ) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._channel = open_channel(target, secret, grpc_options(max_message_mb))
        self._stub = StoreStub(self._channel)

    def warm_up(self) -> None:
        """Connects the channel ahead of the first call, waiting at most WARM_UP_S (or the client's
        timeout, if shorter): a store not up yet is left to that call."""
        with suppress(grpc.FutureTimeoutError):
            grpc.channel_ready_future(self._channel).result(timeout=min(self.timeout_s, WARM_UP_S))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "StoreClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _call(self, method: Callable[..., T], message: type | Any, **fields: Any) -> T:
        """Sends `message` (a built message, or a message class and its `fields`), mapping errors."""
        request = (
            convert.encode(message.__name__, lambda: message(**fields))
            if isinstance(message, type)
            else message
        )
        # wait_for_ready: a store still starting (compose, a rolling restart) is waited for, up to the deadline.
        try:
            return method(request, timeout=self.timeout_s, wait_for_ready=True)
        except grpc.RpcError as e:
            raise error_from_rpc("store", e) from None

    # --- runs ---

    def create_run(self, name: str, config: dict[str, Any] | None = None) -> Run:
        config_json = convert.to_json("config", config)
        return convert.run_from_proto(
            self._call(self._stub.CreateRun, pb.CreateRunRequest, name=name, config_json=config_json)
        )

    def get_run(self, run_id: str) -> Run:
        return convert.run_from_proto(self._call(self._stub.GetRun, pb.GetRunRequest, run_id=run_id))

    def set_run_status(self, run_id: str, status: str) -> Run:
        reply = self._call(self._stub.SetRunStatus, pb.SetRunStatusRequest, run_id=run_id, status=status)
        return convert.run_from_proto(reply)

    def list_runs(self) -> list[Run]:
        reply = self._call(self._stub.ListRuns, pb.ListRunsRequest)
        return [convert.run_from_proto(r) for r in reply.runs]

    # --- rollouts ---

    def register_rollouts(self, run_id: str, specs: list[RolloutSpec]) -> list[RegisteredRollout]:
        protos = [convert.spec_to_proto(s) for s in specs]
        reply = self._call(
            self._stub.RegisterRollouts, pb.RegisterRolloutsRequest, run_id=run_id, rollouts=protos
        )
        return [convert.registered_from_proto(r) for r in reply.rollouts]

    def resolve_token(self, token: str) -> Rollout:
        return convert.rollout_from_proto(
            self._call(self._stub.ResolveToken, pb.ResolveTokenRequest, token=token)
        )

    def get_rollout(self, rollout_id: str) -> Rollout:
        reply = self._call(self._stub.GetRollout, pb.GetRolloutRequest, rollout_id=rollout_id)
        return convert.rollout_from_proto(reply)

    def start_rollout(self, rollout_id: str, sandbox: str = "") -> Rollout:
        reply = self._call(
            self._stub.StartRollout, pb.StartRolloutRequest, rollout_id=rollout_id, sandbox=sandbox
        )
        return convert.rollout_from_proto(reply)

    def finish_rollout(
        self,
        rollout_id: str,
        status: str,
        reward: float | None = None,
        passed: bool | None = None,
        error: str = "",
        timings: dict[str, float] | None = None,
        breakdown: dict[str, Any] | None = None,
        *,
        verifier_output: str = "",
        harness_stderr: str = "",
    ) -> Rollout:
        reply = self._call(
            self._stub.FinishRollout,
            pb.FinishRolloutRequest,
            rollout_id=rollout_id,
            status=status,
            reward=reward,  # None leaves the proto3 optional unset
            passed=passed,
            error=error,
            timings_json=convert.to_json("timings", timings),
            reward_breakdown_json=convert.optional_to_json("breakdown", breakdown),
            verifier_output=verifier_output,
            harness_stderr=harness_stderr,
        )
        return convert.rollout_from_proto(reply)

    # --- judgments ---

    def record_judgment(self, judgment: Judgment) -> str:
        return self._call(self._stub.RecordJudgment, convert.judgment_to_proto(judgment)).id

    def get_judgment(self, rollout_id: str) -> Judgment:
        reply = self._call(self._stub.GetJudgment, pb.GetJudgmentRequest, rollout_id=rollout_id)
        return convert.judgment_from_proto(reply)

    def list_rollouts(self, run_id: str, group_id: str = "") -> list[Rollout]:
        reply = self._call(self._stub.ListRollouts, pb.ListRolloutsRequest, run_id=run_id, group_id=group_id)
        return [convert.rollout_from_proto(r) for r in reply.rollouts]

    # --- calls ---

    def record_call(self, call: Call) -> str:
        return self._call(self._stub.RecordCall, convert.call_to_proto(call)).call_id

    def list_calls(self, rollout_id: str) -> list[Call]:
        reply = self._call(self._stub.ListCalls, pb.ListCallsRequest, rollout_id=rollout_id)
        return [convert.call_from_proto(c) for c in reply.calls]

    # --- groups ---

    def get_group(self, group_id: str) -> Group:
        return convert.group_from_proto(
            self._call(self._stub.GetGroup, pb.GetGroupRequest, group_id=group_id)
        )

    def list_groups(self, run_id: str) -> list[GroupSummary]:
        reply = self._call(self._stub.ListGroups, pb.ListGroupsRequest, run_id=run_id)
        return [convert.group_summary_from_proto(g) for g in reply.groups]

    def watch_groups(
        self, run_id: str, after_id: str = "", timeout_s: float | None = None
    ) -> Iterator[GroupReady]:
        """Groups as the server streams them; ends after `timeout_s` in total (None: when the caller stops)."""
        request = convert.encode("watch", lambda: pb.WatchGroupsRequest(run_id=run_id, after_id=after_id))
        stream = self._stub.WatchGroups(request, timeout=timeout_s, wait_for_ready=True)
        try:
            for message in stream:
                yield convert.group_ready_from_proto(message)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:  # type: ignore[attr-defined]
                raise error_from_rpc("store", e) from None
        finally:
            stream.cancel()  # the caller stopped iterating: release the server's watcher

    # --- checkpoints, steps, evals ---

    def record_checkpoint(self, checkpoint: Checkpoint) -> Checkpoint:
        reply = self._call(self._stub.RecordCheckpoint, convert.checkpoint_to_proto(checkpoint))
        return convert.checkpoint_from_proto(reply)

    def list_checkpoints(self, run_id: str) -> list[Checkpoint]:
        reply = self._call(self._stub.ListCheckpoints, pb.ListCheckpointsRequest, run_id=run_id)
        return [convert.checkpoint_from_proto(c) for c in reply.checkpoints]

    def list_unconsumed_groups(self, run_id: str) -> list[str]:
        reply = self._call(self._stub.ListUnconsumedGroups, pb.ListUnconsumedGroupsRequest, run_id=run_id)
        return list(reply.group_ids)

    def open_group_versions(self, run_id: str) -> dict[str, int]:
        reply = self._call(self._stub.OpenGroupVersions, pb.OpenGroupVersionsRequest, run_id=run_id)
        return dict(reply.oldest_versions)

    def orchestrator_heartbeat(self, instance_id: str, name: str, lease_s: float) -> list[str]:
        reply = self._call(
            self._stub.OrchestratorHeartbeat, pb.OrchestratorHeartbeatRequest,
            instance_id=instance_id, name=name, lease_s=lease_s,
        )  # fmt: skip
        return list(reply.failed_rollout_ids)

    def record_train_step(self, run_id: str, step: int, metrics: dict[str, Any]) -> None:
        metrics_json = convert.to_json("metrics", metrics)
        self._call(
            self._stub.RecordTrainStep, pb.TrainStep, run_id=run_id, step=step, metrics_json=metrics_json
        )

    def list_train_steps(self, run_id: str) -> list[TrainStep]:
        reply = self._call(self._stub.ListTrainSteps, pb.ListTrainStepsRequest, run_id=run_id)
        return [convert.train_step_from_proto(t) for t in reply.steps]

    def record_eval(
        self, run_id: str, version: int, suite: str, harness: str, metrics: dict[str, Any]
    ) -> None:
        fields = {"run_id": run_id, "version": version, "suite": suite, "harness": harness}
        self._call(self._stub.RecordEval, pb.Eval, **fields, metrics_json=convert.to_json("metrics", metrics))

    def list_evals(self, run_id: str) -> list[EvalRecord]:
        reply = self._call(self._stub.ListEvals, pb.ListEvalsRequest, run_id=run_id)
        return [convert.eval_from_proto(e) for e in reply.evals]
