"""`clawgym eval -c run.yaml [--checkpoint V] [--harness H] [--k K]`: Pass@k with 95% intervals.

Evaluates a policy through one or more harnesses on held-out tasks of a suite: a checkpoint of the
config's run (`--checkpoint V`, loaded into the engine first), a checkpoint folder, or whatever the
engine serves (the base policy embedded; the inference service's current version otherwise).
Results are recorded in the store (`record_eval`) against the config's training run when the store
knows it (so reports show them beside its steps), else against an eval run of their own, and
printed per harness × suite. `--harness oracle` / `--harness nop` validate a suite (the oracle
should pass every task, nop none) without a model in the loop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from clawgym.errors import ClawgymError

if TYPE_CHECKING:
    from clawgym.config import ClawgymConfig
    from clawgym.evaluation.runner import EvalResult, EvalSpec
    from clawgym.store.interface import TrajectoryStore


@dataclass(frozen=True)
class EvalRequest:
    """The command line's choices; empty/negative values defer to the config's `evaluation` section."""

    checkpoint: str = ""
    harnesses: list[str] = field(default_factory=list)
    k: int = 1
    samples: int = 0
    tasks: int = -1
    suite: str = ""
    split: str = ""
    model: str = ""


def command(
    config: Path = typer.Option(None, "--config", "-c", help="run config YAML; default: embedded defaults"),
    checkpoint: str = typer.Option(
        "", help="a version of the config's run, or a checkpoint folder/URI; default: what the engine serves"
    ),
    harness: list[str] = typer.Option([], "--harness", "-H", help="harness to evaluate through (repeatable)"),
    k: int = typer.Option(1, "--k", "-k", help="also report Pass@k (needs samples >= k)"),
    samples: int = typer.Option(0, help="rollouts per task (default: max(k, evaluation.samples))"),
    tasks: int = typer.Option(
        -1, help="number of tasks, spread over families (default evaluation.tasks; 0 = all)"
    ),
    suite: str = typer.Option("", help="suite (default evaluation.suite or trainer.suite)"),
    split: str = typer.Option("", help="split (default evaluation.split)"),
    model: str = typer.Option("", help="policy model spec (default trainer.model, else smollm2-135m)"),
    as_json: bool = typer.Option(False, "--json", help="print the results as one JSON object"),
) -> None:
    """Pass@1 and Pass@k (unbiased) with 95% intervals per harness × suite; stored in the store."""
    from clawgym.config import load_config

    console = Console(stderr=True) if as_json else Console()
    try:
        cfg = load_config(config)
        request = EvalRequest(checkpoint=checkpoint, harnesses=harness, k=k, samples=samples, tasks=tasks,
                              suite=suite, split=split, model=model)  # fmt: skip
        result, run_id = run_eval(cfg, request, console)
    except ClawgymError as e:
        console.print(f"[red]clawgym eval:[/red] {e}")
        raise typer.Exit(2) from e
    if as_json:
        print(json.dumps({"run_id": run_id, "version": result.version, "suite": result.suite,
                          "seconds": round(result.seconds, 1),
                          "harnesses": {h: r.metrics(result.suite, result.version)
                                        for h, r in result.harnesses.items()}}))  # fmt: skip
        return
    console.print(results_table(result, run_id))


# --- the evaluation: config, policy version, run, progress ---


def configure(cfg: ClawgymConfig, req: EvalRequest) -> tuple[ClawgymConfig, EvalSpec]:
    """The config to open (the model filled in, the request's choices in its `evaluation` section)
    and the evaluation to run."""
    from clawgym.errors import InvalidArgument
    from clawgym.evaluation.select import eval_spec
    from clawgym.policies.specs import SMOLLM2_135M

    if req.k < 1:
        raise InvalidArgument(f"--k must be >= 1, got {req.k}")
    e = cfg.evaluation
    samples = req.samples or max(req.k, e.samples)
    update: dict = {"samples": samples, "ks": sorted({1, req.k, *(kk for kk in e.ks if kk <= samples)})}
    update |= {name: getattr(req, name) for name in ("suite", "split", "harnesses") if getattr(req, name)}
    if req.tasks >= 0:
        update["tasks"] = req.tasks
    if req.tasks >= 0 or req.split or req.suite:
        update["task_ids"] = []  # a new choice of tasks replaces the config's own list
    model = req.model or cfg.trainer.model or SMOLLM2_135M
    cfg = cfg.model_copy(
        update={
            "trainer": cfg.trainer.model_copy(update={"model": model}),
            "evaluation": e.model_copy(update=update),
        }
    )
    sandbox = cfg.orchestrator.sandbox_config(cfg.sandbox)
    harnesses = [h.name for h in cfg.trainer.harnesses]
    return cfg, eval_spec(cfg.evaluation, cfg.trainer.suite, harnesses, sandbox.task_images)


def known_run(store: TrajectoryStore, cfg: ClawgymConfig) -> str:
    """The config's training run id if the store knows it (trainer.run_id or the checkpoint folder's
    run.json), else ''."""
    from clawgym.errors import NotFound
    from clawgym.trainer.checkpoint import recorded_run_id

    run_id = cfg.trainer.run_id or recorded_run_id(cfg.trainer)
    if not run_id:
        return ""
    try:
        return store.get_run(run_id).id
    except NotFound:
        return ""


def checkpoint_uri(store: TrajectoryStore, run_id: str, checkpoint: str) -> tuple[int, str]:
    """(version, uri) of `--checkpoint`: a version number of the run, or a folder/URI (version 0 unless vN)."""
    from clawgym.errors import NotFound
    from clawgym.trainer.checkpoint import find_checkpoint, version_of

    if checkpoint.isdigit():
        if not run_id:
            raise NotFound(
                "--checkpoint V needs the config's run in the store (trainer.run_id or its run.json)"
            )
        return int(checkpoint), find_checkpoint(store, run_id, int(checkpoint))
    return version_of(checkpoint) or 0, checkpoint


def run_eval(cfg: ClawgymConfig, req: EvalRequest, console: Console) -> tuple[EvalResult, str]:
    """Opens the runtime, serves the requested checkpoint, evaluates, records; returns (result, run id)."""
    from clawgym_app.logs import quiet_libraries
    from clawgym_app.progress import RolloutBar, make_progress
    from clawgym_app.runtime import Runtime

    quiet_libraries()
    cfg, spec = configure(cfg, req)
    with console.status("starting the runtime (store, engine, proxy, orchestrator)"):
        runtime = Runtime.open(cfg)
    with runtime:
        run_id = known_run(runtime.store, cfg)
        version = runtime.served_version()
        if req.checkpoint:
            version, uri = checkpoint_uri(runtime.store, run_id, req.checkpoint)
            with console.status(f"loading checkpoint v{version} into the engine"):
                runtime.load_checkpoint(version, uri)
        if not run_id:
            run_id = runtime.store.create_run("eval", {"kind": "eval", "model": cfg.trainer.model}).id
        total = len(spec.task_ids) * len(spec.harnesses) * spec.samples
        with make_progress(console) as progress:
            bar = RolloutBar(progress, f"eval v{version} ({', '.join(spec.harnesses)})", total)
            result = runtime.evaluate(spec, version=version, record_run_id=run_id, on_status=bar)
    return result, run_id


# --- printing ---


def results_table(result: EvalResult, run_id: str) -> Table:
    """One row per harness: tasks, samples, each Pass@k with its interval, mean reward, failures."""
    table = Table(title=f"clawgym eval · policy v{result.version} · run {run_id}")
    for column in (
        "harness",
        "suite",
        "tasks",
        "samples",
        "Pass@k (95% CI)",
        "mean reward",
        "infra failures",
    ):
        table.add_column(column)
    for name, r in result.harnesses.items():
        passes = "\n".join(
            f"Pass@{kk} {p.value:.3f} [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}] ({p.method})"
            for kk, p in r.pass_at.items()
        )
        table.add_row(name, result.suite, str(len(r.counts)), str(sum(t.n for t in r.counts)), passes,
                      f"{r.mean_reward:.3f}", str(r.infra_failures))  # fmt: skip
    return table
