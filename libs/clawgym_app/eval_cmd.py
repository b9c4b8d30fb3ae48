"""`clawgym eval -c run.yaml [--checkpoint V] [--harness H] [--k K]`: Pass@k with 95% intervals.

Evaluates a policy through one or more harnesses on held-out tasks of a suite: a checkpoint of the
config's run (`--checkpoint V`, loaded into the engine first), a checkpoint folder, or whatever the
engine serves (the base policy embedded; the inference service's current version otherwise).
Results are recorded in the store (`record_eval`) against the config's run (or an eval run of
their own) and printed per harness × suite. `--harness oracle` / `--harness nop` validate a suite
(the oracle should pass every task, nop none) without a model in the loop.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from clawgym.errors import ClawgymError


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
    from clawgym_app.evaluate import EvalRequest, run_eval

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
    console.print(table)
