"""SQL rows → store records: the read side of `clawgym.store.sql`.

Owns unpacking columns into `clawgym.records` (packed bytes → read-only numpy views);
not queries, and not validation of input (`clawgym.store.validate`).
"""

from clawgym import arrays
from clawgym.records import Call, Checkpoint, GroupSummary, Judgment, Rollout, Run, TrainStep
from clawgym.store.models import (
    CallRow,
    CheckpointRow,
    GroupRow,
    JudgmentRow,
    RolloutRow,
    RunRow,
    TrainStepRow,
)


def run_record(row: RunRow) -> Run:
    return Run(
        id=row.id, name=row.name, config=dict(row.config), status=row.status, created_at=row.created_at
    )


def rollout_record(row: RolloutRow) -> Rollout:
    return Rollout(
        id=row.id,
        run_id=row.run_id,
        group_id=row.group_id,
        task_id=row.task_id,
        harness=row.harness,
        status=row.status,
        reward=row.reward,
        passed=row.passed,
        error=row.error,
        policy_version_start=row.policy_version_start,
        sandbox=row.sandbox,
        timings=dict(row.timings),
        created_at=row.created_at,
        reward_breakdown=None if row.reward_breakdown is None else dict(row.reward_breakdown),
        verifier_output=row.verifier_output,
        harness_stderr=row.harness_stderr,
    )


def judgment_record(row: JudgmentRow) -> Judgment:
    return Judgment(
        rollout_id=row.rollout_id,
        model=row.model,
        base_url=row.base_url,
        prompt=list(row.prompt),
        raw_answer=row.raw_answer,
        score=row.score,
        rule_scores={k: float(v) for k, v in row.rule_scores.items()},
        error=row.error,
        latency_s=row.latency_s,
        attempts=row.attempts,
        code_score=row.code_score,
        id=row.id,
        created_at=row.created_at,
    )


def call_record(row: CallRow) -> Call:
    return Call(
        rollout_id=row.rollout_id,
        seq=row.seq,
        protocol=row.protocol,
        request=row.request,
        response=row.response,
        prompt_ids=arrays.unpack_ids(bytes(row.prompt_ids)),
        output_ids=arrays.unpack_ids(bytes(row.output_ids)),
        output_logprobs=arrays.unpack_logprobs(bytes(row.output_logprobs)),
        output_versions=arrays.unpack_ids(bytes(row.output_versions)),
        policy_version=row.policy_version,
        finish_reason=row.finish_reason,
        latency_s=row.latency_s,
        headers=dict(row.headers),
        id=row.id,
        created_at=row.created_at,
        temperature=row.temperature,
    )


def checkpoint_record(row: CheckpointRow, group_ids: tuple[str, ...] = ()) -> Checkpoint:
    return Checkpoint(
        run_id=row.run_id,
        version=row.version,
        step=row.step,
        uri=row.uri,
        metrics=dict(row.metrics),
        created_at=row.created_at,
        group_ids=group_ids,
    )


def group_summary(row: GroupRow) -> GroupSummary:
    return GroupSummary(
        id=row.id,
        run_id=row.run_id,
        size=row.size,
        ended=row.ended,
        ready_at=row.ready_at,
        consumed_version=row.consumed_version,
        created_at=row.created_at,
    )


def train_step_record(row: TrainStepRow) -> TrainStep:
    return TrainStep(run_id=row.run_id, step=row.step, metrics=dict(row.metrics), created_at=row.created_at)
