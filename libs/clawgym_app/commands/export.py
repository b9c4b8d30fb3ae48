"""`clawgym export [RUN] --run-dir D | --store URL | --store-service HOST:PORT --format F --out DIR`.

Writes a run's captured calls and prefix trees (token ids, logprobs, versions, rewards, each call's
raw request and response) as JSONL, Parquet or a Hugging Face `datasets` folder, for SFT, analysis
and sharing (`clawgym.export`; the columns: docs/export.md).
"""

from pathlib import Path

import typer

from clawgym.errors import ClawgymError


def command(
    run: str = typer.Argument("", help="the run id (default: the newest run in the store)"),
    run_dir: Path = typer.Option(None, "--run-dir", help="a run folder (runs/<ts>/): its SQLite store"),
    store: str = typer.Option("", "--store", help="store SQLAlchemy URL (sqlite:///…, postgresql+psycopg://…)"),
    store_service: str = typer.Option("", "--store-service", help="the store service's HOST:PORT"),
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl | parquet | hf (a datasets folder)"),
    out: Path = typer.Option(..., "--out", "-o", help="a new or empty folder to write into"),
) -> None:
    """Export a run's calls and trees for SFT, analysis and sharing."""
    from clawgym.export import export_run
    from clawgym_app.store_source import open_read_store

    try:
        s = open_read_store(store, store_service, run_dir)
        try:
            if not run:
                runs = s.list_runs()
                if not runs:
                    raise typer.BadParameter("the store holds no runs")
                run = runs[0].id
            manifest = export_run(s, run, fmt, out)
        finally:
            s.close()
    except ClawgymError as e:
        typer.echo(f"clawgym export: {e}", err=True)
        raise typer.Exit(2) from e
    rows = manifest["rows"]
    typer.echo(f"run {run}: {rows['calls']} calls, {rows['trees']} tree nodes → {out} ({fmt})")
