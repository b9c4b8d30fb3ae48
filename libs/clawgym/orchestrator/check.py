"""Validates task suites: per task, the oracle (reference solution) passes and nop fails.

Each run goes through the orchestrator's one rollout pipeline (`attempt.run_task`), without a store.
A task without a solution is checked with nop only. A hybrid task's rubric is not judged here (no
judge is asked): the oracle must pass, and nop fail, its code checks; `oracle_breakdown` says so. A
task the backend cannot run (`Task.unsupported_by`, a package that cannot be provisioned) and a
sandbox that breaks are counted as errors with their reason, never as a pass or a fail of the task.
A task folder that does not load is a `broken` check carrying its load error (`broken_check`), so
one bad folder never stops the check of the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clawgym.errors import ClawgymError
from clawgym.harnesses.pseudo import Nop, Oracle
from clawgym.orchestrator.attempt import AttemptResult, run_task
from clawgym.orchestrator.failures import InfraFailure
from clawgym.sandbox.config import SandboxConfig
from clawgym.sandbox.interface import SandboxBackend
from clawgym.tasks.loader import FoundTask
from clawgym.tasks.model import Task
from clawgym.tasks.provision import Provisioner


@dataclass(frozen=True)
class TaskCheck:
    """One task's check. `oracle` is None for a task without a solution (or after an error).
    `broken`: the task did not load, `error` is the load error; nothing ran."""

    task_id: str
    oracle: AttemptResult | None = None
    nop: AttemptResult | None = None
    error: str | None = None
    broken: bool = False

    @property
    def oracle_passed(self) -> bool:
        return self.oracle is not None and self.oracle.verdict.passed

    @property
    def nop_failed(self) -> bool:
        return self.nop is not None and not self.nop.verdict.passed

    @property
    def ok(self) -> bool:
        return self.error is None and self.nop_failed and (self.oracle is None or self.oracle_passed)

    def as_json(self) -> dict[str, object]:
        return {
            "task": self.task_id,
            "ok": self.ok,
            "oracle_reward": None if self.oracle is None else self.oracle.verdict.reward,
            "nop_reward": None if self.nop is None else self.nop.verdict.reward,
            "error": self.error,
            "broken": self.broken,
            "detail": None if self.ok or self.error else _detail(self),
            # hybrid tasks: checked by their code part (no judge here); the breakdown says so
            **({"oracle_breakdown": self.oracle.breakdown} if self.oracle and self.oracle.breakdown else {}),
        }


def broken_check(found: FoundTask) -> TaskCheck:
    """The check of a task folder that does not load: its load error, counted as broken."""
    return TaskCheck(found.name, error=found.error or found.skipped or "not loaded", broken=True)


def _detail(check: TaskCheck) -> str:
    parts = []
    if check.oracle is not None and not check.oracle_passed:
        parts.append(
            f"oracle: {check.oracle.verdict.detail[-600:]} | harness: {check.oracle.harness_output[-600:]}"
        )
    if check.nop is not None and not check.nop_failed:
        parts.append(f"nop passed: {check.nop.verdict.detail[-300:]}")
    return "\n".join(parts)


def summarize(checks: Sequence[TaskCheck]) -> dict[str, int]:
    """The figures `clawgym tasks check --json` ends with. `errors` counts tasks that loaded but
    could not run; `broken` those that did not load; `ok` those whose check passed."""
    return {
        "tasks": len(checks),
        "ok": sum(c.ok for c in checks),
        "oracle_passed": sum(c.oracle_passed for c in checks),
        "nop_failed": sum(c.nop_failed for c in checks),
        "errors": sum(c.error is not None and not c.broken for c in checks),
        "broken": sum(c.broken for c in checks),
    }


async def check_task(task: Task, backend: SandboxBackend, provisioner: Provisioner) -> TaskCheck:
    """The oracle (if the task has a solution) then nop, each in a fresh sandbox."""
    try:
        provisioned = await asyncio.to_thread(provisioner.for_task, task, task_images=backend.task_images)
        oracle = await run_task(Oracle(), task, backend, env=provisioned.env) if task.has_solution else None
        nop = await run_task(Nop(), task, backend, env=provisioned.env)
    except (ClawgymError, InfraFailure) as e:
        return TaskCheck(task.id, error=f"{type(e).__name__}: {e}")
    return TaskCheck(task.id, oracle=oracle, nop=nop)


async def check_tasks(
    tasks: Sequence[Task],
    backend: SandboxBackend,
    provisioner: Provisioner,
    concurrency: int = 4,
    on_done: Callable[[TaskCheck], None] | None = None,
) -> list[TaskCheck]:
    """Checks every task, `concurrency` at a time; results in the order of `tasks`."""
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> TaskCheck:
        async with gate:
            result = await check_task(task, backend, provisioner)
        if on_done is not None:
            on_done(result)
        return result

    return list(await asyncio.gather(*(one(t) for t in tasks)))


async def check_locally(
    tasks: Sequence[Task],
    concurrency: int = 4,
    on_done: Callable[[TaskCheck], None] | None = None,
    cfg: SandboxConfig | None = None,
) -> list[TaskCheck]:
    """`check_tasks` in sandboxes of `cfg` (default: local ones) that see the provisioned packages
    (read-only); `cfg.backend: docker` checks each task in its own image."""
    from clawgym.sandbox import make_sandbox_backend
    from clawgym.tasks.provision import PROVISION_DIR

    cfg = (cfg or SandboxConfig()).model_copy(deep=True)
    cfg.local.ro_paths = [*cfg.local.ro_paths, str(PROVISION_DIR)]
    cfg.docker.ro_paths = [*cfg.docker.ro_paths, str(PROVISION_DIR)]
    backend = make_sandbox_backend(cfg)
    try:
        return await check_tasks(tasks, backend, Provisioner(), concurrency=concurrency, on_done=on_done)
    finally:
        await backend.close()
