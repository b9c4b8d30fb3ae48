"""`clawgym browse [--run-dir D | --store.url URL | --store.grpc-url HOST:PORT] [--port P] [--model SPEC]
[--allow-host H]`.

Serves the rollout browser (`clawgym.browse.app`) on loopback: runs → a run's steps,
groups and rollouts → one rollout's calls as the prefix tree, shared and generated tokens
coloured, each call's request, response, temperature, version and logprobs on hover. Token text
comes from `--model`'s tokenizer, else from the model a run's config names, else ids are shown.
It opens the store read-only, and answers only the Host names it is served by (`--allow-host` adds one).
"""

from pathlib import Path

import typer

from clawgym.errors import ClawgymError
from clawgym_app.config_options import set_option


def command(
    run: Path = typer.Argument(None, help="a run folder (runs/<name>/): the store its config.yaml names"),
    run_dir: Path = typer.Option(None, "--run-dir", help="a run folder, as the RUN argument"),
    store: str = typer.Option(
        "", "--store.url", "--store", help="store SQLAlchemy URL (sqlite:///…, postgresql+psycopg://…)"
    ),
    store_service: str = typer.Option(
        "", "--store.grpc-url", "--store-service", help="the store service's HOST:PORT"
    ),
    host: str = typer.Option("127.0.0.1", help="address to serve on (it shows every call: keep it local)"),
    port: int = typer.Option(8600, help="port to serve on"),
    model: str = typer.Option(
        "", help="policy model spec whose tokenizer decodes tokens (default: the run's)"
    ),
    allow_host: list[str] = typer.Option(
        [],
        "--allow-host",
        help="a Host name to answer besides the address served on (repeatable; *.example.com, * for any): "
        "other names get 403, against DNS rebinding",
    ),
    sets: list[str] = set_option(),
) -> None:
    """Browse a store's runs, groups, rollouts and prefix trees in a web page."""
    import uvicorn

    from clawgym.browse.app import create_browse_app
    from clawgym.preflight import Listen, check_port
    from clawgym_app.decoding import decoders
    from clawgym_app.store_source import open_read_store

    try:
        check_port(Listen(host, port, "port", "--port"))  # before the store opens and a tokenizer loads
        s = open_read_store(store, store_service, run or run_dir, sets)
    except ClawgymError as e:
        typer.echo(f"clawgym browse: {e}", err=True)
        raise typer.Exit(2) from e
    try:
        typer.echo(f"clawgym browse: http://{host}:{port}/ (Ctrl-C to stop)")
        app = create_browse_app(s, decoders(model), host=host, allow_hosts=allow_host)
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        s.close()
