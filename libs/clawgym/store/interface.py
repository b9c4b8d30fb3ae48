"""The trajectory store interface, implemented in-process (SQLAlchemy) and by the gRPC client.

Contract: a call is durable when `record_call` returns; a rejected request writes nothing.
Errors are `clawgym.errors` types: InvalidArgument, NotFound, AlreadyExists, and FailedPrecondition
for a request the rollout's state forbids (a call or a second finish after it ended).
"""

from collections.abc import Iterator
from typing import Any, Protocol

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


class TrajectoryStore(Protocol):
    def warm_up(self) -> None:
        """Opens now what the first requests would open on their own time (connections); best
        effort: a store not reachable yet is left to them, and to their errors."""
        ...

    def close(self) -> None:
        """Releases its connections (the database pool, or the service's channel) and its bus."""
        ...

    # --- runs ---
    def create_run(self, name: str, config: dict[str, Any] | None = None) -> Run: ...
    def get_run(self, run_id: str) -> Run: ...
    def set_run_status(self, run_id: str, status: str) -> Run: ...
    def list_runs(self) -> list[Run]:
        """Every run, the newest first."""
        ...

    # --- rollouts ---
    def register_rollouts(self, run_id: str, specs: list[RolloutSpec]) -> list[RegisteredRollout]: ...
    def resolve_token(self, token: str) -> Rollout: ...
    def get_rollout(self, rollout_id: str) -> Rollout: ...
    def start_rollout(self, rollout_id: str, sandbox: str = "") -> Rollout: ...
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
        """Ends a rollout; `breakdown` says where a hybrid reward came from (None: code only);
        `verifier_output` and `harness_stderr` are the tails a person reads to see why it failed."""
        ...

    # --- judgments (hybrid tasks' rubric scorings, one per rollout) ---
    def record_judgment(self, judgment: Judgment) -> str:
        """Records the judge's prompt, answer and score beside the rollout; AlreadyExists for a second."""
        ...

    def get_judgment(self, rollout_id: str) -> Judgment:
        """The rollout's judgment; NotFound if it has none (a code-only or unjudged reward)."""
        ...

    def list_rollouts(self, run_id: str, group_id: str = "") -> list[Rollout]:
        """The run's rollouts (only group `group_id`'s if given), by group then place in the group."""
        ...

    def orchestrator_heartbeat(self, instance_id: str, name: str, lease_s: float) -> list[str]:
        """Renews orchestrator `instance_id`'s lease; fails the unended rollouts of lost instances (the
        same `name`'s predecessors, or any whose lease ran out); returns their ids."""
        ...

    # --- calls ---
    def record_call(self, call: Call) -> str: ...
    def list_calls(self, rollout_id: str) -> list[Call]: ...

    # --- groups (the trainer's reads) ---
    def get_group(self, group_id: str) -> Group: ...
    def list_groups(self, run_id: str) -> list[GroupSummary]:
        """The run's groups without their calls, in the order they were created."""
        ...

    def watch_groups(
        self, run_id: str, after_id: str = "", timeout_s: float | None = None
    ) -> Iterator[GroupReady]: ...

    # --- checkpoints, steps, evals ---
    def record_checkpoint(self, checkpoint: Checkpoint) -> Checkpoint:
        """Registers a checkpoint and, in the same transaction, marks `checkpoint.group_ids` consumed;
        FailedPrecondition (nothing written) if one is not a complete, unconsumed group of the run."""
        ...

    def list_checkpoints(self, run_id: str) -> list[Checkpoint]: ...
    def list_unconsumed_groups(self, run_id: str) -> list[str]:
        """The run's complete groups that no checkpoint consumed yet (the trainer's resume sweep)."""
        ...

    def open_group_versions(self, run_id: str) -> dict[str, int]:
        """Group id → the oldest policy version that generated a token of it so far, for the run's
        groups still open (a rollout not ended) that have one: where the trainer's staleness bound
        counts from while a group rolls out."""
        ...

    def record_train_step(self, run_id: str, step: int, metrics: dict[str, Any]) -> None: ...
    def list_train_steps(self, run_id: str) -> list[TrainStep]:
        """The run's optimizer steps with their metrics, in step order."""
        ...

    def record_eval(
        self, run_id: str, version: int, suite: str, harness: str, metrics: dict[str, Any]
    ) -> None: ...
    def list_evals(self, run_id: str) -> list[EvalRecord]:
        """The run's recorded evaluations in the order they were recorded (what a resumed run reports)."""
        ...
