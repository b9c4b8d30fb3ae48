"""Where the trainer's rollouts come from: the `RolloutSource` interface, batch planning, the orchestrator.

Owns what the trainer asks for (`RolloutBatch`: tasks × harnesses × G samples, drawn by the run's
harness weights) and the orchestrator-backed source (gRPC `RunRollouts`). A source only *starts*
rollouts: their results reach the trainer through the store (calls, rewards) and the bus
(`groups.ready`), see `feed.py`. The engine-backed toy source for tests and demos is `toy.py`.
"""

import logging
import threading
import uuid
from dataclasses import dataclass, field
from typing import Protocol

import grpc
import numpy as np

from clawgym.errors import ClawgymError, FailedPrecondition, InvalidArgument
from clawgym.trainer.config import TrainerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RolloutRequest:
    """One group: G samples of a task through a harness."""

    task_id: str
    harness: str
    samples: int


@dataclass(frozen=True)
class RolloutBatch:
    """What one `RolloutSource.request` starts: groups of a run, under a policy version."""

    run_id: str
    suite: str
    requests: tuple[RolloutRequest, ...]
    policy_version: int
    batch_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def n_groups(self) -> int:
        return len(self.requests)


class RolloutSource(Protocol):
    """Starts rollouts; the groups arrive through the store and its `groups.ready` stream."""

    def task_ids(self) -> list[str]:
        """The tasks this source can run (the suite's task ids)."""
        ...

    def request(self, batch: RolloutBatch) -> None:
        """Starts the batch and returns at once."""
        ...

    def pending_groups(self) -> int:
        """Groups requested whose batch has not ended yet (they may still complete)."""
        ...

    def check(self) -> None:
        """Raises the error of a batch that failed as a whole (e.g. the orchestrator is unreachable)."""
        ...

    def close(self) -> None: ...


def plan_batch(
    cfg: TrainerConfig, task_ids: list[str], run_id: str, policy_version: int, rng: np.random.Generator
) -> RolloutBatch:
    """`groups_per_step` groups: each a task drawn uniformly and a harness drawn by the mix weights."""
    if not task_ids:
        raise FailedPrecondition(
            f"no tasks to sample: suite {cfg.suite!r} lists none and trainer.tasks is empty"
        )
    weights = np.array([h.weight for h in cfg.harnesses], dtype=np.float64)
    harness = rng.choice(len(cfg.harnesses), size=cfg.groups_per_step, p=weights / weights.sum())
    tasks = rng.choice(len(task_ids), size=cfg.groups_per_step)
    requests = tuple(
        RolloutRequest(task_ids[t], cfg.harnesses[h].name, cfg.group_size)
        for t, h in zip(tasks.tolist(), harness.tolist(), strict=True)
    )
    return RolloutBatch(run_id=run_id, suite=cfg.suite, requests=requests, policy_version=policy_version)


class BatchLedger:
    """The bookkeeping every source shares, thread-safe: the groups of batches still running
    (`pending_groups`), and the errors of batches that failed as a whole (raised by `check`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, int] = {}  # batch id → its group count, while it runs
        self._errors: list[BaseException] = []

    def pending_groups(self) -> int:
        with self._lock:
            return sum(self._pending.values())

    def check(self) -> None:
        with self._lock:
            if self._errors:
                raise self._errors.pop(0)

    def _started(self, batch: RolloutBatch) -> None:
        with self._lock:
            self._pending[batch.batch_id] = batch.n_groups

    def _ended(self, batch_id: str) -> None:
        with self._lock:
            self._pending.pop(batch_id, None)

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._errors.append(error)


class OrchestratorSource(BatchLedger):
    """A `RolloutSource` over the orchestrator service: each batch is one `RunRollouts` stream, drained
    in a thread until every rollout of the batch has ended."""

    def __init__(self, target: str, *, proxy_url: str = "", suite_tasks: list[str] | None = None) -> None:
        from clawgym.generated.v1.orchestrator_pb2_grpc import OrchestratorStub

        super().__init__()
        self.target = target
        self.proxy_url = proxy_url
        self._suite_tasks = suite_tasks
        self._channel = grpc.insecure_channel(target)
        self._stub = OrchestratorStub(self._channel)

    def task_ids(self) -> list[str]:
        if self._suite_tasks is None:
            raise FailedPrecondition("the orchestrator source lists no tasks: set trainer.tasks")
        return list(self._suite_tasks)

    def request(self, batch: RolloutBatch) -> None:
        from clawgym.generated.v1 import orchestrator_pb2 as pb

        message = pb.RunRolloutsRequest(
            run_id=batch.run_id,
            batch_id=batch.batch_id,
            suite=batch.suite,
            rollouts=[
                pb.RolloutRequest(task_id=r.task_id, harness=r.harness, samples=r.samples)
                for r in batch.requests
            ],
            policy_version=batch.policy_version,
            proxy_url=self.proxy_url,
        )
        self._started(batch)
        threading.Thread(
            target=self._drain, args=(message,), name=f"rollouts-{batch.batch_id[:8]}", daemon=True
        ).start()

    def _drain(self, message) -> None:
        try:
            for status in self._stub.RunRollouts(message):
                log.debug("rollout %s of group %s: %s", status.rollout_id, status.group_id, status.state)
        except grpc.RpcError as e:
            code = e.code().name if e.code() is not None else "UNKNOWN"  # type: ignore[attr-defined]
            error = ClawgymError(
                f"orchestrator RunRollouts of batch {message.batch_id} failed: {code} {e.details()}"
            )  # type: ignore[attr-defined]
            log.error("%s", error)
            self._failed(error)
        finally:
            self._ended(message.batch_id)

    def close(self) -> None:
        self._channel.close()


def suite_task_ids(suite: str, split: str | None = None) -> list[str]:
    """Task ids of a suite the trainer can read locally (bundled `mini`, imported, or a folder)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    try:
        return [t.id for t in load_tasks(resolve_suite(suite), split=split)]
    except ClawgymError as e:
        raise InvalidArgument(f"trainer.suite: {e}") from None
