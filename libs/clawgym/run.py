"""One training run in the order a person sees it, whoever drives it.

`Run` owns the order: start the trainer (which resumes from the run's newest checkpoint), take over
what the store recorded of an earlier part of the run, evaluate the initial policy (held-out tasks,
through the harnesses it trains with), train step after step (evaluating every
`evaluation.every_steps`), evaluate the final policy, then the summary (summary.json) and the
report; every step and evaluation also goes to the trackers (`tracking`). It stops early, between
steps, when asked to (`stop`, e.g. SIGTERM: the report then covers what was done) or when a time
budget would not leave room for the final evaluation.

`clawgym train`/`quickstart` (rich progress) and `clawgym serve trainer` (logs, gRPC Status) run the
same `Run`; they differ only in their parts (`RunParts`: an embedded runtime, or the service's
clients) and in how they show it (`RunObserver`). Under torchrun every rank steps; only the main
rank evaluates, tracks and reports.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from clawgym.config import ClawgymConfig
from clawgym.config_report import hide
from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.evaluation.runner import EvalResult, EvalSpec, recorded_results
from clawgym.evaluation.select import HeldOut, eval_spec, held_out
from clawgym.evaluation.shared import describe, unseen_label
from clawgym.orchestrator.interface import RolloutStatus
from clawgym.report import EvalPoint, RunReport, steps_from_store, write_report
from clawgym.report.run_folder import CHECKPOINTS_DIR, CONFIG_FILE, store_url, write_summary
from clawgym.report.summary import before_after, per_family
from clawgym.store.interface import TrajectoryStore
from clawgym.tracking import Tracker, eval_scalars, step_scalars
from clawgym.trainer.source import train_task_ids

if TYPE_CHECKING:
    from clawgym.trainer.loop import Trainer  # torch: imported by whoever builds the trainer

log = logging.getLogger(__name__)

OnStatus = Callable[[RolloutStatus], None]


class RunParts(Protocol):
    """What a run runs on: the store, a trainer whose rollouts report to `on_status`, evaluations."""

    store: TrajectoryStore
    evaluates: bool  # False where no harness can be run (the toy rollout source)

    def trainer(self, on_status: OnStatus) -> Trainer: ...

    def evaluate(
        self, spec: EvalSpec, *, version: int, record_run_id: str, on_status: OnStatus | None
    ) -> EvalResult: ...


class RunObserver:
    """What a run tells whoever shows it. Every method is optional: this base shows nothing."""

    def trainer_starting(self) -> None: ...

    def trainer_started(self, trainer: Trainer) -> None: ...

    def note(self, text: str, warning: bool = False) -> None: ...

    def step_starting(self, step: int, rollouts: int) -> OnStatus | None:
        """Called before each step; a callback returned gets the step's rollout statuses."""
        return None

    def step_done(self, version: int, steps: int, metrics: dict[str, Any], seconds: float) -> None: ...

    def eval_starting(self, label: str, version: int, rollouts: int) -> OnStatus | None:
        """Called before each evaluation; a callback returned gets its rollout statuses."""
        return None

    def eval_done(self, label: str, result: EvalResult) -> None: ...


class LogObserver(RunObserver):
    """Shows a run in the log (the services' way: `kubectl logs`, compose logs)."""

    def note(self, text: str, warning: bool = False) -> None:
        log.log(logging.WARNING if warning else logging.INFO, "%s", text)

    def step_done(self, version: int, steps: int, metrics: dict[str, Any], seconds: float) -> None:
        log.info("step %d of %d: %s; %.1f s", version, steps, step_line(metrics), seconds)

    def eval_done(self, label: str, result: EvalResult) -> None:
        log.info("evaluation %s (policy v%d, %s): %s", label, result.version, result.suite, eval_line(result))


def step_line(metrics: dict[str, Any]) -> str:
    if metrics.get("stage") == "sft":
        return f"SFT loss {metrics.get('loss', math.nan):.3f} · epoch {metrics.get('sft_epoch', 0.0):.2f}"
    return f"reward {metrics.get('reward', math.nan):.2f} · pass {metrics.get('pass_rate', math.nan):.2f}"


def eval_line(result: EvalResult) -> str:
    return " · ".join(
        f"{h}: Pass@1 {r.pass_at[1].value:.3f}" for h, r in result.harnesses.items() if 1 in r.pass_at
    )


@dataclass
class LabelledEval:
    label: str  # "before", "step N", "after"
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
    stopped: bool = False  # ended early because it was asked to


