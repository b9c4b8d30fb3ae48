"""`clawgym quickstart`: the main job on embedded defaults, CPU only, in one process.

SmolLM2-135M-Instruct through the reference harness on the bundled mini suite: evaluate held-out
Pass@1, train with GRPO over prefix trees (rollouts through the real proxy, orchestrator, local
sandboxes and verifiers), evaluate again, print before/after Pass@1 with 95% intervals, and write
a run folder (`runs/<timestamp>/`: report.md, plots, the SQLite store, config.yaml, run.log).

Defaults are tuned for about 15 minutes on 2 CPU cores (see bench/quickstart.py for the measured
figures); `--minutes` is a budget: training stops between steps when another step plus the final
evaluation would not fit.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from clawgym.config import ClawgymConfig
from clawgym_app.logs import log_to_file, quiet_libraries, set_threads
from clawgym_app.runtime import HarnessSettings, Runtime
from clawgym_app.training_run import RunOutcome, TrainingRun


@dataclass(frozen=True)
class QuickstartOptions:
    """Every knob of the quickstart (the CLI's options); defaults fit ~15 minutes on 2 cores."""

    model: str = "smollm2-135m"
    suite: str = "mini"
    max_level: int = 2
    steps: int = 24
    eval_tasks: int = 0
    eval_samples: int = 1
    group_size: int = 8
    groups_per_step: int = 4
    lr: float = 5e-5
    temperature: float = 0.7
    max_new_tokens: int = 40
    max_turns: int = 1
    concurrency: int = 8
    threads: int = 0
    minutes: float = 15.0
    seed: int = 0
    run_dir: str = ""

    def config(self, run_dir: Path) -> ClawgymConfig:
        """The whole `ClawgymConfig` of the quickstart run (embedded mode)."""
        train_ids, eval_ids = self.task_ids()
        return ClawgymConfig(
            store={"url": f"sqlite:///{run_dir / 'clawgym.db'}", "bus_url": "memory://", "grpc_url": ""},
            inference={"model": self.model, "engine": "torch", "dtype": "float32", "grpc_url": ""},
            proxy={
                "model": self.model,
                "max_new_tokens": self.max_new_tokens,
                "temperature": self.temperature,
            },
            sandbox={"backend": "local"},
            orchestrator={
                "grpc_url": "",
                "max_concurrent_rollouts": self.concurrency,
                "max_attempts": 2,
                "retry_backoff_s": 0.5,
            },
            trainer={
                "model": self.model,
                "run_name": "quickstart",
                "steps": self.steps,
                "group_size": self.group_size,
                "groups_per_step": self.groups_per_step,
                # β1 = 0: no momentum. Once the policy sharpens, whole batches can carry no reward
                # variance (every group all-pass or all-fail) and a zero gradient; with momentum, AdamW
                # would still step in the previous direction (measured: the policy drifted and the
                # batch reward fell from 0.5 to 0.0 over such steps). Cosine decay calms the last steps.
                "algorithm": {
                    "name": "grpo",
                    "lr": self.lr,
                    "betas": (0.0, 0.999),
                    "lr_schedule": "cosine",
                    "min_lr_ratio": 0.1,
                },
                "harnesses": [{"name": "reference", "weight": 1.0}],
                "suite": self.suite,
                "tasks": train_ids,
                "seed": self.seed,
                "mode": "sync",
                "max_policy_lag": 1,
                "checkpoint_uri": str(run_dir / "checkpoints"),
                "keep_checkpoints": 1,
                "save_optimizer_state": False,  # a quickstart never resumes: ~2.5 s a step saved
                "rollout_timeout_s": 900.0,
                "sweep_interval_s": 5.0,
            },
            evaluation={"task_ids": eval_ids, "samples": self.eval_samples, "ks": [1], "split": "test"},
        )

    def task_ids(self) -> tuple[list[str], list[str]]:
        """(train, held-out) task ids: the suite's train and test splits, at most `max_level` (tasks
        carrying a `level`), the held-out ones cut to `eval_tasks` spread over families."""
        from clawgym.evaluation.select import spread
        from clawgym.tasks.loader import load_tasks
        from clawgym.tasks.suites import resolve_suite

        tasks = [t for t in load_tasks(resolve_suite(self.suite)) if not t.unsupported]
        if self.max_level:
            tasks = [t for t in tasks if int(t.metadata.get("level", 0) or 0) <= self.max_level]
        train = [t.id for t in tasks if t.split == "train"] or [t.id for t in tasks]
        held_out = [t for t in tasks if t.split == "test"] or tasks
        return train, [t.id for t in spread(held_out, self.eval_tasks)]

    def harness_settings(self) -> dict[str, HarnessSettings]:
        return {"reference": HarnessSettings(max_turns=self.max_turns, max_tokens=self.max_new_tokens)}


def new_run_dir(root: str | Path = "runs") -> Path:
    """runs/<YYYYmmdd-HHMMSS>/ (a suffix if that exists already)."""
    base = Path(root) / time.strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    path.mkdir(parents=True)
    return path


def run_quickstart(opts: QuickstartOptions, console: Console) -> RunOutcome:
    """The whole quickstart; progress on `console`; returns the outcome (summary, report path)."""
    started = time.monotonic()
    run_dir = Path(opts.run_dir) if opts.run_dir else new_run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    log_to_file(run_dir / "run.log")
    quiet_libraries()
    threads = set_threads(opts.threads)
    cfg = opts.config(run_dir)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    levels = f", levels <= {opts.max_level}" if opts.max_level else ""
    train_ids, eval_ids = cfg.trainer.tasks, cfg.evaluation.task_ids
    console.print(
        f"[bold]clawgym quickstart[/bold] → {run_dir}\n  {opts.model} through the reference harness on the "
        f"{opts.suite} suite{levels}: {len(train_ids)} train tasks, {len(eval_ids)} held-out tasks"
    )
    with console.status(f"starting the embedded runtime: store, {opts.model} engine, proxy, orchestrator"):
        t0 = time.monotonic()
        runtime = Runtime.open(cfg, opts.harness_settings())
        open_s = time.monotonic() - t0
    with runtime:
        run = TrainingRun(
            runtime,
            run_dir,
            console,
            title=f"clawgym quickstart: {opts.model} through the reference harness on {opts.suite}",
            deadline=started + 60 * opts.minutes,
            settings={"quickstart": asdict(opts), "torch_threads": threads, "proxy_url": runtime.proxy_url},
        )
        run.clock.stages["start runtime"] = open_s
        outcome = run.run()
    outcome.summary["minutes"] = round((time.monotonic() - started) / 60, 2)
    outcome.summary["run_dir"] = str(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(outcome.summary, indent=2) + "\n")
    return outcome


def summary_table(outcome: RunOutcome) -> Table:
    """The final table: Pass@1 before and after with 95% intervals, the difference, time per stage."""
    s = outcome.summary
    table = Table(title="clawgym quickstart", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")

    def interval(key: str) -> str:
        low, high = s.get(key, [float("nan")] * 2)
        return f"[{low:.3f}, {high:.3f}]"

    if "pass1_before" in s:
        table.add_row("held-out Pass@1 before", f"{s['pass1_before']:.3f}  {interval('ci95_before')}")
    if "pass1_after" in s:
        table.add_row("held-out Pass@1 after", f"{s['pass1_after']:.3f}  {interval('ci95_after')}")
    if "delta" in s:
        verdict = "[green]yes[/green]" if s.get("significant") else "[yellow]no[/yellow]"
        table.add_row("difference (paired 95% CI)", f"{s['delta']:+.3f}  {interval('ci95_delta')}")
        table.add_row("95% intervals apart", verdict)
    table.add_row("eval tasks × samples", f"{s.get('eval_tasks')} × {s.get('eval_samples')}")
    table.add_row("training steps", str(s.get("steps")))
    for stage, seconds in outcome.stages.items():
        table.add_row(f"  {stage}", f"{seconds:.0f} s")
    table.add_row("minutes", f"{s.get('minutes', 0):.1f}")
    if outcome.report is not None:
        table.add_row("report", str(outcome.report))
    return table


def json_line(outcome: RunOutcome) -> str:
    """The `--json` object: the contract's keys first, then everything else the summary has."""
    s: dict[str, Any] = dict(outcome.summary)
    head = {
        k: s.pop(k, None) for k in ("pass1_before", "pass1_after", "ci95_before", "ci95_after", "minutes")
    }
    return json.dumps({**head, **s, "stages_s": {k: round(v, 1) for k, v in outcome.stages.items()},
                       "report": str(outcome.report) if outcome.report else None})  # fmt: skip
