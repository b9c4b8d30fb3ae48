"""`--set KEY=VALUE`: the option every command that reads a config takes, spelt and parsed as `clawgym
serve X` takes it (the items go to `clawgym.config.load_config(sets=…)`)."""

from typing import Any

import typer

# the command line's help, kept here: clawgym.flags (which has its own) loads every section, too slow
# for `clawgym --help`
SET_HELP = (
    "override one config field by its dotted path, VALUE a YAML scalar or JSON: --set trainer.steps=3, "
    '--set \'trainer.harnesses=[{"name": "reference"}]\' (repeatable; wins over -c FILE, CLAWGYM_* '
    "variables and the options; `clawgym config schema` lists the keys)"
)


def set_option() -> Any:
    """A command's `--set` option (repeatable): `sets: list[str] = set_option()`."""
    return typer.Option([], "--set", metavar="KEY=VALUE", help=SET_HELP)
