"""`ServiceSource`: the trainer's `RolloutSource` over any `RolloutService` (in-process orchestrator or gRPC).

Owns turning the trainer's `RolloutBatch` into an orchestrator `Batch` and draining its status
stream on the runtime's event loop until every rollout has ended. Like every source it only
*starts* rollouts: their calls and rewards reach the trainer through the store and the
`groups.ready` stream. (`clawgym.trainer.source.OrchestratorSource` does the same over a raw
gRPC stub; this one takes the `RolloutService` interface, so the embedded runtime and the service
mode share one code path.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from clawgym.errors import ClawgymError
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutService, RolloutStatus
from clawgym.trainer.loop_thread import LoopThread
from clawgym.trainer.source import BatchLedger, RolloutBatch

log = logging.getLogger(__name__)


class ServiceSource(BatchLedger):
    """A `RolloutSource` whose batches a `RolloutService` runs, on `runner`'s event loop."""

    def __init__(
        self,
        service: RolloutService,
        runner: LoopThread,
        task_ids: list[str],
        *,
        proxy_url: str = "",
        on_status: Callable[[RolloutStatus], None] | None = None,
    ) -> None:
        super().__init__()
        self.service, self.runner = service, runner
        self._task_ids = list(task_ids)
        self.proxy_url = proxy_url
        self.on_status = on_status
        self._jobs: dict[str, asyncio.Future] = {}

    def task_ids(self) -> list[str]:
        return list(self._task_ids)

    def request(self, batch: RolloutBatch) -> None:
        self._started(batch)
        self._jobs[batch.batch_id] = self.runner.submit(self._drain(batch))

    async def _drain(self, batch: RolloutBatch) -> None:
        request = Batch(
            run_id=batch.run_id,
            rollouts=[RolloutRequest(r.task_id, r.harness, r.samples) for r in batch.requests],
            suite=batch.suite,
            batch_id=batch.batch_id,
            policy_version=batch.policy_version,
            proxy_url=self.proxy_url,
        )
        try:
            async for status in self.service.run_rollouts(request):
                if self.on_status is not None:
                    self.on_status(status)
                if status.state == "failed" and not status.retrying:
                    log.warning("rollout %s (%s) failed: %s %s", status.rollout_id, status.harness,
                                status.failure, status.error[:300])  # fmt: skip
        except ClawgymError as e:
            log.error("batch %s failed: %s", batch.batch_id, e)
            self._failed(e)
        except Exception as e:  # surfaced to the trainer by check(), typed
            log.exception("batch %s failed", batch.batch_id)
            self._failed(ClawgymError(f"rollout batch {batch.batch_id} failed: {e}"))
        finally:
            self._ended(batch.batch_id)
            self._jobs.pop(batch.batch_id, None)

    def close(self) -> None:
        """Cancels the batches still running (their rollouts end as cancelled); not the service."""
        for job in list(self._jobs.values()):
            job.cancel()
