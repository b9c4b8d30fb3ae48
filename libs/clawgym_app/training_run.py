"""How `clawgym train` and `clawgym quickstart` show a run: rich progress bars over `clawgym.run.Run`.

The run itself (its order, evaluations, trackers, report) is the library's `Run`, the same one
`clawgym serve trainer` runs; this module is only its observer for a person at a terminal, plus
`run_with_progress`, which runs one on an embedded or services `Runtime`.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, TaskID
from rich.text import Text

from clawgym.evaluation.runner import EvalResult
from clawgym.run import OnStatus, Run, RunObserver, RunOutcome, eval_line, step_line
from clawgym.trainer.loop import Trainer
from clawgym_app.progress import RolloutBar, make_progress
from clawgym_app.runtime import Runtime


class ProgressObserver(RunObserver):
    """A bar for the steps, one per step's rollouts and one per evaluation, notes on the console."""

    def __init__(self, console: Console, progress: Progress) -> None:
        self.console, self.progress = console, progress
        self.loading: TaskID | None = None
        self.steps: TaskID | None = None
        self.bar: RolloutBar | None = None

    def trainer_starting(self) -> None:
        self.loading = self.progress.add_task("loading the trainer's policy", total=None, info="")

    def trainer_started(self, trainer: Trainer) -> None:
        if self.loading is not None:
            self.progress.remove_task(self.loading)
        self.steps = self.progress.add_task(
            "training", total=trainer.cfg.steps, completed=trainer.version, info=""
        )

    def note(self, text: str, warning: bool = False) -> None:
        self.console.print(Text(text, style="yellow" if warning else ""))

    def step_starting(self, step: int, rollouts: int) -> OnStatus:
        what = "rollouts" if rollouts else "(SFT)"
        self.bar = RolloutBar(self.progress, f"  step {step} {what}", rollouts)
        return self.bar

    def step_done(self, version: int, steps: int, metrics: dict[str, Any], seconds: float) -> None:
        if self.bar is not None:
            self.progress.remove_task(self.bar.task)
            self.bar = None
        info = f"{step_line(metrics)} · {seconds:.0f} s/step"
        if self.steps is not None:
            self.progress.update(self.steps, completed=version, info=info)

    def eval_starting(self, label: str, version: int, rollouts: int) -> OnStatus:
        self.bar = RolloutBar(self.progress, f"eval {label} (v{version})", rollouts)
        return self.bar

    def eval_done(self, label: str, result: EvalResult) -> None:
        if self.bar is not None:
            self.bar.done()
            self.progress.update(self.bar.task, info=eval_line(result))
            self.bar = None


def run_with_progress(
    runtime: Runtime,
    run_dir: Path,
    console: Console,
    *,
    stages: dict[str, float] | None = None,
    **run_options: Any,
) -> RunOutcome:
    """Runs `runtime.cfg` as a `Run` with progress bars on `console`; `stages` are timings measured
    before the run (they lead the report's stage table); `run_options` go to `Run`."""
    with make_progress(console) as progress:
        run = Run(runtime.cfg, runtime, run_dir, ProgressObserver(console, progress), **run_options)
        run.clock.stages.update(stages or {})
        with stop_on_interrupt(run.stop, console):
            return run.run()


@contextlib.contextmanager
def stop_on_interrupt(stop: threading.Event, console: Console) -> Iterator[None]:
    """The first Ctrl-C asks the run to stop after its current step (it then writes the report of
    what was done); a second one interrupts at once. Outside the main thread signals are not ours."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        console.print(Text("Ctrl-C: stopping after the current step (Ctrl-C again to stop at once)", "yellow"))

    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
