"""The `clawgym` command line: one typer app; each command is a module of `clawgym_app.commands`.

Command modules import their heavy modules (torch, transformers, the services) inside the command,
so importing them here keeps `clawgym --help` quick.
"""

import typer
from rich.console import Console

from clawgym_app.commands import (
    browse,
    config,
    evaluate,
    export,
    quickstart,
    rollout,
    serve,
    session,
    tasks,
    train,
)

app = typer.Typer(
    help="clawgym: RL for LLM agents through the harnesses people already use.", no_args_is_help=True
)
app.add_typer(serve.serve_app, name="serve")
app.add_typer(session.session_app, name="session")
app.add_typer(tasks.tasks_app, name="tasks")
app.add_typer(config.config_app, name="config")
# The run commands (ARCHITECTURE.md §3).
app.command("quickstart")(quickstart.command)
app.command("train")(train.command)
app.command("eval")(evaluate.command)
app.command("rollout")(rollout.command)
# Reading what a run captured.
app.command("export")(export.command)
app.command("browse")(browse.command)
console = Console()


@app.command()
def version() -> None:
    """Print the clawgym version."""
    from clawgym import __version__

    console.print(f"clawgym {__version__}")


def main() -> None:
    app()
