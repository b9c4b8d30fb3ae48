"""Store records ⇄ `clawgym.generated.v1.store_pb2` messages: the one place that knows both shapes.

Owns the field mapping (dicts travel as `*_json` strings, token arrays as packed little-endian
`bytes`, optional reward/passed as proto3 `optional`); not validation beyond what decoding
needs: malformed JSON or array bytes become `InvalidArgument`, and the store checks the rest.
"""

import json
from collections.abc import Callable
from typing import Any, TypeVar

from clawgym import arrays
from clawgym.errors import InvalidArgument
from clawgym.generated.v1 import store_pb2 as pb
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
    RolloutWithCalls,
    Run,
    TrainStep,
)

T = TypeVar("T")


def to_json(field: str, value: dict[str, Any] | None) -> str:
    try:
        return json.dumps(value or {}, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{field} is not JSON-serialisable: {e}") from e


def from_json(field: str, text: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidArgument(f"{field} is not valid JSON: {e}") from e
    if not isinstance(value, dict):
        raise InvalidArgument(f"{field} must hold a JSON object, got {type(value).__name__}")
    return value


def optional_to_json(field: str, value: dict[str, Any] | None) -> str:
    """"" for None (e.g. no reward breakdown), else the JSON object."""
    return "" if value is None else to_json(field, value)


def optional_from_json(field: str, text: str) -> dict[str, Any] | None:
    return from_json(field, text) if text else None


def list_to_json(field: str, value: list[Any]) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{field} is not JSON-serialisable: {e}") from e


def list_from_json(field: str, text: str) -> list[Any]:
    try:
        value = json.loads(text) if text else []
    except ValueError as e:
        raise InvalidArgument(f"{field} is not valid JSON: {e}") from e
    if not isinstance(value, list):
        raise InvalidArgument(f"{field} must hold a JSON list, got {type(value).__name__}")
    return value


def encode(what: str, build: Callable[[], T]) -> T:
    """Builds a message; values protobuf cannot hold (a negative seq, a str for an int) are InvalidArgument."""
    try:
        return build()
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"{what}: {e}") from e


# --- runs ---


def run_to_proto(run: Run) -> pb.Run:
    return pb.Run(
        id=run.id,
        name=run.name,
        config_json=to_json("config", run.config),
        status=run.status,
        created_at=run.created_at,
    )


def run_from_proto(m: pb.Run) -> Run:
    return Run(
        id=m.id,
        name=m.name,
        config=from_json("config_json", m.config_json),
        status=m.status,
        created_at=m.created_at,
    )


# --- rollouts ---


def spec_to_proto(spec: RolloutSpec) -> pb.RolloutSpec:
    return encode(
        "rollout spec",
        lambda: pb.RolloutSpec(
            group_id=spec.group_id,
            task_id=spec.task_id,
            harness=spec.harness,
            policy_version_start=spec.policy_version_start,
            orchestrator_id=spec.orchestrator_id,
        ),
    )


def spec_from_proto(m: pb.RolloutSpec) -> RolloutSpec:
    return RolloutSpec(
        group_id=m.group_id, task_id=m.task_id, harness=m.harness, policy_version_start=m.policy_version_start,
        orchestrator_id=m.orchestrator_id,
    )  # fmt: skip


def registered_to_proto(r: RegisteredRollout) -> pb.RegisteredRollout:
    return pb.RegisteredRollout(rollout_id=r.rollout_id, token=r.token)


def registered_from_proto(m: pb.RegisteredRollout) -> RegisteredRollout:
    return RegisteredRollout(rollout_id=m.rollout_id, token=m.token)


def rollout_to_proto(r: Rollout) -> pb.Rollout:
    m = pb.Rollout(
        id=r.id,
        run_id=r.run_id,
        group_id=r.group_id,
        task_id=r.task_id,
        harness=r.harness,
        status=r.status,
        error=r.error,
        policy_version_start=r.policy_version_start,
        sandbox=r.sandbox,
        timings_json=to_json("timings", r.timings),
        created_at=r.created_at,
        reward_breakdown_json=optional_to_json("reward_breakdown", r.reward_breakdown),
        verifier_output=r.verifier_output,
        harness_stderr=r.harness_stderr,
    )
    if r.reward is not None:
        m.reward = r.reward
    if r.passed is not None:
        m.passed = r.passed
    return m


def rollout_from_proto(m: pb.Rollout) -> Rollout:
    return Rollout(
        id=m.id,
        run_id=m.run_id,
        group_id=m.group_id,
        task_id=m.task_id,
        harness=m.harness,
        status=m.status,
        reward=m.reward if m.HasField("reward") else None,
        passed=m.passed if m.HasField("passed") else None,
        error=m.error,
        policy_version_start=m.policy_version_start,
        sandbox=m.sandbox,
        timings=from_json("timings_json", m.timings_json),
        created_at=m.created_at,
        reward_breakdown=optional_from_json("reward_breakdown_json", m.reward_breakdown_json),
        verifier_output=m.verifier_output,
        harness_stderr=m.harness_stderr,
    )


# --- judgments ---


def judgment_to_proto(j: Judgment) -> pb.Judgment:
    m = pb.Judgment(
        rollout_id=j.rollout_id,
        model=j.model,
        base_url=j.base_url,
        prompt_json=list_to_json("prompt", j.prompt),
        raw_answer=j.raw_answer,
        rule_scores_json=to_json("rule_scores", j.rule_scores),
        error=j.error,
        latency_s=j.latency_s,
        attempts=j.attempts,
        id=j.id,
        created_at=j.created_at,
    )
    if j.score is not None:
        m.score = j.score
    if j.code_score is not None:
        m.code_score = j.code_score
    return m


def judgment_from_proto(m: pb.Judgment) -> Judgment:
    return Judgment(
        rollout_id=m.rollout_id,
        model=m.model,
        base_url=m.base_url,
        prompt=list_from_json("prompt_json", m.prompt_json),
        raw_answer=m.raw_answer,
        score=m.score if m.HasField("score") else None,
        rule_scores=from_json("rule_scores_json", m.rule_scores_json),  # the store validates the values
        error=m.error,
        latency_s=m.latency_s,
        attempts=m.attempts,
        code_score=m.code_score if m.HasField("code_score") else None,
        id=m.id,
        created_at=m.created_at,
    )


# --- calls ---


def call_to_proto(c: Call) -> pb.Call:
    """Packs the arrays (wrong dtype or shape → InvalidArgument, before anything is sent)."""
    try:
        packed = {
            "prompt_ids": arrays.pack_ids(c.prompt_ids),
            "output_ids": arrays.pack_ids(c.output_ids),
            "output_logprobs": arrays.pack_logprobs(c.output_logprobs),
            "output_versions": arrays.pack_ids(c.output_versions),
        }
    except (ValueError, TypeError) as e:
        raise InvalidArgument(f"call {c.rollout_id!r}#{c.seq!r}: {e}") from e
    return encode(
        f"call {c.rollout_id!r}#{c.seq!r}",
        lambda: pb.Call(
            id=c.id,
            rollout_id=c.rollout_id,
            seq=c.seq,
            protocol=c.protocol,
            request_json=to_json("request", c.request),
            response_json=to_json("response", c.response),
            policy_version=c.policy_version,
            finish_reason=c.finish_reason,
            latency_s=c.latency_s,
            headers_json=to_json("headers", c.headers),
            created_at=c.created_at,
            temperature=c.temperature,
            **packed,
        ),
    )


def call_from_proto(m: pb.Call) -> Call:
    """Unpacks the arrays as read-only views of the message's bytes (no copy)."""
    try:
        prompt_ids = arrays.unpack_ids(m.prompt_ids)
        output_ids = arrays.unpack_ids(m.output_ids)
        output_logprobs = arrays.unpack_logprobs(m.output_logprobs)
        output_versions = arrays.unpack_ids(m.output_versions)
    except arrays.ArrayError as e:
        raise InvalidArgument(f"call {m.rollout_id!r}#{m.seq}: {e}") from e
    return Call(
        rollout_id=m.rollout_id,
        seq=m.seq,
        protocol=m.protocol,
        request=from_json("request_json", m.request_json),
        response=from_json("response_json", m.response_json),
        prompt_ids=prompt_ids,
        output_ids=output_ids,
        output_logprobs=output_logprobs,
        output_versions=output_versions,
        policy_version=m.policy_version,
        finish_reason=m.finish_reason,
        latency_s=m.latency_s,
        headers={k: str(v) for k, v in from_json("headers_json", m.headers_json).items()},
        id=m.id,
        created_at=m.created_at,
        temperature=m.temperature if m.HasField("temperature") else None,
    )


# --- groups ---


def group_to_proto(g: Group) -> pb.Group:
    return pb.Group(
        id=g.id,
        run_id=g.run_id,
        rollouts=[
            pb.RolloutWithCalls(
                rollout=rollout_to_proto(r.rollout), calls=[call_to_proto(c) for c in r.calls]
            )
            for r in g.rollouts
        ],
    )


def group_from_proto(m: pb.Group) -> Group:
    return Group(
        id=m.id,
        run_id=m.run_id,
        rollouts=[
            RolloutWithCalls(rollout_from_proto(r.rollout), [call_from_proto(c) for c in r.calls])
            for r in m.rollouts
        ],
    )


def group_summary_to_proto(g: GroupSummary) -> pb.GroupSummary:
    return pb.GroupSummary(
        id=g.id,
        run_id=g.run_id,
        size=g.size,
        ended=g.ended,
        ready_at=g.ready_at,  # None leaves the proto3 optional unset
        consumed_version=g.consumed_version,
        created_at=g.created_at,
    )


def group_summary_from_proto(m: pb.GroupSummary) -> GroupSummary:
    return GroupSummary(
        id=m.id,
        run_id=m.run_id,
        size=m.size,
        ended=m.ended,
        ready_at=m.ready_at if m.HasField("ready_at") else None,
        consumed_version=m.consumed_version if m.HasField("consumed_version") else None,
        created_at=m.created_at,
    )


def group_ready_to_proto(g: GroupReady) -> pb.GroupReady:
    return pb.GroupReady(group_id=g.group_id, run_id=g.run_id, message_id=g.message_id)


def group_ready_from_proto(m: pb.GroupReady) -> GroupReady:
    return GroupReady(group_id=m.group_id, run_id=m.run_id, message_id=m.message_id)


# --- checkpoints ---


def checkpoint_to_proto(c: Checkpoint) -> pb.Checkpoint:
    return encode(
        f"checkpoint {c.version!r}",
        lambda: pb.Checkpoint(
            run_id=c.run_id,
            version=c.version,
            step=c.step,
            uri=c.uri,
            metrics_json=to_json("metrics", c.metrics),
            created_at=c.created_at,
            group_ids=list(c.group_ids),
        ),
    )


def checkpoint_from_proto(m: pb.Checkpoint) -> Checkpoint:
    return Checkpoint(
        run_id=m.run_id,
        version=m.version,
        step=m.step,
        uri=m.uri,
        metrics=from_json("metrics_json", m.metrics_json),
        created_at=m.created_at,
        group_ids=tuple(m.group_ids),
    )


def eval_to_proto(e: EvalRecord) -> pb.Eval:
    return pb.Eval(
        run_id=e.run_id, version=e.version, suite=e.suite, harness=e.harness,
        metrics_json=to_json("metrics", e.metrics),
    )  # fmt: skip


def eval_from_proto(m: pb.Eval) -> EvalRecord:
    return EvalRecord(m.run_id, m.version, m.suite, m.harness, from_json("metrics_json", m.metrics_json))


# --- train steps ---


def train_step_to_proto(t: TrainStep) -> pb.TrainStep:
    return pb.TrainStep(
        run_id=t.run_id, step=t.step, metrics_json=to_json("metrics", t.metrics), created_at=t.created_at
    )


def train_step_from_proto(m: pb.TrainStep) -> TrainStep:
    return TrainStep(
        run_id=m.run_id, step=m.step, metrics=from_json("metrics_json", m.metrics_json), created_at=m.created_at
    )
