"""`clawgym session new`: an ad-hoc rollout for capturing a session by hand (ARCHITECTURE.md §3).

Registers one rollout in a run of its own and prints its API key alone on the last line, so a
person (or a script: `KEY=$(clawgym session new --store.url URL | tail -1)`; the store may also come
from CLAWGYM_STORE__URL / CLAWGYM_STORE__GRPC_URL, `-c FILE` or `--set`) can point their own
harness at `clawgym serve proxy --store.url URL` and inspect the captured calls afterwards. The store
options are spelt as `clawgym serve`'s flags; `--store` / `--store-service` are their older spellings.
"""

import uuid
from pathlib import Path

import typer

from clawgym.errors import ClawgymError
from clawgym_app.config_options import set_option

session_app = typer.Typer(help="Ad-hoc capture sessions: a rollout token to use as a harness's API key.")


@session_app.command("new")
def new(
    store: str = typer.Option(
        "",
        "--store.url",
        "--store",
        help="store SQLAlchemy URL: sqlite:///capture.db, postgresql+psycopg://…",
    ),
    store_service: str = typer.Option(
        "", "--store.grpc-url", "--store-service", help="the store service's HOST:PORT instead"
    ),
    harness: str = typer.Option(
        "manual", "--harness", help="harness name recorded with the rollout (e.g. claude-code)"
    ),
    task: str = typer.Option("manual", "--task", help="task id recorded with the rollout"),
    name: str = typer.Option("manual-capture", "--name", help="name of the run the rollout belongs to"),
    config: Path = typer.Option(None, "--config", "-c", help="a config YAML (its store and rpc sections)"),
    sets: list[str] = set_option(),
) -> None:
    """Register a rollout and print its API key (alone, on the last line)."""
    from clawgym.assemble import open_store
    from clawgym.config import load_config
    from clawgym.records import RolloutSpec

    flags = {"url": store} if store else {}
    if store_service:
        flags["grpc_url"] = store_service
    try:
        s = open_store(load_config(config, flags={"store": flags}, sets=sets))
    except ClawgymError as e:
        typer.echo(f"clawgym session new: {e}", err=True)
        raise typer.Exit(2) from e
    try:
        run = s.create_run(name, {"kind": "manual-capture", "harness": harness})
        spec = RolloutSpec(group_id=f"manual-{uuid.uuid4().hex[:12]}", task_id=task, harness=harness)
        registered = s.register_rollouts(run.id, [spec])[0]
        s.start_rollout(registered.rollout_id, sandbox="manual")
    finally:
        s.close()
    typer.echo(
        f"run {run.id}, rollout {registered.rollout_id} ({harness}); use the key below as the API key:"
    )
    typer.echo(registered.token)
