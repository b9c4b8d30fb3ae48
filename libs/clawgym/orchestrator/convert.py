"""Orchestrator records ↔ protobuf messages (`proto/clawgym/v1/orchestrator.proto`); pure functions."""

from __future__ import annotations

from clawgym.generated.v1 import orchestrator_pb2 as pb
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutStatus
from clawgym.store.convert import optional_from_json, optional_to_json


def batch_to_proto(batch: Batch) -> pb.RunRolloutsRequest:
    return pb.RunRolloutsRequest(
        run_id=batch.run_id,
        batch_id=batch.batch_id,
        suite=batch.suite,
        rollouts=[
            pb.RolloutRequest(task_id=r.task_id, harness=r.harness, samples=r.samples) for r in batch.rollouts
        ],
        policy_version=batch.policy_version,
        proxy_url=batch.proxy_url,
    )


def batch_from_proto(msg: pb.RunRolloutsRequest) -> Batch:
    """The batch a request describes; `samples` 0 (unset) means one sample."""
    return Batch(
        run_id=msg.run_id,
        rollouts=[RolloutRequest(r.task_id, r.harness, r.samples or 1) for r in msg.rollouts],
        suite=msg.suite or "mini",
        batch_id=msg.batch_id,
        policy_version=msg.policy_version,
        proxy_url=msg.proxy_url,
    )


def status_to_proto(status: RolloutStatus) -> pb.RolloutStatus:
    msg = pb.RolloutStatus(
        rollout_id=status.rollout_id,
        group_id=status.group_id,
        task_id=status.task_id,
        harness=status.harness,
        state=status.state,
        error=status.error,
        failure=status.failure,
        retrying=status.retrying,
        attempt=status.attempt,
        batch_id=status.batch_id,
        reward_breakdown_json=optional_to_json("breakdown", status.breakdown),
    )
    if status.reward is not None:
        msg.reward = status.reward
    if status.passed is not None:
        msg.passed = status.passed
    return msg


def status_from_proto(msg: pb.RolloutStatus) -> RolloutStatus:
    return RolloutStatus(
        rollout_id=msg.rollout_id,
        group_id=msg.group_id,
        task_id=msg.task_id,
        harness=msg.harness,
        state=msg.state,  # type: ignore[arg-type]
        reward=msg.reward if msg.HasField("reward") else None,
        passed=msg.passed if msg.HasField("passed") else None,
        error=msg.error,
        failure=msg.failure,
        retrying=msg.retrying,
        attempt=msg.attempt,
        batch_id=msg.batch_id,
        breakdown=optional_from_json("reward_breakdown_json", msg.reward_breakdown_json),
    )
