"""`Orchestrator`: the in-process `RolloutService` — register, run under limits, record, retry, cancel.

Per batch: every rollout is registered in the store at once (tokens), then each requested slot
runs as its own asyncio task: wait for a harness slot and a global slot (in that order, so waiting
for a busy harness never holds a global slot), run one attempt (`attempt.AttemptRunner`), record
the outcome. An infrastructure failure with attempts left registers a fresh rollout in the same
group *before* the failed one ends, so the group cannot complete without it. Store transitions
and sandbox teardown are never interrupted halfway by a cancel: a cancel waits for them.

Leases: each orchestrator instance (one per process start) heartbeats in the store and its
rollouts name it. At start, and at every heartbeat, the store fails the unended rollouts of lost
instances (a predecessor of the same name, or any whose lease ran out) as infrastructure failures,
never rewarded, so their groups complete: a killed orchestrator's rollouts do not stay
'running' forever. The name is the backend's `lease_name`: a configured `sandbox.owner`, which one
process holds at a time (a successor takes over at once), else the host name with the process's
own part (processes on one host never take each other's live rollouts; a dead one's are taken
once its lease runs out). Sandboxes are reaped by liveness instead (`sandbox.owners`, `start`).

Not here: the attempt itself (`attempt`), which tasks and harnesses exist (`catalog`), failure
kinds (`failures`), the gRPC shell (`clawgym_services.orchestrator`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from clawgym.errors import AlreadyExists, ClawgymError, FailedPrecondition
from clawgym.harnesses.base import HarnessAdapter
from clawgym.harnesses.registry import ALIASES
from clawgym.judge import evidence as judge_evidence
from clawgym.judge.client import Judge, JudgeOutcome
from clawgym.orchestrator import failures
from clawgym.orchestrator.attempt import AttemptPlan, AttemptResult, AttemptRunner, ProxyProbe
from clawgym.orchestrator.catalog import Catalog
from clawgym.orchestrator.config import OrchestratorConfig
from clawgym.orchestrator.failures import InfraFailure, JudgeFailed, classify
from clawgym.orchestrator.interface import Batch, RolloutStatus
from clawgym.orchestrator.lease import keep_lease
from clawgym.orchestrator.metrics import OrchestratorMetrics
from clawgym.records import Judgment, RolloutSpec
from clawgym.sandbox.interface import HARNESS_LABEL, SandboxBackend, check_labels, label_value
from clawgym.store.interface import TrajectoryStore
from clawgym.tasks.model import Task

log = logging.getLogger(__name__)
T = TypeVar("T")

ROLLOUT_LABEL = "clawgym.dev/rollout"
RUN_LABEL = "clawgym.dev/run"
BATCH_LABEL = "clawgym.dev/batch"
MAX_ERROR_CHARS = 4000


async def uninterrupted(work: Awaitable[T]) -> T:
    """Awaits `work` to its end even if the caller is cancelled meanwhile; then re-raises the cancel."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await task
        raise


def _clean(text: str) -> str:
    return text.replace("\x00", "")[-MAX_ERROR_CHARS:]


@dataclass
class _Slot:
    """One requested rollout: its current registration and how it is doing."""

    task: Task
    adapter: HarnessAdapter
    group_id: str
    rollout_id: str
    token: str
    attempt: int = 1
    ended: bool = False
    job: asyncio.Task | None = None


@dataclass
class _BatchState:
    id: str
    batch: Batch
    proxy_url: str
    slots: list[_Slot] = field(default_factory=list)
    statuses: asyncio.Queue[RolloutStatus] = field(default_factory=asyncio.Queue)

    def emit(self, slot: _Slot, state: str, **fields: Any) -> None:
        self.statuses.put_nowait(
            RolloutStatus(
                rollout_id=slot.rollout_id,
                group_id=slot.group_id,
                task_id=slot.task.id,
                harness=slot.adapter.name,
                state=state,  # type: ignore[arg-type]
                attempt=slot.attempt,
                batch_id=self.id,
                **fields,
            )
        )


