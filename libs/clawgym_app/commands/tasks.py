"""`clawgym tasks list|import|check`: task suites from the command line (a shell over `clawgym.tasks`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.tasks.splits import SplitRule
from clawgym_app.config_options import set_option

tasks_app = typer.Typer(
    help="Task suites: list, import, check (oracle passes, nop fails).", no_args_is_help=True
)
console = Console(soft_wrap=True)  # long paths and reasons stay on one line, for grep


def _fail(e: Exception) -> typer.Exit:
    console.print(f"[red]error:[/red] {escape(str(e))}")
    return typer.Exit(2)


@tasks_app.command("list")
def list_cmd(
    suite: str = typer.Argument("", help="a suite name or folder; empty: list the suites"),
    split: str = typer.Option("", help="only this split (train, validation or test)"),
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
        table.add_row(*(Text(cell) for cell in row))  # ids and instructions are data, not markup
    console.print(table)


@tasks_app.command("import")
def import_cmd(
    src: str = typer.Argument(
        ...,
        help="a folder of tasks, one task folder, a ClawGym .jsonl of task rows, or a git repository: "
        "git+URL-OR-PATH[#REF][:PATH], https://host/org/repo.git#REF:PATH, user@host:org/repo.git#:PATH "
        "(docs/task-suites.md)",
    ),
    old_src: str = typer.Argument(None, hidden=True, help="`tasks import FORMAT SRC`, the older form"),
    fmt: str = typer.Option(
        "",
        "--format",
        "-f",
        help="import only tasks of this layout: clawgym, terminal-bench (tb) or harbor (tb2); "
        "default: detected per task folder by its marker file",
    ),
    name: str = typer.Option("", help="suite name (default: the folder's, or the repository's, name)"),
    root: Path = typer.Option(
        None, help="where imported suites live (default ~/.local/share/clawgym/suites)"
    ),
    replace: bool = typer.Option(False, help="replace a suite of the same name"),
    strict: bool = typer.Option(False, help="import nothing if any task is broken"),
    git_cache: Path = typer.Option(
        None, help="where git repositories are fetched (default ~/.cache/clawgym/git)"
    ),
    held_out: float = typer.Option(
        SplitRule.held_out, "--held-out", help="the share of families (or tasks) held out of training: the test split"
    ),
    split_by: str = typer.Option(
        SplitRule.by,
        "--split-by",
        help="hold out whole families (a task's metadata.family, else its id without a trailing -N), "
        "so no family is in both splits; or single tasks",
    ),
    no_split: bool = typer.Option(False, "--no-split", help="assign no split (a task's own is kept)"),
    as_json: bool = typer.Option(False, "--json", help="a JSON line per task, then the summary object"),
) -> None:
    """Import the tasks under SRC into a local suite, reporting each task.

    Every task folder is reported: ok, caveats (runs, but not as in its own image), unsupported
    (imported; per backend, why it cannot run), broken (not imported; the load error) or skipped
    (another layout than --format). Broken tasks do not stop the import unless --strict. Tasks
    without a split of their own get one: --held-out of the families go to the test split, chosen
    by a hash seeded by the suite's name (a re-import holds out the same), recorded in suite.json.
    """
    from clawgym.tasks.loader import format_name
    from clawgym.tasks.splits import SplitRule
    from clawgym.tasks.suite_import import plan_import, write_suite

    try:
        if old_src is not None:
            fmt, src = format_name(src), old_src  # the older `tasks import FORMAT SRC`
        rule = None if no_split else SplitRule(split_by, held_out)  # type: ignore[arg-type]
        plan = plan_import(src, fmt or None, git_cache)
    except ClawgymError as e:
        raise _fail(e) from e
    for report in plan.reports:
        if as_json:
            print(json.dumps(report.as_json()), flush=True)
        else:
            _show_report(report)
    try:
        info = write_suite(plan, root, name or None, replace=replace, strict=strict, split=rule)
    except ClawgymError as e:
        raise _fail(e) from e
    summary = plan.summary()
    if as_json:
        where = {"suite": info.name, "path": str(info.path), "source": plan.source, "commit": plan.commit}
        print(json.dumps({**where, **summary, "split": info.split}))
        return
    _show_caveats(plan.reports)
    if info.split is not None:
        console.print(_split_line(info.split), markup=False)
    console.print(
        f"imported {summary['imported']} of {summary['found']} tasks as suite "
        f"[bold]{escape(info.name)}[/bold] "
        f"({escape(str(info.path))}): {summary['ok']} ok, {summary['caveats']} with caveats, "
        f"{summary['unsupported']} unsupported, {summary['broken']} broken, {summary['skipped']} skipped"
        + (f"; commit {plan.commit[:12]}" if plan.commit else "")
    )


_COLORS = {"ok": "green", "caveats": "yellow", "unsupported": "yellow", "broken": "red", "skipped": "dim"}


def _show_report(report) -> None:
    """One line per task: status, folder, layout (and id where it differs); then why, indented."""
    label = report.path if report.task == Path(report.path).name else f"{report.path} (id {report.task})"
    color = _COLORS[report.status]
    mark = report.status.upper() if report.status == "broken" else report.status
    console.print(f"[{color}]{mark:<11}[/{color}] {escape(label)} [dim]{report.format}[/dim]")
    if report.status in ("broken", "skipped"):
        console.print(f"    {report.reason}", markup=False)
    for backend, reason in report.backends.items():
        if reason is not None:
            console.print(f"    not on {backend}: {reason}", markup=False)
    # caveats follow the whole report, each once (`_show_caveats`)


def _show_caveats(reports) -> None:
    """Each distinct caveat once, most tasks first, with how many tasks it applies to and the first
    few of them (--json keeps them per task)."""
    from clawgym.tasks.support import grouped_caveats

    groups = sorted(grouped_caveats(reports).items(), key=lambda kv: -len(kv[1]))
    for note, tasks in groups:
        named = ", ".join(tasks[:3]) + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")
        console.print(f"caveat, {_count(len(tasks), 'task')} ({named}): {note}", markup=False)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _split_line(split: dict) -> str:
    """The held-out split an import recorded, in one line."""
    if split["by"] == "none":
        return f"split: none assigned (--no-split); {_count(split['kept'], 'task')} keep their own"
    held = ", ".join(split["test_families"][:8]) + (", …" if len(split["test_families"]) > 8 else "")
    line = (
        f"split by {split['by']} (seeded by the suite name {split['seed']!r}): {split['train']} train, "
        f"{_count(split['test'], 'test task')}; held-out families: {held or 'none'}"
    )
    if split["kept"]:
        line += f"; {_count(split['kept'], 'task')} kept its own split"
    return line + (f"; {split['note']}" if split["note"] else "")


@tasks_app.command("check")
def check_cmd(
    suite: str = typer.Argument(..., help="a suite name or folder"),
    split: str = typer.Option("", help="only this split (train, validation or test)"),
    task_ids: list[str] = typer.Option(
        [], "--task", help="check only this task (its id, or a broken task's folder name); repeatable"
    ),
    limit: int = typer.Option(0, help="check at most this many tasks (0: all)"),
    concurrency: int = typer.Option(4, help="tasks checked at once"),
    root: Path = typer.Option(None, help="where imported suites live"),
    as_json: bool = typer.Option(False, "--json", help="a JSON line per task, then the summary object"),
    backend: str = typer.Option(
        "",
        "--sandbox.backend",
        "--backend",
        help="sandbox backend: local (the default) or docker (each task in its own image, built "
        "from its Dockerfile); empty: the config's sandbox.backend",
    ),
    config: Path = typer.Option(
        None, "-c", "--config", help="a run config whose `sandbox` section is used (and CLAWGYM_SANDBOX__*)"
    ),
    sets: list[str] = set_option(),
) -> None:
    """Per task: the oracle passes (if it has a solution) and nop fails, in sandboxes (local by default).

    A task folder that does not load is reported as broken (its load error) and the others are
    checked all the same; the summary always follows. Exit 1 when any task is not ok.
    """
    from clawgym.config import load_config
    from clawgym.orchestrator.check import TaskCheck, broken_check, check_locally, summarize
    from clawgym.tasks.loader import scan_tasks
    from clawgym.tasks.suites import resolve_suite

    try:
        flags = {"sandbox": {"backend": backend}} if backend else None
        sandbox = load_config(config, flags=flags, sets=sets).sandbox
        folder = resolve_suite(suite, root)
        found = scan_tasks(folder)
    except ClawgymError as e:
        raise _fail(e) from e
    if not found:
        raise _fail(InvalidArgument(f"{folder}: no task folders"))
    if task_ids:
        missing = [t for t in dict.fromkeys(task_ids) if t not in {f.name for f in found}]
        if missing:
            raise _fail(InvalidArgument(f"{folder}: no task {', '.join(map(repr, missing))} in the suite"))
        found = [f for f in found if f.name in task_ids]
    # A broken task's split is unknown: it is kept whatever the split asked for.
    found = [f for f in found if f.task is None or not split or f.task.split == split]
    found = found[:limit] if limit else found

    def show(check) -> None:
        if as_json:
            print(json.dumps(check.as_json()), flush=True)
        elif check.broken:
            console.print(f"[red]BROKEN[/red] {escape(check.task_id)}  {escape(check.error)}")
        else:
            mark = "[green]ok[/green]" if check.ok else "[red]FAIL[/red]"
            error = f"  {escape(check.error)}" if check.error else ""
            console.print(f"{mark} {escape(check.task_id)}{error}")
            if not check.ok and not check.error:
                console.print(check.as_json()["detail"], markup=False)

    broken = [broken_check(f) for f in found if f.task is None]
    for check in broken:
        show(check)
    tasks = [f.task for f in found if f.task is not None]
    try:
        checks = asyncio.run(check_locally(tasks, concurrency=concurrency, on_done=show, cfg=sandbox)) if tasks else []
    except ClawgymError as e:  # the backend cannot start (no bubblewrap, no Docker engine): every task errs
        checks = [TaskCheck(t.id, error=f"{type(e).__name__}: {e}") for t in tasks]
        for check in checks:
            show(check)
    summary = summarize([*broken, *checks])
    if as_json:
        print(json.dumps(summary))
    else:
        console.print("summary: " + ", ".join(f"{key} {value}" for key, value in summary.items()))
    raise typer.Exit(0 if all(c.ok for c in [*broken, *checks]) else 1)
