"""`clawgym export RUN_DIR | [RUN] --store.url URL | --store.grpc-url HOST:PORT --format F --out DIR`.

Writes a run's captured calls and prefix trees (token ids, logprobs, versions, rewards, each call's
raw request and response) as JSONL, Parquet or a Hugging Face `datasets` folder, for SFT, analysis
and sharing (`clawgym.export`; the columns: docs/export.md). The text columns are the tokens decoded
by `--model`'s tokenizer, else by that of the model the run's config names, else null.
"""

from pathlib import Path

import typer

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.records import Run
from clawgym_app.config_options import set_option
from clawgym_app.decoding import Decode


def command(
    run: str = typer.Argument(
        "",
        help="a run folder (runs/<name>/: its store's newest training run), or a run id (default: the "
        "newest training run; an evaluation run only by its id)",
    ),
    run_dir: Path = typer.Option(None, "--run-dir", help="a run folder: the store its config.yaml names"),
    store: str = typer.Option(
        "", "--store.url", "--store", help="store SQLAlchemy URL (sqlite:///…, postgresql+psycopg://…)"
    ),
    store_service: str = typer.Option(
        "", "--store.grpc-url", "--store-service", help="the store service's HOST:PORT"
    ),
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl | parquet | hf (a datasets folder)"),
    out: Path = typer.Option(..., "--out", "-o", help="a new or empty folder to write into"),
    model: str = typer.Option(
        "", help="policy model spec whose tokenizer fills the text columns (default: the run's; none: null)"
    ),
    sets: list[str] = set_option(),
) -> None:
    """Export a run's calls and trees for SFT, analysis and sharing."""
    from clawgym.export import export_run
    from clawgym_app.store_source import open_read_store

    if run and Path(run).is_dir():  # a run folder, not a run id
        run, run_dir = "", Path(run)
    try:
        s = open_read_store(store, store_service, run_dir, sets)
        try:
            if not run:
                run = default_run(s.list_runs())
            decode, decoded_by = text_decoder(s.get_run(run), model)
            manifest = export_run(s, run, fmt, out, decode=decode, decoded_by=decoded_by)
        finally:
            s.close()
    except ClawgymError as e:
        typer.echo(f"clawgym export: {e}", err=True)
        raise typer.Exit(2) from e
    rows = manifest["rows"]
    typer.echo(f"run {run}: {rows['calls']} calls, {rows['trees']} tree nodes → {out} ({fmt})")


def text_decoder(run: Run, model: str) -> tuple[Decode | None, str]:
    """The tokenizer for the text columns and its model: `--model`'s (one that cannot load is an
    error), else the run's model's (one that cannot load leaves the text null, said once), else none."""
    from clawgym_app.decoding import load_decoder, run_model

    spec = run_model(run, model)
    if not spec:
        return None, ""
    try:
        return load_decoder(spec), spec
    except Exception as e:
        if model:
            raise InvalidArgument(f"cannot load the tokenizer of --model {model!r}: {e}") from e
        typer.echo(f"clawgym export: text columns left null: cannot load the tokenizer of {spec!r} "
                   f"(the run's model): {e}; pass --model", err=True)  # fmt: skip
        return None, ""


def default_run(runs: list) -> str:
    """The newest training run (a run folder also holds its evaluations' runs, kind "eval")."""
    if not runs:
        raise typer.BadParameter("the store holds no runs")
    training = [r for r in runs if (r.config or {}).get("kind") != "eval"]
    return (training or runs)[0].id
