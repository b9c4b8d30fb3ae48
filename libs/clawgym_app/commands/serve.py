"""`clawgym serve <service> [ARGS]`: runs one microservice; ARGS go to the service's own `main(argv)`.

Each command imports its service's `__main__` only when it runs, so `clawgym --help` loads none. A
config error (an unknown flag or key, a bad value) is one line and exit status 2, as in every command.
"""

from collections.abc import Callable

import typer

from clawgym.errors import ClawgymError

serve_app = typer.Typer(help="Run one clawgym microservice.", no_args_is_help=True)

# Every argument, `--help` included, belongs to the service's own argparse.
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def _run(service: str, main: Callable[[list[str]], int | None], args: list[str]) -> typer.Exit:
    try:
        code = main(args)
    except ClawgymError as e:
        typer.echo(f"clawgym serve {service}: {e}", err=True)
        return typer.Exit(2)
    return typer.Exit(code or 0)


@serve_app.command("store", context_settings=_PASS_THROUGH)
def store(ctx: typer.Context) -> None:
    """Run the store service (`clawgym serve store --help` for its options)."""
    from clawgym_services.store.__main__ import main

    raise _run("store", main, list(ctx.args))


@serve_app.command("inference", context_settings=_PASS_THROUGH)
def inference(ctx: typer.Context) -> None:
    """Run the inference service (`clawgym serve inference --help` for its options)."""
    from clawgym_services.inference.__main__ import main

    raise _run("inference", main, list(ctx.args))


@serve_app.command("proxy", context_settings=_PASS_THROUGH)
def proxy(ctx: typer.Context) -> None:
    """Run the proxy service (`clawgym serve proxy --help` for its options)."""
    from clawgym_services.proxy.__main__ import main

    raise _run("proxy", main, list(ctx.args))


@serve_app.command("orchestrator", context_settings=_PASS_THROUGH)
def orchestrator(ctx: typer.Context) -> None:
    """Run the orchestrator service (`clawgym serve orchestrator --help` for its options)."""
    from clawgym_services.orchestrator.__main__ import main

    raise _run("orchestrator", main, list(ctx.args))


@serve_app.command("trainer", context_settings=_PASS_THROUGH)
def trainer(ctx: typer.Context) -> None:
    """Run the trainer service (`clawgym serve trainer --help` for its options)."""
    from clawgym_services.trainer.__main__ import main

    raise _run("trainer", main, list(ctx.args))
