"""`clawgym config show [-c FILE] [--set KEY=VALUE]… [--json]` and `clawgym config schema [--json |
--markdown]`: a resolved config with the source of each value, and every field a config takes.

Both print what `clawgym.config_report` generates from the config sections; docs/config.md is
`config schema --markdown`.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from clawgym.errors import ClawgymError
from clawgym_app.config_options import set_option

config_app = typer.Typer(
    help="The run config: each resolved value and its source, or every field a config takes.",
    no_args_is_help=True,
)


@config_app.command("show")
def show(
    config: Path = typer.Option(None, "--config", "-c", help="run config YAML; default: none (defaults)"),
    sets: list[str] = set_option(),
    as_json: bool = typer.Option(False, "--json", help='one JSON object: {key: {"value", "source"}}'),
) -> None:
    """Every field of the resolved config (defaults < FILE < CLAWGYM_* variables < --set) with where its
    value came from; secrets and passwords in URLs are hidden."""
    from clawgym.config import build_config, config_layers
    from clawgym.config_report import resolved

    try:
        layers = config_layers(config, sets=sets)
        rows = resolved(build_config(layers, config), layers)
    except ClawgymError as e:
        typer.echo(f"clawgym config show: {e}", err=True)
        raise typer.Exit(2) from e
    if as_json:
        print(json.dumps({r.key: {"value": r.value, "source": r.source} for r in rows}))
        return
    width = max(len(r.key) for r in rows)
    for r in rows:
        typer.echo(f"{r.key:<{width}}  {json.dumps(r.value)}  ({r.source})")


@config_app.command("schema")
def schema(
    as_json: bool = typer.Option(False, "--json", help="a JSON list: key, type, default, env, doc"),
    markdown: bool = typer.Option(False, "--markdown", help="docs/config.md: a table per section"),
) -> None:
    """Every config field: its dotted key (for --set and YAML), type, default, CLAWGYM_* variable and
    description."""
    from clawgym.config_report import schema as fields
    from clawgym.config_report import schema_json, schema_markdown

    if as_json and markdown:
        typer.echo("clawgym config schema: --json or --markdown, not both", err=True)
        raise typer.Exit(2)
    if as_json:
        print(schema_json())
    elif markdown:
        print(schema_markdown(), end="")
    else:
        for f in fields():
            env = f"  {f.env}" if f.env else ""
            typer.echo(f"{f.key}: {f.type} = {f.default}{env}\n    {f.doc}")
