"""Command-line flags generated from config sections: a flag is a field, its help the field's doc.

`service_config(...)` is how every `clawgym serve X` reads its config: `-c FILE`, then one flag per
field of its own section (`--port`, `--metrics-port`, dotted for nested sections) and of the
sections it is a client of, prefixed (`--store.url`, `--sandbox.kubernetes.namespace`). Values given on the
command line win over CLAWGYM_* variables, the YAML file and the defaults (`clawgym.config`);
`--set KEY=VALUE` (any field, by dotted path, as every other `clawgym` command takes it) wins over
them all. An unknown flag is an InvalidArgument naming the nearest one.
"""

import argparse
import difflib
import json
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from clawgym.config import ClawgymConfig, load_config
from clawgym.errors import InvalidArgument

SET_HELP = (
    "override one config field by its dotted path, VALUE a YAML scalar or JSON: --set store.pool_size=8 "
    "(repeatable; wins over -c FILE, CLAWGYM_* variables and the flags; `clawgym config schema` lists the keys)"
)


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _takes_json(annotation: Any) -> bool:
    """Lists and dicts are given as JSON on the command line (as in CLAWGYM_* variables)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_takes_json(a) for a in typing.get_args(annotation) if a is not type(None))
    return origin in (list, dict, tuple, set) or annotation in (list, dict)


def _help(info: FieldInfo, annotation: Any) -> str:
    default = TypeAdapter(annotation).dump_python(info.get_default(call_default_factory=True), mode="json")
    text = (info.description or "").replace("%", "%%")
    return (
        f"{text} (JSON; default {json.dumps(default)})"
        if _takes_json(annotation)
        else f"{text} (default {default!r})"
    )


def add_section_flags(
    parser: argparse.ArgumentParser, section: type[BaseModel], dest: str, prefix: str = ""
) -> None:
    """One flag per field of `section` (recursively), stored under `dest.field[.sub]` when given."""
    group = parser.add_argument_group(
        f"{dest.split('.')[0]} section" if not prefix else f"--{prefix.rstrip('.')}"
    )
    for name, info in section.model_fields.items():
        annotation = info.annotation
        flag = f"--{prefix}{name.replace('_', '-')}"
        if _is_section(annotation):
            add_section_flags(parser, annotation, f"{dest}.{name}", f"{prefix}{name.replace('_', '-')}.")
            continue
        group.add_argument(
            flag,
            dest=f"{dest}.{name}",
            default=argparse.SUPPRESS,
            type=json.loads if _takes_json(annotation) else str,  # pydantic validates and coerces
            metavar="JSON" if _takes_json(annotation) else name.upper(),
            help=_help(info, annotation),
        )


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"store.url": v} → {"store": {"url": v}}."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def service_config(
    section: str,
    argv: Sequence[str] | None,
    *,
    description: str,
    clients_of: Sequence[str] = (),
) -> ClawgymConfig:
    """Parses `clawgym serve <section>`'s command line into the process's `ClawgymConfig`."""
    parser = argparse.ArgumentParser(prog=f"clawgym serve {section}", description=description)
    parser.add_argument(
        "-c", "--config", help="a YAML run config (flags and CLAWGYM_* variables win over it)"
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets", help=SET_HELP)
    fields = ClawgymConfig.model_fields
    add_section_flags(parser, fields[section].annotation, section)
    for other in clients_of:
        add_section_flags(parser, fields[other].annotation, other, prefix=f"{other}.")
    parsed, unknown = parser.parse_known_args(argv)
    if unknown:
        raise unknown_flag(parser, unknown)
    args = vars(parsed)
    path, sets = args.pop("config"), args.pop("sets")
    return load_config(path, flags=nest(args), sets=sets)


def unknown_flag(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> InvalidArgument:
    """The error for arguments `parser` does not take: the first unknown flag and the nearest one, with
    the config key it sets."""
    flag = next((a.split("=", 1)[0] for a in unknown if a.startswith("-")), None)
    if flag is None:
        return InvalidArgument(f"{parser.prog}: unexpected argument {unknown[0]!r} (flags take --name VALUE)")
    options = {o: a.dest for a in parser._actions for o in a.option_strings if o.startswith("--")}
    near = difflib.get_close_matches(flag, list(options), n=1)
    key = f" ({options[near[0]]})" if near and "." in options[near[0]] else ""  # the field it sets
    hint = f": did you mean {near[0]}{key}?" if near else ""
    return InvalidArgument(f"{parser.prog}: unknown flag {flag}{hint} (`{parser.prog} --help` lists them)")
