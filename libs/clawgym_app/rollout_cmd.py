"""`clawgym rollout --harness H --task DIR [--model SPEC]`: one task through one harness, shown whole.

Runs the task once through the embedded runtime (or the services a `-c` config names), then prints
the rollout's outcome, every captured call (tokens in and out, the context the harness added since
the previous call, the policy's reply as decoded from its exact output ids) and the prefix tree
with shared and generated token counts (`clawgym.trajectory.render`).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.panel import Panel

from clawgym.errors import ClawgymError


def command(
    harness: str = typer.Option(
        ..., "--harness", "-H", help="harness name (reference, mini-swe-agent, oracle, …)"
    ),
    task: str = typer.Option(..., "--task", "-t", help="a task folder, or a task id of --suite"),
    suite: str = typer.Option("mini", help="the suite a task id belongs to (ignored for a folder)"),
    model: str = typer.Option("", help="policy model spec (default trainer.model, else smollm2-135m)"),
    config: Path = typer.Option(None, "--config", "-c", help="run config YAML; default: embedded defaults"),
    max_new_tokens: int = typer.Option(0, help="cap generated tokens per call (0 = the config's)"),
    temperature: float = typer.Option(None, help="force this sampling temperature (default: the request's)"),
    preview: int = typer.Option(600, help="characters of each call's text shown"),
    as_json: bool = typer.Option(False, "--json", help="print the rollout and its calls as one JSON object"),
) -> None:
    """Run one task through one harness; print the captured calls and the prefix tree."""
    from clawgym.config import load_config
    from clawgym_app.rollout_view import run_one, show

    console = Console(stderr=True) if as_json else Console()
    try:
        cfg = load_config(config)
        proxy = cfg.proxy.model_copy(
            update={
                **({"max_new_tokens": max_new_tokens} if max_new_tokens else {}),
                **({"temperature": temperature} if temperature is not None else {}),
            }
        )
        model = model or cfg.trainer.model or "smollm2-135m"
        cfg = cfg.model_copy(
            update={"proxy": proxy, "trainer": cfg.trainer.model_copy(update={"model": model})}
        )
        shown = run_one(cfg, harness, task, suite, console)
    except ClawgymError as e:
        console.print(f"[red]clawgym rollout:[/red] {e}")
        raise typer.Exit(2) from e
    if as_json:
        print(json.dumps(shown.as_json()))
    else:
        show(shown, console, preview)
        if shown.status.state != "finished":
            console.print(Panel(shown.status.error or shown.status.state, title="rollout did not finish"))
