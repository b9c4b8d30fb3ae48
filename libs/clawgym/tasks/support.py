"""What a found task can run on: per sandbox backend, None or the reason it cannot; and the caveats.

A backend's rule is a function of the loaded `Task` in `BACKEND_RULES`; a new backend adds its
own. The local backend's rule is `Task.unsupported` (the loaders' reading of the task's
Dockerfile, compose file and image); the docker backend builds the task's image, so only what the
image cannot hold (extra compose services) stops it (`Task.unsupported_by`). Kubernetes has no rule yet: whether its pods see the
packages provisioned for a task depends on the deployment's image, which a task cannot tell. Caveats are the places where a task runs differently from
its own harness (the image is not built, its test runner is replaced, it has no solution); they
are read off the loaded task, so they hold for every backend that runs the `Task` as loaded.

Status of one task: `broken` (it does not load), `skipped` (another format than asked),
`unsupported` (no backend runs it), `caveats` (it runs, with caveats), `ok`.
This module only reads tasks; it starts no sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from clawgym.tasks.loader import FoundTask
from clawgym.tasks.model import Task
from clawgym.tasks.provision import PYTEST_REQUIREMENT

Status = Literal["ok", "caveats", "unsupported", "broken", "skipped"]

BACKEND_RULES: dict[str, Callable[[Task], str | None]] = {
    "local": lambda task: task.unsupported,
    "docker": lambda task: task.unsupported_by(task_images=True),  # the task's own image, built
}


def backend_support(task: Task) -> dict[str, str | None]:
    """Backend name → None (it runs the task) or the reason it cannot."""
    return {name: rule(task) for name, rule in BACKEND_RULES.items()}


def caveats(task: Task) -> list[str]:
    """How running `task` here differs from running it in its own image with its own runner."""
    notes = []
    if task.setup:
        installs = "; ".join(f"{s.manager} {' '.join(s.packages)}" for s in task.setup)
        notes.append(
            f"local backend: the image is not built, its package installs are provisioned instead ({installs})"
        )
    if task.format == "terminal-bench" and task.verifier.kind == "pytest":
        notes.append(f"run-tests.sh is not run: tests/test_*.py run with a provisioned {PYTEST_REQUIREMENT}")
    if task.format == "harbor" and task.verifier.kind == "pytest":
        notes.append(
            "tests/test.sh fetches tools from the internet: its tests/test_*.py run with a "
            f"provisioned {PYTEST_REQUIREMENT} instead"
        )
    if not task.has_solution:
        notes.append("no reference solution: the oracle cannot check the verifier (nop only)")
    return notes


@dataclass(frozen=True)
class TaskReport:
    """One found task as `tasks import` / `tasks check` report it."""

    task: str  # the task id, or the folder's name when it does not load
    path: str  # the folder, relative to the source
    format: str
    status: Status
    backends: Mapping[str, str | None] = field(default_factory=dict)
    caveats: tuple[str, ...] = ()
    reason: str | None = None  # broken: the load error; skipped: why; unsupported: each backend's

    @property
    def imported(self) -> bool:
        """Whether `tasks import` copies it: every task that loads, an unsupported one too (a
        backend added later may run it)."""
        return self.status in ("ok", "caveats", "unsupported")

    def as_json(self) -> dict[str, object]:
        return {
            "task": self.task,
            "path": self.path,
            "format": self.format,
            "status": self.status,
            "backends": dict(self.backends),
            "caveats": list(self.caveats),
            "reason": self.reason,
            "imported": self.imported,
        }


def grouped_caveats(reports: Sequence[TaskReport]) -> dict[str, list[str]]:
    """Each distinct caveat (in the order first met) → the tasks it applies to, for a report that
    says each once."""
    groups: dict[str, list[str]] = {}
    for report in reports:
        for note in report.caveats:
            groups.setdefault(note, []).append(report.task)
    return groups


def report_task(found: FoundTask, path: str) -> TaskReport:
    """The report of one `scan_tasks` entry; `path` is how to name its folder."""
    if found.task is None:
        status: Status = "broken" if found.error is not None else "skipped"
        return TaskReport(found.name, path, found.format, status, reason=found.error or found.skipped)
    backends = backend_support(found.task)
    notes = tuple(caveats(found.task))
    if all(reason is not None for reason in backends.values()):
        why = "; ".join(f"{name}: {reason}" for name, reason in backends.items())
        return TaskReport(found.name, path, found.format, "unsupported", backends, notes, why)
    return TaskReport(found.name, path, found.format, "caveats" if notes else "ok", backends, notes)
