"""`clawgym quickstart` on the command line: options → `QuickstartOptions` → `run_quickstart`.

Kept light to import (the heavy modules load when the command runs), so `clawgym --help` is quick.
"""

from __future__ import annotations

import sys
from types import MappingProxyType

import typer
from rich.console import Console

from clawgym.errors import ClawgymError

D = MappingProxyType(
    {  # QuickstartOptions' defaults, repeated so --help needs no torch import (a test checks)
        "model": "smollm2-135m",
        "steps": 24,
        "eval_tasks": 0,
        "eval_samples": 1,
        "group_size": 8,
        "groups_per_step": 4,
        "lr": 5e-5,
        "temperature": 0.7,
        "max_new_tokens": 40,
        "max_turns": 1,
        "concurrency": 8,
        "minutes": 15.0,
    }
)


def command(
    model: str = typer.Option(D["model"], help="policy: smollm2-135m, tiny-qwen3 or a local HF folder"),
    steps: int = typer.Option(D["steps"], help="GRPO steps (optimizer steps = policy versions)"),
    eval_tasks: int = typer.Option(
        D["eval_tasks"], help="held-out tasks evaluated before and after, spread over families (0 = all)"
    ),
    eval_samples: int = typer.Option(D["eval_samples"], help="rollouts per held-out task (n of Pass@1)"),
    group_size: int = typer.Option(D["group_size"], "--group-size", "-G", help="G: samples per task group"),
    groups_per_step: int = typer.Option(D["groups_per_step"], help="task groups per step"),
    lr: float = typer.Option(D["lr"], help="AdamW learning rate"),
    temperature: float = typer.Option(D["temperature"], help="sampling temperature of every model call"),
    max_new_tokens: int = typer.Option(D["max_new_tokens"], help="generated tokens per model call, at most"),
    max_turns: int = typer.Option(D["max_turns"], help="reference harness: model calls per rollout, at most"),
    concurrency: int = typer.Option(D["concurrency"], help="rollouts running at once"),
    threads: int = typer.Option(
        0, help="torch threads; 0 = auto (1 when other processes keep the cores busy)"
    ),
    minutes: float = typer.Option(D["minutes"], help="time budget: training stops early to fit it"),
    suite: str = typer.Option("mini", help="task suite (train split to train, test split to evaluate)"),
    max_level: int = typer.Option(
        2, help="only task families up to this level (the mini suite's 1-3); 0 = every task"
    ),
    seed: int = typer.Option(0, help="seed of task sampling"),
    run_dir: str = typer.Option("", help="run folder (default runs/<timestamp>)"),
    as_json: bool = typer.Option(
        False, "--json", help="print one final JSON object (progress goes to stderr)"
    ),
) -> None:
    """Train the bundled small policy through the reference harness on the bundled suite; Pass@1 before/after."""
    from clawgym_app.quickstart import QuickstartOptions, json_line, run_quickstart, summary_table

    opts = QuickstartOptions(
        model=model, suite=suite, max_level=max_level, steps=steps, eval_tasks=eval_tasks, eval_samples=eval_samples,
        group_size=group_size, groups_per_step=groups_per_step, lr=lr, temperature=temperature,
        max_new_tokens=max_new_tokens, max_turns=max_turns, concurrency=concurrency, threads=threads, minutes=minutes,
        seed=seed, run_dir=run_dir,
    )  # fmt: skip
    console = Console(stderr=True) if as_json else Console()
    try:
        outcome = run_quickstart(opts, console)
    except ClawgymError as e:
        console.print(f"[red]clawgym quickstart:[/red] {e}")
        raise typer.Exit(2) from e
    if as_json:
        print(json_line(outcome), file=sys.stdout, flush=True)
    else:
        console.print(summary_table(outcome))