class Orchestrator:
    """Runs batches on one sandbox backend, recording into one store. Call `start()` first.

    Limits are shared by every batch of this orchestrator; it belongs to the event loop it first
    runs on (its semaphores do). A configured sandbox owner names one live orchestrator at a time
    (`lease_name`); sandboxes are safe either way: `start()` reaps only what gone instances left.
    """

    def __init__(
        self,
        cfg: OrchestratorConfig,
        store: TrajectoryStore,
        backend: SandboxBackend,
        *,
        catalog: Catalog | None = None,
        metrics: OrchestratorMetrics | None = None,
    ) -> None:
        self.cfg, self.store, self.backend = cfg, store, backend
        self.catalog = catalog or Catalog(
            cfg.suites_dir,
            cfg.harness_cache_dir,
            cfg.harness_timeout_s,
            harness_settings=cfg.harness_settings,
        )
        self.catalog.task_images = backend.task_images  # which tasks it can run is the backend's call
        self.metrics = metrics or OrchestratorMetrics()
        self.judge = Judge(cfg.judge) if cfg.judge.enabled else None
        self.runner = AttemptRunner(
            backend, self.metrics, ProxyProbe(cfg.proxy_check_timeout_s, cfg.proxy_wait_s), cfg.install_harnesses, self.judge
        )
        self._global = asyncio.Semaphore(cfg.max_concurrent_rollouts)
        self._per_harness = {
            ALIASES.get(name, name): asyncio.Semaphore(n) for name, n in cfg.harness_concurrency.items()
        }
        self._resources = cfg.resources() if cfg.sandbox_resources else None
        check_labels(cfg.sandbox_labels)
        self._batches: dict[str, _BatchState] = {}
        # Store writes get threads of their own: the default executor is small (CPUs + 4) and
        # local sandboxes' file operations queue there too.
        self._store_threads = ThreadPoolExecutor(
            max_workers=min(64, 2 * cfg.max_concurrent_rollouts + 2), thread_name_prefix="orchestrator-store"
        )
        self.reaped = 0
        self.instance_id = uuid.uuid4().hex  # this process start; the store's lease row
        self.orphans_failed: list[str] = []  # rollouts of lost orchestrators this one failed
        self._heartbeat: asyncio.Task | None = None

    def _store(self, fn: Callable[..., T], *args: Any) -> Awaitable[T]:
        """A blocking store call, run on the store threads."""
        return asyncio.get_running_loop().run_in_executor(self._store_threads, fn, *args)

    async def start(self) -> int:
        """Takes the lease (failing a lost predecessor's unended rollouts), reaps sandboxes of this
        owner that no live process holds (a predecessor's), starts heartbeating; returns how many
        sandboxes were reaped."""
        await self._renew_lease()
        self.reaped = await self.backend.reap()
        self.metrics.reaped.inc(self.reaped)
        if self.reaped:
            log.info("reaped %d orphaned sandboxes of owner %s", self.reaped, self.backend.owner)
        if self._heartbeat is None:
            self._heartbeat = asyncio.create_task(
                keep_lease(self._renew_lease, self.cfg.lease_s, f"orchestrator {self.instance_id}")
            )
        return self.reaped

    async def _renew_lease(self) -> None:
        failed = await self._store(
            self.store.orchestrator_heartbeat, self.instance_id, self.backend.lease_name, self.cfg.lease_s
        )
        if failed:
            self.orphans_failed += failed
            self.metrics.orphans_failed.inc(len(failed))
            log.warning("failed %d rollouts that lost orchestrators left unended: %s", len(failed), failed[:10])

    async def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
        for batch_id in list(self._batches):
            await self.cancel(batch_id)
        await self.backend.close()
        if self.judge is not None:
            await self.judge.close()
        self._store_threads.shutdown(wait=False)

    # --- the service ----------------------------------------------------------------------------

    async def run_rollouts(self, batch: Batch) -> AsyncIterator[RolloutStatus]:
        resolved = await self.catalog.resolve(batch)
        batch_id = batch.batch_id or uuid.uuid4().hex
        if batch_id in self._batches:
            raise AlreadyExists(f"batch {batch_id!r} is running already")
        specs: list[RolloutSpec] = []
        plan: list[tuple[Task, HarnessAdapter, str]] = []
        for (task, adapter), request in zip(resolved, batch.rollouts, strict=True):
            group_id = uuid.uuid4().hex
            for _ in range(request.samples):
                specs.append(RolloutSpec(group_id, task.id, adapter.name, batch.policy_version, self.instance_id))
                plan.append((task, adapter, group_id))
        registered = await self._store(self.store.register_rollouts, batch.run_id, specs)
        state = _BatchState(batch_id, batch, batch.proxy_url or self.cfg.proxy_url)
        for (task, adapter, group_id), reg in zip(plan, registered, strict=True):
            slot = _Slot(task, adapter, group_id, reg.rollout_id, reg.token)
            state.slots.append(slot)
            state.emit(slot, "registered")
        self._batches[batch_id] = state
        for slot in state.slots:
            slot.job = asyncio.create_task(self._run_slot(state, slot))
        try:
            remaining = len(state.slots)
            while remaining:
                status = await state.statuses.get()
                if status.ended and not status.retrying:
                    remaining -= 1
                yield status
        finally:
            running = [s for s in state.slots if s.job is not None and not s.job.done()]
            # A slot whose outcome was streamed may still be returning; any other has lost its caller.
            abandoned = [s.job for s in running if not s.ended]
            if abandoned:  # the caller stopped listening: nobody wants these rollouts any more
                log.info("batch %s: caller went away, cancelling %d rollouts", batch_id, len(abandoned))
                for job in abandoned:
                    job.cancel()
            await asyncio.gather(*(s.job for s in running), return_exceptions=True)
            self._batches.pop(batch_id, None)

    async def cancel(self, batch_id: str, rollout_id: str = "") -> int:
        if batch_id:
            states = [self._batches[batch_id]] if batch_id in self._batches else []
        else:
            states = list(self._batches.values())
        jobs = [
            s.job
            for state in states
            for s in state.slots
            if s.job is not None and not s.job.done() and not s.ended
            and (not rollout_id or s.rollout_id == rollout_id)
        ]  # fmt: skip
        for job in jobs:
            job.cancel()
        results = await asyncio.gather(*jobs, return_exceptions=True)
        return sum(r == "cancelled" for r in results)

    # --- one slot -------------------------------------------------------------------------------

    async def _run_slot(self, state: _BatchState, slot: _Slot) -> str:
        """Runs the slot to its final outcome; returns its last state."""
        try:
            while True:
                try:
                    result = await self._attempt(state, slot)
                except InfraFailure as failure:
                    retrying = await uninterrupted(self._fail(state, slot, failure))
                    if not retrying:
                        return "failed"
                    await asyncio.sleep(self.cfg.retry_backoff_s * 2 ** (slot.attempt - 2))
                    continue
                await uninterrupted(self._finish(state, slot, result))
                return "finished"
        except asyncio.CancelledError:
            if slot.ended:
                return "ended"  # the cancel came after the outcome was recorded
            await uninterrupted(self._end(state, slot, "cancelled", error="cancelled"))
            return "cancelled"

    async def _attempt(self, state: _BatchState, slot: _Slot) -> AttemptResult:
        queued = time.monotonic()
        gate = self._per_harness.get(slot.adapter.name) or contextlib.nullcontext()
        self.metrics.waiting.inc()
        waiting = True
        try:
            async with gate, self._global:
                self.metrics.waiting.dec()
                waiting = False
                started = time.monotonic()
                try:
                    provisioned = await self.catalog.provisioned(slot.task)
                except Exception as e:
                    raise classify(e, failures.UNSUPPORTED) from e
                plan = AttemptPlan(
                    task=slot.task,
                    adapter=slot.adapter,
                    token=slot.token,
                    proxy_url=state.proxy_url,
                    model=self.cfg.model,
                    labels=self._labels(state, slot),
                    env=provisioned.env,
                    image=self.cfg.sandbox_images.get(slot.adapter.name, ""),
                    resources=self._resources,
                    final_message=lambda rollout_id=slot.rollout_id: self._final_message(rollout_id),
                )

                async def running(sandbox_id: str) -> None:
                    await uninterrupted(self._store(self.store.start_rollout, slot.rollout_id, sandbox_id))
                    state.emit(slot, "running")

                async def verifying() -> None:
                    state.emit(slot, "verifying")

                try:
                    result = await self.runner.run(plan, running, verifying)
                    await self._check_reached_model(slot)
                except InfraFailure:
                    raise
                except ClawgymError as e:  # e.g. the store refused start_rollout
                    raise classify(e, failures.SANDBOX) from e
                except Exception as e:
                    log.exception("rollout %s: unexpected error", slot.rollout_id)
                    raise classify(e, failures.INTERNAL) from e
                finally:
                    self.metrics.rollout_duration.labels(slot.adapter.name).observe(
                        time.monotonic() - started
                    )
                result.timings["queue_s"] = started - queued
                return result
        finally:
            if waiting:
                self.metrics.waiting.dec()

    async def _final_message(self, rollout_id: str) -> str:
        """The text of the rollout's last model answer (the judge's evidence), "" if none."""
        return judge_evidence.final_message(await self._store(self.store.list_calls, rollout_id))

    async def _check_reached_model(self, slot: _Slot) -> None:
        """A model-calling harness that ended without one call recorded never reached the policy
        (the proxy was down, restarting or unreachable): its reward says nothing about the policy."""
        if slot.adapter.protocol == "none":
            return
        calls = await self._store(self.store.list_calls, slot.rollout_id)
        if not calls:
            raise InfraFailure(failures.PROXY, f"{slot.adapter.name} ended without a model call recorded")

    def _labels(self, state: _BatchState, slot: _Slot) -> dict[str, str]:
        return {
            **self.cfg.sandbox_labels,
            ROLLOUT_LABEL: label_value(slot.rollout_id),
            RUN_LABEL: label_value(state.batch.run_id),
            BATCH_LABEL: label_value(state.id),
            HARNESS_LABEL: slot.adapter.name,
        }

    # --- outcomes (each runs uninterrupted) ---------------------------------------------------------

    async def _finish(self, state: _BatchState, slot: _Slot, result: AttemptResult) -> None:
        verdict = result.verdict
        timings = {**result.timings, "attempt": float(slot.attempt)}
        detail = (
            "" if verdict.passed else _clean(f"{verdict.detail}\n--- harness ---\n{result.harness_output}")
        )
        if result.judgment is not None:
            await self._record_judgment(slot, result.judgment, code_score=result.breakdown["code"])
        await self._end(state, slot, "finished", reward=verdict.reward, passed=verdict.passed, timings=timings,
                        detail=detail, breakdown=result.breakdown, verifier_output=verdict.detail,
                        harness_stderr=result.harness_stderr)  # fmt: skip

    async def _record_judgment(self, slot: _Slot, outcome: JudgeOutcome, code_score: float | None) -> None:
        """Records the judge's prompt, answer and score beside the rollout, before it ends."""
        judgment = Judgment(
            rollout_id=slot.rollout_id,
            model=outcome.model,
            base_url=outcome.base_url,
            prompt=outcome.messages,
            raw_answer=outcome.raw_answer,
            score=outcome.score,
            rule_scores=dict(outcome.rule_scores),
            error=_clean(outcome.error),
            latency_s=outcome.latency_s,
            attempts=outcome.attempts,
            code_score=code_score,
        )
        try:
            await self._store(self.store.record_judgment, judgment)
        except Exception:
            log.exception("rollout %s: recording its judgment failed", slot.rollout_id)

    async def _fail(self, state: _BatchState, slot: _Slot, failure: InfraFailure) -> bool:
        """Ends the slot's rollout as failed; registers its replacement first when attempts are left."""
        self.metrics.failures.labels(failure.kind).inc()
        log.warning("rollout %s (attempt %d) failed: %s", slot.rollout_id, slot.attempt, failure)
        if isinstance(failure, JudgeFailed) and isinstance(failure.outcome, JudgeOutcome):
            await self._record_judgment(slot, failure.outcome, failure.code_score)
        replacement = None
        if failure.retried and slot.attempt < self.cfg.max_attempts:
            spec = RolloutSpec(
                slot.group_id, slot.task.id, slot.adapter.name, state.batch.policy_version, self.instance_id
            )
            try:
                [replacement] = await self._store(self.store.register_rollouts, state.batch.run_id, [spec])
            except Exception:
                log.exception("rollout %s: registering its retry failed; not retrying", slot.rollout_id)
        await self._end(state, slot, "failed", error=failure.message, failure=failure.kind,
                        retrying=replacement is not None, timings={"attempt": float(slot.attempt)})  # fmt: skip
        if replacement is None:
            return False
        slot.rollout_id, slot.token = replacement.rollout_id, replacement.token
        slot.attempt, slot.ended = slot.attempt + 1, False
        state.emit(slot, "registered")
        return True

    async def _end(
        self,
        state: _BatchState,
        slot: _Slot,
        status: str,
        *,
        reward: float | None = None,
        passed: bool | None = None,
        error: str = "",
        detail: str = "",
        failure: str = "",
        retrying: bool = False,
        timings: dict[str, float] | None = None,
        breakdown: dict[str, Any] | None = None,
        verifier_output: str = "",
        harness_stderr: str = "",
    ) -> None:
        """Records the end of the slot's current rollout (once) and emits its status; a task outcome
        keeps its verifier's output and the harness's stderr (tails) for a person to read."""
        if slot.ended:
            return
        slot.ended = True
        error = _clean(error)
        try:
            outputs = {"verifier_output": _clean(verifier_output), "harness_stderr": _clean(harness_stderr)}
            await self._store(
                functools.partial(self.store.finish_rollout, **outputs),
                slot.rollout_id, status, reward, passed, error, timings or {}, breakdown,
            )  # fmt: skip
        except FailedPrecondition:
            log.warning("rollout %s had ended already in the store; keeping that outcome", slot.rollout_id)
        except Exception:
            log.exception("rollout %s: recording its end (%s) failed", slot.rollout_id, status)
        self.metrics.rollouts.labels(slot.adapter.name, status).inc()
        state.emit(slot, status, reward=reward, passed=passed, error=error or detail, failure=failure,
                   retrying=retrying, timings=dict(timings or {}), breakdown=breakdown)  # fmt: skip
