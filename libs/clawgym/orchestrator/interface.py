"""The rollout service interface: what the trainer and the embedded runtime ask of an orchestrator.

`RolloutService` has two implementations with the same behaviour: `Orchestrator` (in-process,
`clawgym.orchestrator.runner`) and `OrchestratorClient` (gRPC, `clawgym.orchestrator.grpc_client`).
This module owns only the contract and its plain records; it runs nothing.

A batch asks for G samples of (task, harness) per `RolloutRequest`; each request is one group in
the store. `run_rollouts` streams one `RolloutStatus` per transition of every rollout:

    registered → running → verifying → finished          (a task outcome: reward = the verifier's)
                        ↘ failed  (failure = infrastructure kind; never rewarded)
    any state  → cancelled                                (Cancel, or the caller went away)

An infrastructure failure with attempts left ends that rollout as `failed` with `retrying=True`
and registers a fresh rollout (new id and token, same group, `attempt + 1`) in its place, so a
group completes only once every slot has a final outcome. Trainers keep `finished` rollouts only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from clawgym.errors import InvalidArgument

RolloutState = Literal["registered", "running", "verifying", "finished", "failed", "cancelled"]
STATES: tuple[str, ...] = ("registered", "running", "verifying", "finished", "failed", "cancelled")
ENDED_STATES: tuple[str, ...] = ("finished", "failed", "cancelled")


@dataclass(frozen=True)
class RolloutRequest:
    """G samples of one task through one harness: one group."""

    task_id: str
    harness: str
    samples: int = 1


@dataclass(frozen=True)
class Batch:
    """What `run_rollouts` runs. `batch_id` names it for `cancel` (generated when empty)."""

    run_id: str
    rollouts: Sequence[RolloutRequest]
    suite: str = "mini"  # a suite name (bundled or imported) or a folder path
    batch_id: str = ""
    policy_version: int = 0  # the version the batch starts under (recorded per rollout)
    proxy_url: str = ""  # where harnesses reach the proxy; empty = the orchestrator's configured one

    @property
    def n_groups(self) -> int:
        """Each request is one group."""
        return len(self.rollouts)

    def validate(self) -> None:
        """InvalidArgument naming the first bad field (names are checked against the suite later)."""
        if not self.run_id:
            raise InvalidArgument("run_id is required")
        if not self.rollouts:
            raise InvalidArgument("a batch needs at least one rollout request")
        for i, r in enumerate(self.rollouts):
            if not r.task_id or not r.harness:
                raise InvalidArgument(f"rollouts[{i}]: task_id and harness are required")
            if r.samples < 1:
                raise InvalidArgument(f"rollouts[{i}]: samples must be >= 1, got {r.samples}")
        if self.policy_version < 0:
            raise InvalidArgument("policy_version must be >= 0")


@dataclass(frozen=True)
class RolloutStatus:
    """One transition of one rollout."""

    rollout_id: str
    group_id: str
    task_id: str
    harness: str
    state: RolloutState
    reward: float | None = None  # set only when state is finished
    passed: bool | None = None
    error: str = ""  # why it failed (or the harness/verifier detail of a task failure)
    failure: str = ""  # infrastructure failure kind; "" for a task outcome
    retrying: bool = False  # failed, and a fresh rollout in the same group replaces it
    attempt: int = 1
    batch_id: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # in-process only (the store has them too)
    # hybrid tasks: where the reward came from ({"code", "rubric", "weights", …}; the store has it too)
    breakdown: dict[str, Any] | None = None

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES


class RolloutService(Protocol):
    """Runs batches of rollouts (sandbox → harness → verifier → reward → store)."""

    def run_rollouts(self, batch: Batch) -> AsyncIterator[RolloutStatus]:
        """Registers the batch, runs it and yields every status until each rollout has ended.

        Bad batches (unknown run, harness or task; an oracle on a task without a solution; a task
        the backend cannot run) raise a typed error before anything is registered. Closing the
        iterator early cancels the rollouts of the batch that are still queued or running.
        """
        ...

    async def cancel(self, batch_id: str, rollout_id: str = "") -> int:
        """Cancels a batch's queued and running rollouts (or only `rollout_id`): their sandboxes are
        destroyed and they end as `cancelled`. Returns how many; 0 when none was still running."""
        ...

    async def close(self) -> None:
        """Cancels everything still running and frees the service (or the connection)."""
        ...


async def collect(
    service: RolloutService, batch: Batch, on_status: Callable[[RolloutStatus], None] | None = None
) -> list[RolloutStatus]:
    """Runs a batch on any `RolloutService` and returns the final status of each rollout registration."""
    final: dict[str, RolloutStatus] = {}
    async for status in service.run_rollouts(batch):
        if on_status is not None:
            on_status(status)
        if status.ended:
            final[status.rollout_id] = status
    return list(final.values())
