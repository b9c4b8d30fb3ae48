"""Where the trainer's rollouts come from: the `RolloutSource` interface, batch planning, and the
one source over the `RolloutService` interface (in-process orchestrator or its gRPC client).

Owns what the trainer asks for (a `Batch` of the orchestrator's contract: tasks × harnesses × G
samples, drawn by the run's harness weights) and draining each batch's status stream. A source only
*starts* rollouts: their results reach the trainer through the store (calls, rewards) and the bus
(`groups.ready`), see `feed.py`. The engine-backed toy source for tests and demos is `toy.py`.
"""

import asyncio
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

import numpy as np

from clawgym.errors import ClawgymError, FailedPrecondition, InvalidArgument, Unavailable
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutService, RolloutStatus
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.curriculum import TaskSampler
from clawgym.trainer.loop_thread import LoopThread

log = logging.getLogger(__name__)

UNAVAILABLE_BACKOFF_S = 2.0  # pause before the next batch once the orchestrator was unreachable


class RolloutSource(Protocol):
    """Starts rollouts; the groups arrive through the store and its `groups.ready` stream."""

    def task_ids(self) -> list[str]:
        """The tasks this source can run (the suite's task ids)."""
        ...

    def request(self, batch: Batch) -> None:
        """Starts the batch and returns at once."""
        ...

    def pending_groups(self) -> int:
        """Groups requested whose batch has not ended yet (they may still complete)."""
        ...

    def check(self) -> None:
        """Raises the error of a batch that failed as a whole (e.g. the orchestrator is unreachable)."""
        ...

    def cancel(self) -> None:
        """Cancels the batches still running (their rollouts end as cancelled; nothing trains them)."""
        ...

    def close(self) -> None: ...


def plan_batch(
    cfg: TrainerConfig,
    sampler: TaskSampler,
    run_id: str,
    policy_version: int,
    rng: np.random.Generator,
    n_groups: int | None = None,
) -> Batch:
    """`n_groups` (default `groups_per_step`) groups: each a task drawn by `sampler` and a harness
    drawn by the mix weights."""
    n = cfg.groups_per_step if n_groups is None else n_groups
    weights = np.array([h.weight for h in cfg.harnesses], dtype=np.float64)
    harness = rng.choice(len(cfg.harnesses), size=n, p=weights / weights.sum())
    tasks = sampler.draw(n, rng)
    requests = tuple(
        RolloutRequest(task, cfg.harnesses[h].name, cfg.group_size)
        for task, h in zip(tasks, harness.tolist(), strict=True)
    )
    return Batch(
        run_id=run_id,
        rollouts=requests,
        suite=cfg.suite,
        batch_id=uuid.uuid4().hex,
        policy_version=policy_version,
    )


def make_sampler(cfg: TrainerConfig, task_ids: list[str]) -> TaskSampler:
    """The run's task sampler; `signal` reads the suite's families where the suite is local."""
    if not task_ids:
        raise FailedPrecondition(
            f"no tasks to sample: suite {cfg.suite!r} lists none and trainer.tasks is empty"
        )
    families = suite_task_families(cfg.suite) if cfg.sampling.mode == "signal" else {}
    return TaskSampler(list(task_ids), families, cfg.group_size, cfg.sampling)


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

    def _started(self, batch: Batch) -> None:
        with self._lock:
            self._pending[batch.batch_id] = batch.n_groups

    def _ended(self, batch_id: str) -> None:
        with self._lock:
            self._pending.pop(batch_id, None)

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._errors.append(error)


class RolloutServiceSource(BatchLedger):
    """A `RolloutSource` whose batches a `RolloutService` runs, on `runner`'s event loop: each batch's
    status stream is drained until every rollout of the batch has ended."""

    def __init__(
        self,
        service: RolloutService,
        runner: LoopThread,
        task_ids: list[str],
        *,
        proxy_url: str = "",
        on_status: Callable[[RolloutStatus], None] | None = None,
        close_service: bool = False,
    ) -> None:
        super().__init__()
        self.service, self.runner = service, runner
        self._task_ids = list(task_ids)
        self.proxy_url = proxy_url
        self.on_status = on_status
        self.close_service = close_service
        self._jobs: dict[str, asyncio.Future] = {}
        self._retry_at = 0.0  # no batch starts before (monotonic): set when the orchestrator was unavailable

    def task_ids(self) -> list[str]:
        return list(self._task_ids)

    def request(self, batch: Batch) -> None:
        if self.proxy_url and not batch.proxy_url:
            batch = dataclasses.replace(batch, proxy_url=self.proxy_url)
        self._started(batch)
        self._jobs[batch.batch_id] = self.runner.submit(self._drain(batch))

    async def _drain(self, batch: Batch) -> None:
        try:
            # the orchestrator was unreachable a moment ago (restarting): don't hammer it
            await asyncio.sleep(max(0.0, self._retry_at - time.monotonic()))
            async for status in self.service.run_rollouts(batch):
                if self.on_status is not None:
                    self.on_status(status)
                if status.state == "failed" and not status.retrying:
                    log.warning("rollout %s (%s) failed: %s %s", status.rollout_id, status.harness,
                                status.failure, status.error[:300])  # fmt: skip
        except Unavailable as e:
            # The orchestrator went away (a pod replaced, a restart): not the run's end. Its successor
            # fails the rollouts it had registered, so their groups still complete; the groups it never
            # registered stop counting as pending and the trainer asks for new ones. One that stays away
            # ends the run through trainer.rollout_timeout_s.
            log.warning("batch %s cut short, the orchestrator is unavailable: %s", batch.batch_id, e)
            self._retry_at = time.monotonic() + UNAVAILABLE_BACKOFF_S
        except ClawgymError as e:
            log.error("batch %s failed: %s", batch.batch_id, e)
            self._failed(e)
        except Exception as e:  # surfaced to the trainer by check(), typed
            log.exception("batch %s failed", batch.batch_id)
            self._failed(ClawgymError(f"rollout batch {batch.batch_id} failed: {e}"))
        finally:
            self._ended(batch.batch_id)
            self._jobs.pop(batch.batch_id, None)

    def cancel(self) -> None:
        for job in list(self._jobs.values()):
            job.cancel()

    def close(self) -> None:
        """Cancels the batches still running (their rollouts end as cancelled); closes the service
        (its client, or the in-process orchestrator) when this source opened it."""
        self.cancel()
        if self.close_service:
            self.runner.run(self.service.close(), timeout_s=60)


def train_task_ids(suite: str) -> list[str]:
    """The suite's train split, or every task when it has no split named train."""
    ids = suite_task_ids(suite, split="train") or suite_task_ids(suite)
    if not ids:
        raise InvalidArgument(f"trainer.suite: {suite!r} holds no tasks")
    return ids


def suite_task_ids(suite: str, split: str | None = None) -> list[str]:
    """Task ids of a suite the trainer can read locally (bundled `mini`, imported, or a folder)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    try:
        return [t.id for t in load_tasks(resolve_suite(suite), split=split)]
    except ClawgymError as e:
        raise InvalidArgument(f"trainer.suite: {e}") from None


def suite_task_families(suite: str) -> dict[str, str]:
    """Task id -> its metadata's `family`, for a suite the trainer can read locally; {} where it cannot
    (the sampler then treats each task as its own family)."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    try:
        tasks = load_tasks(resolve_suite(suite))
    except ClawgymError as e:
        log.warning(
            "trainer.sampling: the families of suite %r are unknown (%s): each task is its own", suite, e
        )
        return {}
    return {t.id: str(t.metadata["family"]) for t in tasks if t.metadata.get("family")}
