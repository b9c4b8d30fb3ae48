"""`clawgym tasks list|import|check`: task suites from the command line (a shell over `clawgym.tasks`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from clawgym.errors import ClawgymError

tasks_app = typer.Typer(
    help="Task suites: list, import, check (oracle passes, nop fails).", no_args_is_help=True
)
console = Console()


def _fail(e: Exception) -> typer.Exit:
    console.print(f"[red]error:[/red] {e}")
    return typer.Exit(2)


@tasks_app.command("list")
def list_cmd(
    suite: str = typer.Argument("", help="a suite name or folder; empty: list the suites"),
    split: str = typer.Option("", help="only this split (train/test)"),
    root: Path = typer.Option(
        None, help="where imported suites live (default ~/.local/share/clawgym/suites)"
    ),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
) -> None:
    """List the suites, or the tasks of one suite."""
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import list_suites, resolve_suite

    try:
        if not suite:
            rows = [(s.name, s.format, str(s.tasks), str(s.path)) for s in list_suites(root)]
            header = ("suite", "format", "tasks", "path")
        else:
            tasks = load_tasks(resolve_suite(suite, root), split=split or None)
            rows = [
                (t.id, t.format, t.split, t.unsupported or "", t.instruction.splitlines()[0][:80])
                for t in tasks
            ]
            header = ("task", "format", "split", "unsupported", "instruction")
    except ClawgymError as e:
        raise _fail(e) from e
    if as_json:
        for row in rows:
            print(json.dumps(dict(zip(header, row, strict=True))))
        return
    table = Table(*header)
    for row in rows:
        table.add_row(*row)
    console.print(table)


@tasks_app.command("import")
def import_cmd(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="clawgym, terminal-bench (tb) or harbor (tb2)"),
    src: Path = typer.Argument(..., help="a task folder, or a folder of task folders"),
    name: str = typer.Option("", help="suite name (default: the folder's name)"),
    root: Path = typer.Option(
        None, help="where imported suites live (default ~/.local/share/clawgym/suites)"
    ),
    replace: bool = typer.Option(False, help="replace a suite of the same name"),
) -> None:
    """Import the tasks under SRC into a local suite (every task must load first)."""
    from clawgym.tasks.suites import import_suite

    try:
        info = import_suite(fmt, src, root, name or None, replace=replace)
    except ClawgymError as e:
        raise _fail(e) from e
    console.print(
        f"imported {info.tasks} {info.format} tasks as suite [bold]{info.name}[/bold] ({info.path})"
    )


@tasks_app.command("check")
def check_cmd(
    suite: str = typer.Argument(..., help="a suite name or folder"),
    split: str = typer.Option("", help="only this split (train/test)"),
    limit: int = typer.Option(0, help="check at most this many tasks (0: all)"),
    concurrency: int = typer.Option(4, help="tasks checked at once"),
    root: Path = typer.Option(None, help="where imported suites live"),
    as_json: bool = typer.Option(False, "--json", help="a JSON line per task, then the summary object"),
    backend: str = typer.Option(
        "",
        help="sandbox backend: local (the default) or docker (each task in its own image, built "
        "from its Dockerfile); empty: the config's sandbox.backend",
    ),
    config: Path = typer.Option(
        None, "-c", "--config", help="a run config whose `sandbox` section is used (and CLAWGYM_SANDBOX__*)"
    ),
) -> None:
    """Per task: the oracle passes (if it has a solution) and nop fails, in sandboxes (local by default)."""
    from clawgym.config import load_config
    from clawgym.orchestrator.check import check_locally, summarize
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    try:
        sandbox = load_config(config, flags={"sandbox": {"backend": backend}} if backend else None).sandbox
        tasks = load_tasks(resolve_suite(suite, root), split=split or None)
    except ClawgymError as e:
        raise _fail(e) from e
    tasks = tasks[:limit] if limit else tasks

    def show(check) -> None:
        if as_json:
            print(json.dumps(check.as_json()), flush=True)
        else:
            mark = "[green]ok[/green]" if check.ok else "[red]FAIL[/red]"
            console.print(f"{mark} {check.task_id}" + (f"  {check.error}" if check.error else ""))
            if not check.ok and not check.error:
                console.print(check.as_json()["detail"], markup=False)

    try:
        checks = asyncio.run(check_locally(tasks, concurrency=concurrency, on_done=show, cfg=sandbox))
    except ClawgymError as e:  # the backend cannot start (no bubblewrap, no Docker engine)
        raise _fail(e) from e
    summary = summarize(checks)
    if as_json:
        print(json.dumps(summary))
    else:
        console.print(summary)
    raise typer.Exit(0 if all(c.ok for c in checks) else 1)
