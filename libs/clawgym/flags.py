"""Command-line flags generated from config sections: a flag is a field, its help the field's doc.

`service_config(...)` is how every `clawgym serve X` reads its config: `-c FILE`, then one flag per
field of its own section (`--port`, `--metrics-port`, `--kubernetes.namespace` for nested
sections) and of the sections it is a client of, prefixed (`--store.url`). Values given on the
command line win over CLAWGYM_* variables, the YAML file and the defaults (`clawgym.config`).
"""

import argparse
import json
import types
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from clawgym.config import ClawgymConfig, load_config


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
    return f"{text} (JSON; default {json.dumps(default)})" if _takes_json(annotation) else f"{text} (default {default!r})"


def add_section_flags(
    parser: argparse.ArgumentParser, section: type[BaseModel], dest: str, prefix: str = ""
) -> None:
    """One flag per field of `section` (recursively), stored under `dest.field[.sub]` when given."""
    group = parser.add_argument_group(f"{dest.split('.')[0]} section" if not prefix else f"--{prefix.rstrip('.')}")
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
    parser.add_argument("-c", "--config", help="a YAML run config (flags and CLAWGYM_* variables win over it)")
    fields = ClawgymConfig.model_fields
    add_section_flags(parser, fields[section].annotation, section)
    for other in clients_of:
        add_section_flags(parser, fields[other].annotation, other, prefix=f"{other}.")
    args = vars(parser.parse_args(argv))
    path = args.pop("config")
    return load_config(path, flags=nest(args))
