"""Finds the tasks and harness adapters a batch names, and refuses a batch that cannot run.

Suites are loaded once per folder and kept (the mini suite has a few hundred tasks; a batch names
a handful), task setup steps are provisioned once per task. Nothing here starts a sandbox.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from pathlib import Path

from clawgym.errors import FailedPrecondition, NotFound
from clawgym.harnesses.base import HarnessAdapter
from clawgym.harnesses.config import HarnessSettings
from clawgym.harnesses.registry import ALIASES, get_harness
from clawgym.orchestrator.interface import Batch
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.model import Task
from clawgym.tasks.provision import Provisioned, Provisioner
from clawgym.tasks.suites import resolve_suite


class Catalog:
    """Tasks by (suite, id), adapters by harness name, provisioned environments by task."""

    def __init__(
        self,
        suites_dir: str | Path | None = None,
        harness_cache_dir: str | Path | None = None,
        harness_timeout_s: float = 0.0,
        provisioner: Provisioner | None = None,
        task_images: bool = False,
        harness_settings: Mapping[str, HarnessSettings] | None = None,
    ) -> None:
        self.suites_dir = Path(suites_dir) if suites_dir else None
        self.harness_cache_dir = Path(harness_cache_dir) if harness_cache_dir else None
        self.harness_timeout_s = harness_timeout_s
        # by canonical harness name (`orchestrator.harness_settings`)
        self.harness_settings = {ALIASES.get(k, k): v for k, v in (harness_settings or {}).items()}
        self.provisioner = provisioner or Provisioner()
        self.task_images = task_images  # the backend runs tasks' own images (`Task.unsupported_by`)
        self._suites: dict[Path, dict[str, Task]] = {}
        self._provisioned: dict[tuple[Path, str], Provisioned] = {}
        self._lock = asyncio.Lock()

    async def tasks(self, suite: str) -> dict[str, Task]:
        """Every task of a suite by id (loaded in a thread the first time)."""
        path = (await asyncio.to_thread(resolve_suite, suite, self.suites_dir)).resolve()
        async with self._lock:
            if path not in self._suites:
                loaded = await asyncio.to_thread(load_tasks, path)
                self._suites[path] = {t.id: t for t in loaded}
            return self._suites[path]

    def adapter(self, harness: str) -> HarnessAdapter:
        """A fresh adapter (NotFound for an unknown harness) with its `harness_settings` applied; time
        cap: the harness's own setting, else `harness_timeout_s`, else the adapter's."""
        base = get_harness(harness, cache_dir=self.harness_cache_dir)
        s = self.harness_settings.get(base.name, HarnessSettings())
        timeout_s = s.timeout_s or self.harness_timeout_s or base.limits.timeout_s
        limits = dataclasses.replace(
            base.limits, timeout_s=timeout_s, max_turns=s.max_turns or base.limits.max_turns
        )
        if limits == base.limits and not s.options():
            return base
        return get_harness(base.name, cache_dir=self.harness_cache_dir, limits=limits, **s.options())

    async def resolve(self, batch: Batch) -> list[tuple[Task, HarnessAdapter]]:
        """(task, adapter) per request of the batch; a typed error for the first that cannot run."""
        batch.validate()
        tasks = await self.tasks(batch.suite)
        resolved = []
        for i, request in enumerate(batch.rollouts):
            task = tasks.get(request.task_id)
            if task is None:
                raise NotFound(f"rollouts[{i}]: no task {request.task_id!r} in suite {batch.suite!r}")
            adapter = self.adapter(request.harness)
            if reason := task.unsupported_by(self.task_images):
                raise FailedPrecondition(f"rollouts[{i}]: task {task.id} cannot run here: {reason}")
            if adapter.name == "oracle" and not task.has_solution:
                raise FailedPrecondition(f"rollouts[{i}]: task {task.id} has no solution for the oracle")
            resolved.append((task, adapter))
        return resolved

    async def provisioned(self, task: Task) -> Provisioned:
        """The task's provisioned packages (installed once, cached); Unsupported if impossible."""
        key = (task.source_dir, task.id)
        if key not in self._provisioned:
            self._provisioned[key] = await asyncio.to_thread(
                self.provisioner.for_task, task, task_images=self.task_images
            )
        return self._provisioned[key]