class Stopwatch:
    """Wall time per named stage, in the order the stages ran."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self.started = time.monotonic()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.monotonic() - t0

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


def in_folder(cfg: ClawgymConfig, folder: Path) -> ClawgymConfig:
    """`cfg` as the run in `folder` keeps it: what the config left to its defaults lives in the folder
    (the embedded SQLite store `clawgym.db`, the checkpoints), `trainer.run_dir` is the folder, and
    local paths are absolute, so the config.yaml written there works from any directory."""
    folder = folder.resolve()
    store, trainer = cfg.store, cfg.trainer
    url = store.url
    if not store.grpc_url and "url" not in store.model_fields_set:
        url = store_url(folder)
    elif url.startswith("sqlite:///") and not url.startswith("sqlite:////") and "?" not in url:
        url = f"sqlite:///{Path(url.removeprefix('sqlite:///')).resolve()}"  # relative: to here
    checkpoints = trainer.checkpoint_uri
    if "checkpoint_uri" not in trainer.model_fields_set:
        checkpoints = str(folder / CHECKPOINTS_DIR)
    elif "://" not in checkpoints:
        checkpoints = str(Path(checkpoints).expanduser().resolve())
    suite = trainer.suite
    if Path(suite).expanduser().is_dir():  # a folder, not a suite's name
        suite = str(Path(suite).expanduser().resolve())
    return cfg.model_copy(
        update={
            "store": store.model_copy(update={"url": url}),
            "trainer": trainer.model_copy(
                update={"run_dir": str(folder), "checkpoint_uri": checkpoints, "suite": suite}
            ),
        }
    )


def write_run_config(folder: Path, cfg: ClawgymConfig) -> Path:
    """Writes `folder`/config.yaml: the resolved config without its secrets (the rpc secret is left
    out and URL passwords starred: a later command gets them from CLAWGYM_* variables again)."""
    data = hide(cfg.model_dump(mode="json", exclude={"rpc": {"secret"}}), None)
    path = folder / CONFIG_FILE
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_eval_spec(cfg: ClawgymConfig) -> EvalSpec:
    """The held-out evaluation `cfg` asks for (`evaluation.select.eval_spec`), with its sandbox's rule
    for which tasks run."""
    t = cfg.trainer
    return eval_spec(cfg.evaluation, t.suite, [h.name for h in t.harnesses], cfg.sandbox.task_images)


def refuse_trained_evaluation(cfg: ClawgymConfig, spec: EvalSpec | None = None) -> None:
    """InvalidArgument when the run would evaluate a task it trains on: the training tasks are
    `trainer.tasks`, else the suite's train split (every task where it has none), the evaluated
    ones `evaluation.task_ids`, else its split (every task where the suite has none). Reads the
    suite only: called before any model loads. A run that evaluates nothing, or trains on toy
    tasks, passes."""
    e, t = cfg.evaluation, cfg.trainer
    if t.rollout_source == "toy" or not (e.at_start or e.at_end or e.every_steps):
        return
    spec = spec or run_eval_spec(cfg)
    if not _same_suite(spec.suite, t.suite):
        return
    train = set(t.tasks or train_task_ids(t.suite))
    both = [i for i in spec.task_ids if i in train]
    if not both:
        return
    shown = ", ".join(both[:5]) + (f" and {len(both) - 5} more" if len(both) > 5 else "")
    evaluated = "evaluation.task_ids" if e.task_ids else f"the suite's {e.split!r} split"
    trained = "trainer.tasks" if t.tasks else "its 'train' split"
    fallback = "" if e.task_ids and t.tasks else " (a split the suite lacks is every task)"
    raise InvalidArgument(
        f"evaluation: {len(both)} of the {len(spec.task_ids)} evaluated tasks of suite {t.suite!r} are "
        f"trained on too ({shown}): evaluated = {evaluated}, trained = {trained}{fallback}. Give the "
        "suite a held-out split (`clawgym tasks import SRC` assigns one by family) or make "
        "evaluation.task_ids and trainer.tasks disjoint"
    )


def _same_suite(a: str, b: str) -> bool:
    """Whether two suite names name one folder (a name that does not resolve is only itself)."""
    from clawgym.tasks.suites import resolve_suite

    if a == b:
        return True
    try:
        return resolve_suite(a).resolve() == resolve_suite(b).resolve()
    except ClawgymError:
        return False


class _Relay:
    """Forwards rollout statuses to whichever callback is current (the trainer's is fixed)."""

    def __init__(self) -> None:
        self.target: OnStatus | None = None

    def __call__(self, status: RolloutStatus) -> None:
        if self.target is not None:
            self.target(status)


class Run:
    """Runs `cfg` on `parts`, told to `observer`, its report and trackers in `run_dir`."""

    def __init__(
        self,
        cfg: ClawgymConfig,
        parts: RunParts,
        run_dir: Path,
        observer: RunObserver | None = None,
        *,
        title: str = "clawgym run",
        deadline: float | None = None,
        settings: dict[str, Any] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.cfg = cfg
        self.parts = parts
        self.run_dir = Path(run_dir)
        self.observer = observer or RunObserver()
        self.title = title
        self.deadline = deadline  # time.monotonic() by which the whole run should be done
        self.settings = settings or {}
        self.stop = stop or threading.Event()
        self.clock = Stopwatch()
        self.relay = _Relay()
        self.spec = run_eval_spec(cfg)
        refuse_trained_evaluation(cfg, self.spec)  # every driver: `clawgym train` checks it earlier too
        self.trainer: Trainer | None = None
        self.tracker = Tracker()  # opened once the trainer knows its run id
        self.main = True  # the rank that evaluates, tracks and reports

    # --- the run ---

    def run(self) -> RunOutcome:
        e = self.cfg.evaluation
        with self.clock.stage("start trainer"):
            self.observer.trainer_starting()
            self.trainer = trainer = self.parts.trainer(self.relay)
            if trainer.policy is None:
                trainer.start()
            self.main = trainer.world.is_main
            self.observer.trainer_started(trainer)
        outcome = RunOutcome(trainer.run_id, trainer.version)
        try:
            if self.main:
                self.tracker = Tracker.open(
                    self.cfg.tracking, self.run_dir, run_id=trainer.run_id, name=self.cfg.trainer.run_name,
                    config=self.cfg.model_dump(mode="json"),
                )  # fmt: skip
            self._take_over(outcome)
            if e.at_start and not any(ev.label == "before" for ev in outcome.evals):
                self._evaluate(outcome, "before", "eval before")
            self._train(outcome)
            if e.at_end and not outcome.stopped:  # a run the time budget ended early included
                self._evaluate(outcome, "after", "eval after")
        finally:
            self.tracker.close()
        outcome.version = trainer.version
        if self.main:
            with self.clock.stage("report"):
                outcome.summary = self.summary(outcome)
                outcome.report = self.write_report(outcome)
                write_summary(self.run_dir, outcome.summary)
        outcome.stages = dict(self.clock.stages)
        return outcome

    def _take_over(self, outcome: RunOutcome) -> None:
        """A run that did something before (restarted service, `train --resume`): its recorded
        evaluations are kept (version 0 is "before", the last version "after", others "step N") and
        its steps replayed to the trackers; the resumed version is evaluated if its periodic
        evaluation was interrupted."""
        trainer, steps = self.trainer, self.cfg.trainer.steps
        assert trainer is not None
        recorded = recorded_results(self.parts.store.list_evals(trainer.run_id)) if self.main else []
        if trainer.version == 0 and not recorded:
            return
        for result in recorded:
            v = result.version
            label = "before" if v == 0 else "after" if v >= steps else f"step {v}"
            outcome.evals.append(LabelledEval(label, result))
            self._track_eval(result, replay=True)
        if self.main:
            for step in steps_from_store(self.parts.store, trainer.run_id):
                self.tracker.log(step["step"], step_scalars(step), replay=True)
        kept = ", ".join(f"{ev.label} (v{ev.result.version})" for ev in outcome.evals) or "none"
        note = (
            f"resumed run {trainer.run_id} at version {trainer.version} (step {trainer.version} of "
            f"{steps}); recorded evaluations kept: {kept}"
        )
        self.observer.note(note)
        outcome.notes.append(f"{note}. Stage times and minutes are this process's only.")
        if self._periodic_eval_due(trainer.version):
            self._evaluate(outcome, f"step {trainer.version}", "eval during training")

    def _periodic_eval_due(self, version: int) -> bool:
        every = self.cfg.evaluation.every_steps
        return bool(every) and 0 < version < self.cfg.trainer.steps and version % every == 0

    def _train(self, outcome: RunOutcome) -> None:
        t, trainer = self.cfg.trainer, self.trainer
        assert trainer is not None
        durations: list[float] = []
        reserve = 0.0
        if outcome.evals:  # the final evaluation costs at most about what the first one did: a trained
            # policy's replies are shorter (quickstarts on record: 0.81-0.90 of the first's time)
            reserve = outcome.evals[0].result.seconds + 10.0
        while trainer.version < t.steps:
            if self.stop.is_set():
                self._end_early(outcome, f"stopped after {trainer.version} of {t.steps} steps: asked to stop")
                outcome.stopped = True
                return
            if self.deadline is not None and durations:
                left = self.deadline - time.monotonic()
                if left < max(durations[-3:]) + reserve:
                    self._end_early(
                        outcome,
                        f"stopped after {trainer.version} of {t.steps} steps: the time budget "
                        f"({left:.0f} s left) would not fit another step and the final evaluation",
                    )
                    return
            rollouts = 0 if t.is_sft_step(trainer.version) else t.groups_per_step * t.group_size
            self.relay.target = self.observer.step_starting(trainer.version + 1, rollouts)
            started = time.monotonic()
            with self.clock.stage("train"):
                trainer.run(steps=1)
            durations.append(time.monotonic() - started)
            self.relay.target = None
            metrics = dict(trainer.status.metrics)
            if self.main:
                self.tracker.log(trainer.version, step_scalars(metrics))
            self.observer.step_done(trainer.version, t.steps, metrics, durations[-1])
            if self._periodic_eval_due(trainer.version):
                self._evaluate(outcome, f"step {trainer.version}", "eval during training")
        if self.stop.is_set():  # asked during the last step: the final evaluation is left to a resume
            self._end_early(outcome, f"stopped after the last step ({t.steps}): asked to stop before the final evaluation")
            outcome.stopped = True

    def _end_early(self, outcome: RunOutcome, note: str) -> None:
        outcome.notes.append(note)
        self.observer.note(note, warning=True)
        assert self.trainer is not None
        self.trainer.cancel_rollouts()  # an async prefetch would run into the final evaluation

    def _evaluate(self, outcome: RunOutcome, label: str, stage: str) -> None:
        """Evaluates the served policy, unless this rank does not evaluate, the parts cannot, or
        this version was evaluated already (a restarted run repeats no recorded evaluation)."""
        trainer = self.trainer
        assert trainer is not None
        if not (self.main and self.parts.evaluates):
            return
        if any(ev.result.version == trainer.version for ev in outcome.evals):
            return
        spec = self.spec
        total = len(spec.task_ids) * len(spec.harnesses) * spec.samples
        on_status = self.observer.eval_starting(label, trainer.version, total)
        with self.clock.stage(stage):
            result = self.parts.evaluate(
                spec, version=trainer.version, record_run_id=trainer.run_id, on_status=on_status
            )
        self._track_eval(result)
        self.observer.eval_done(label, result)
        outcome.evals.append(LabelledEval(label, result))

    def _track_eval(self, result: EvalResult, replay: bool = False) -> None:
        for harness, h in result.harnesses.items():
            pass_at = {k: p.value for k, p in h.pass_at.items()}
            self.tracker.log(result.version, eval_scalars(harness, pass_at, h.mean_reward), replay=replay)

    # --- results ---

    def summary(self, outcome: RunOutcome) -> dict[str, Any]:
        """Headline figures (`clawgym.report.summary`): steps, minutes, Pass@1 before/after per
        harness with 95% CIs and the paired difference, for the held-out instances of the trained
        families (the plain keys) and for the families never trained on (`_unseen_families`, named
        by `label_unseen_families`: siblings or new skills), each difference's interval over tasks
        and over families, what each set shares with training (read off the suite:
        `evaluation.shared`), Pass@1 per family, the evaluation's size."""
        out: dict[str, Any] = {"steps": outcome.version, "minutes": round(self.clock.elapsed / 60, 2)}
        first = next((e.result for e in outcome.evals if e.label == "before"), None)
        last = next((e.result for e in reversed(outcome.evals) if e.label == "after"), None)
        parts = self.held_out()
        trained, unseen = parts.ids("trained"), parts.ids("unseen")
        family_of = parts.family_of
        out |= before_after(self.spec.harnesses, first, last, trained or None, family_of=family_of)
        if unseen:
            out |= before_after(self.spec.harnesses, first, last, unseen, "_unseen_families", family_of)
            out["label_unseen_families"] = unseen_label(parts.shared["unseen"])
        out["eval_tasks"] = len(trained) if unseen else len(self.spec.task_ids)
        if unseen:
            out["eval_tasks_unseen_families"] = len(unseen)
        out["eval_samples"] = self.spec.samples
        trained_through = {h.name for h in self.cfg.trainer.harnesses}
        untrained = [h for h in self.spec.harnesses if h not in trained_through]
        out["held_out"] = {
            ("" if kind == "trained" else "_unseen_families"): describe(kind, shared, untrained)
            for kind, shared in sorted(parts.shared.items(), key=lambda kv: kv[0] != "trained")
        }
        out["per_family"] = per_family(
            self.spec.harnesses, {"before": first, "after": last}, family_of, parts.kind_of
        )
        for family, share in (parts.shared["unseen"].by_family if unseen else {}).items():
            out["per_family"][family]["shares"] = share.as_json()
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
            steps=steps_from_store(self.parts.store, outcome.run_id),
            evals=points,
            stages=dict(self.clock.stages),
            summary=outcome.summary,
            notes=outcome.notes,
        )
        return write_report(report, self.run_dir)
