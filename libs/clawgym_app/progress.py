"""Progress display for long stages: rich progress bars fed by rollout statuses and trainer steps.

Owns what a person watching a run sees (on stderr, so `--json` keeps stdout to the one JSON
object). Callbacks arrive from the runtime's event-loop thread; rich's `Progress` is thread-safe.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from clawgym.orchestrator.interface import RolloutStatus


def make_progress(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(bar_width=32),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )


class RolloutBar:
    """A bar that advances once per rollout that ends for good, showing passes so far."""

    def __init__(self, progress: Progress, description: str, total: int) -> None:
        self.progress = progress
        self.total = total
        self.task: TaskID = progress.add_task(description, total=total, info="")
        self.ended = 0
        self.passed = 0
        self.failed = 0

    def __call__(self, status: RolloutStatus) -> None:
        if not status.ended or status.retrying:
            return
        self.ended += 1
        self.passed += bool(status.passed)
        self.failed += status.state != "finished"
        info = f"passed {self.passed}" + (f" · infra failures {self.failed}" if self.failed else "")
        self.progress.update(self.task, advance=1, info=info)

    def done(self) -> None:
        self.progress.update(self.task, completed=self.total)
