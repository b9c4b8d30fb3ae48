"""The `clawgym` command line: one typer app; each command calls into clawgym or a service."""

import importlib

import typer
from rich.console import Console

app = typer.Typer(
    help="clawgym: RL for LLM agents through the harnesses people already use.", no_args_is_help=True
)
serve_app = typer.Typer(help="Run one clawgym microservice.", no_args_is_help=True)
app.add_typer(serve_app, name="serve")
app.add_typer(importlib.import_module("clawgym_app.session_cmd").session_app, name="session")
app.add_typer(importlib.import_module("clawgym_app.tasks_cmd").app, name="tasks")
console = Console()

SERVICES = ("store", "inference", "proxy", "orchestrator", "trainer")


def _serve(name: str, ctx: typer.Context) -> None:
    """Hands the remaining arguments to the service's own `main(argv)`."""
    module = importlib.import_module(f"clawgym_services.{name}.__main__")
    raise typer.Exit(module.main(list(ctx.args)) or 0)


def _register_serve(name: str) -> None:
    def command(ctx: typer.Context) -> None:
        _serve(name, ctx)

    command.__doc__ = f"Run the {name} service (`clawgym serve {name} --help` for its options)."
    serve_app.command(
        name,
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    )(command)


for _name in SERVICES:
    _register_serve(_name)

# The run commands (ARCHITECTURE.md §3); each module keeps its heavy imports inside the command.
for _command, _module in (
    ("quickstart", "clawgym_app.quickstart_cmd"),
    ("train", "clawgym_app.train_cmd"),
    ("eval", "clawgym_app.eval_cmd"),
    ("rollout", "clawgym_app.rollout_cmd"),
):
    app.command(_command)(importlib.import_module(_module).command)


@app.command()
def version() -> None:
    """Print the clawgym version."""
    from clawgym import __version__

    console.print(f"clawgym {__version__}")


def main() -> None:
    app()
