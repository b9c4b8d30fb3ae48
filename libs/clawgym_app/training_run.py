"""A training run with its evaluations and report: what `clawgym train` and `clawgym quickstart` share.

Owns the order of a run as a person sees it: evaluate the initial policy (held-out tasks, through
the harnesses it trains with), train step after step (evaluating every `evaluation.every_steps`),
evaluate the final policy, write the report. Stops early, between steps, when a time budget would
not leave room for the final evaluation. A resumed run (`prior`, see `clawgym_app.resume`) picks up
at the trainer's newest checkpoint with the evaluations the store recorded: the initial policy is
not evaluated again, and the report covers the whole run. The parts come from a `Runtime` (embedded or services);
the headline figures and their statistics are the library's (`clawgym.report.summary`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from clawgym.evaluation.runner import EvalResult, recorded_results
from clawgym.evaluation.select import HeldOut, eval_spec, held_out
from clawgym.orchestrator.interface import RolloutStatus
from clawgym.report import EvalPoint, RunReport, steps_from_store, write_report
from clawgym.report.summary import before_after, per_family
from clawgym.tracking import Tracker, eval_scalars, step_scalars
from clawgym.trainer.loop import Trainer
from clawgym_app.progress import RolloutBar, Stopwatch, make_progress
from clawgym_app.resume import PriorRun
from clawgym_app.runtime import Runtime

log = logging.getLogger(__name__)


@dataclass
class LabelledEval:
    label: str
    result: EvalResult


@dataclass
class RunOutcome:
    """What a run did: its store run, evaluations, stage timings, report and headline figures."""

    run_id: str
    version: int
    evals: list[LabelledEval] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    report: Path | None = None
    notes: list[str] = field(default_factory=list)


class _Relay:
    """Forwards rollout statuses to whichever bar is current (the source's callback is fixed)."""

    def __init__(self) -> None:
        self.target = None

    def __call__(self, status: RolloutStatus) -> None:
        if self.target is not None:
            self.target(status)


class TrainingRun:
    """Runs `cfg` on `runtime`, showing progress on `console` and writing the report into `run_dir`."""

    def __init__(
        self,
        runtime: Runtime,
        run_dir: Path,
        console: Console,
        *,
        title: str = "clawgym run",
        deadline: float | None = None,
        settings: dict[str, Any] | None = None,
        prior: PriorRun | None = None,
    ) -> None:
        self.rt = runtime
        self.cfg = runtime.cfg
        self.run_dir = run_dir
        self.console = console
        self.title = title
        self.deadline = deadline  # time.monotonic() by which the whole run should be done
        self.settings = settings or {}
        self.prior = prior  # the run this one continues (`clawgym train --resume`)
        self.clock = Stopwatch()
        self.relay = _Relay()
        self.spec = eval_spec(
            self.cfg.evaluation,
            self.cfg.trainer.suite,
            [h.name for h in self.cfg.trainer.harnesses],
            self.cfg.orchestrator.sandbox_config(self.cfg.sandbox).task_images,
        )
        self.trainer: Trainer | None = None
        self.tracker = Tracker()  # opened once the trainer knows its run id

    # --- the run ---

    def run(self) -> RunOutcome:
        e = self.cfg.evaluation
        with make_progress(self.console) as progress:
            with self.clock.stage("start trainer"):
                self.trainer = self.rt.trainer(on_status=self.relay)
                task = progress.add_task("loading the trainer's policy", total=None, info="")
                self.trainer.start()
                progress.remove_task(task)
            outcome = RunOutcome(self.trainer.run_id, self.trainer.version)
            try:
                self.tracker = Tracker.open(
                    self.cfg.tracking, self.run_dir, run_id=self.trainer.run_id, name=self.cfg.trainer.run_name,
                    config=self.cfg.model_dump(mode="json"),
                )  # fmt: skip
                if self.prior is not None:
                    self._resume(progress, outcome)
                if e.at_start and not any(ev.label == "before" for ev in outcome.evals):
                    outcome.evals.append(self._evaluate(progress, "before", "eval before"))
                self._train(progress, outcome)
                if e.at_end and (
                    not outcome.evals or outcome.evals[-1].result.version != self.trainer.version
                ):
                    outcome.evals.append(self._evaluate(progress, "after", "eval after"))
            finally:
                self.tracker.close()
                self.trainer.close()
        outcome.version = self.trainer.version
        with self.clock.stage("report"):
            outcome.stages = dict(self.clock.stages)
            outcome.summary = self.summary(outcome)
            outcome.report = self.write_report(outcome)
        outcome.stages = dict(self.clock.stages)
        return outcome

    def _resume(self, progress: Progress, outcome: RunOutcome) -> None:
        """Takes over the recorded evaluations (version 0 is "before", the last version "after", others
        "step N") and says where the run resumed; evaluates the resumed version if its periodic
        evaluation was interrupted."""
        steps, version = self.cfg.trainer.steps, self.trainer.version
        for result in recorded_results(self.rt.store.list_evals(self.trainer.run_id)):
            v = result.version
            label = "before" if v == 0 else "after" if v >= steps else f"step {v}"
            outcome.evals.append(LabelledEval(label, result))
            self._track_eval(result, replay=True)
        for step in steps_from_store(self.rt.store, self.trainer.run_id):
            self.tracker.log(step["step"], step_scalars(step), replay=True)
        kept = ", ".join(f"{ev.label} (v{ev.result.version})" for ev in outcome.evals) or "none"
        note = (
            f"resumed run {self.trainer.run_id} at version {version} (step {version} of {steps}); "
            f"recorded evaluations kept: {kept}"
        )
        self.console.print(note)
        outcome.notes.append(f"{note}. Stage times and minutes are this process's only.")
        every = self.cfg.evaluation.every_steps
        done = {ev.result.version for ev in outcome.evals}
        if every and 0 < version < steps and version % every == 0 and version not in done:
            outcome.evals.append(self._evaluate(progress, f"step {version}", "eval during training"))

    def _train(self, progress: Progress, outcome: RunOutcome) -> None:
        t = self.cfg.trainer
        trainer = self.trainer
        steps = progress.add_task("training", total=t.steps, completed=trainer.version, info="")
        durations: list[float] = []
        reserve = 0.0
        if outcome.evals:  # the final evaluation costs about what the first one did
            reserve = 1.15 * outcome.evals[0].result.seconds + 10.0
        while trainer.version < t.steps:
            if self.deadline is not None and durations:
                left = self.deadline - time.monotonic()
                if left < max(durations[-3:]) + reserve:
                    note = (
                        f"stopped after {trainer.version} of {t.steps} steps: the time budget "
                        f"({left:.0f} s left) would not fit another step and the final evaluation"
                    )
                    outcome.notes.append(note)
                    self.console.print(f"[yellow]{note}[/yellow]")
                    trainer.cancel_rollouts()  # an async prefetch would run into the final evaluation
                    break
            bar = RolloutBar(
                progress, f"  step {trainer.version + 1} rollouts", t.groups_per_step * t.group_size
            )
            self.relay.target = bar
            started = time.monotonic()
            with self.clock.stage("train"):
                trainer.run(steps=1)
            durations.append(time.monotonic() - started)
            self.relay.target = None
            progress.remove_task(bar.task)
            m = trainer.status.metrics
            self.tracker.log(trainer.version, step_scalars(m))
            info = (
                f"reward {m.get('reward', math.nan):.2f} · pass {m.get('pass_rate', math.nan):.2f} · "
                f"{durations[-1]:.0f} s/step"
            )
            progress.update(steps, completed=trainer.version, info=info)
            every = self.cfg.evaluation.every_steps
            if every and trainer.version % every == 0 and trainer.version < t.steps:
                outcome.evals.append(
                    self._evaluate(progress, f"step {trainer.version}", "eval during training")
                )

    def _evaluate(self, progress: Progress, label: str, stage: str) -> LabelledEval:
        spec = self.spec
        total = len(spec.task_ids) * len(spec.harnesses) * spec.samples
        bar = RolloutBar(progress, f"eval {label} (v{self.trainer.version})", total)
        with self.clock.stage(stage):
            result = self.rt.evaluate(
                spec, version=self.trainer.version, record_run_id=self.trainer.run_id, on_status=bar
            )
        bar.done()
        parts = [
            f"{h}: Pass@1 {r.pass_at[1].value:.3f}" for h, r in result.harnesses.items() if 1 in r.pass_at
        ]
        progress.update(bar.task, info=" · ".join(parts))
        self._track_eval(result)
        return LabelledEval(label, result)

    def _track_eval(self, result: EvalResult, replay: bool = False) -> None:
        for harness, h in result.harnesses.items():
            pass_at = {k: p.value for k, p in h.pass_at.items()}
            self.tracker.log(result.version, eval_scalars(harness, pass_at, h.mean_reward), replay=replay)

    # --- results ---

    def summary(self, outcome: RunOutcome) -> dict[str, Any]:
        """Headline figures (`clawgym.report.summary`): steps, minutes, Pass@1 before/after per
        harness with 95% CIs and the paired difference, for the held-out instances of the trained
        families (the plain keys) and for the families never trained on (`_unseen_families`), what
        each set shares with training, Pass@1 per family, the evaluation's size."""
        out: dict[str, Any] = {"steps": outcome.version, "minutes": round(self.clock.elapsed / 60, 2)}
        first = next((e.result for e in outcome.evals if e.label == "before"), None)
        last = next((e.result for e in reversed(outcome.evals) if e.label == "after"), None)
        parts = self.held_out()
        trained, unseen = parts.ids("trained"), parts.ids("unseen")
        out |= before_after(self.spec.harnesses, first, last, trained or None)
        if unseen:
            out |= before_after(self.spec.harnesses, first, last, unseen, "_unseen_families")
        out["eval_tasks"] = len(trained) if unseen else len(self.spec.task_ids)
        if unseen:
            out["eval_tasks_unseen_families"] = len(unseen)
        out["eval_samples"] = self.spec.samples
        out["held_out"] = {
            "": f"new instances of the {len(parts.trained)} task families trained on: "
            "their templates, phrasings and vocabulary, and the harness prompt, are shared with training; "
            "no instruction or solution is",
            **({"_unseen_families": f"tasks of {len(parts.families('unseen'))} families with no training "
                f"task ({', '.join(parts.families('unseen'))}): only the harness prompt and the suite's "
                "vocabulary are shared with training"} if unseen else {}),
        }  # fmt: skip
        out["per_family"] = per_family(
            self.spec.harnesses, {"before": first, "after": last}, parts.family_of, parts.kind_of
        )
        return out

    def held_out(self) -> HeldOut:
        """The evaluated tasks split into held-out instances of trained families and unseen families."""
        return held_out(self.spec.suite, self.cfg.trainer.tasks, self.spec.task_ids)

    def write_report(self, outcome: RunOutcome) -> Path:
        points = [
            EvalPoint.from_metrics(h.metrics(ev.result.suite, ev.result.version), harness, ev.label)
            for ev in outcome.evals
            for harness, h in ev.result.harnesses.items()
        ]
        report = RunReport(
            title=self.title,
            run_id=outcome.run_id,
            settings={**self.settings, "config": self.cfg.model_dump(mode="json")},
            steps=steps_from_store(self.rt.store, outcome.run_id),
            evals=points,
            stages=dict(self.clock.stages),
            summary=outcome.summary,
            notes=outcome.notes,
        )
        return write_report(report, self.run_dir)
