"""What `clawgym config schema` and `clawgym config show` print: every field of `ClawgymConfig` with its
type, default, CLAWGYM_* variable and description, and a resolved config's values with the source of
each (a default, the YAML file, a variable, a flag, `--set`), secrets hidden.

Generated from the sections themselves, so docs/config.md (`schema_markdown`) cannot drift from
them; loading is `clawgym.config`'s.
"""

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr, TypeAdapter
from pydantic.fields import FieldInfo

from clawgym.config import ClawgymConfig, Layer, env_name
from clawgym.config_keys import item_model, leaves, model_of
from clawgym.tasks.git_source import redact

HIDDEN = "(hidden)"  # a secret's value, when one is set
# query parameters that carry credentials in a URL (`?password=…` of libpq, a token in a bus URL)
_SECRET_QUERY = re.compile(r"(?i)([?&](?:password|passwd|pwd|secret|token|api_key|apikey)=)[^&#]*")


@dataclass(frozen=True)
class FieldDoc:
    """One row of the schema: a dotted key, its type, default (JSON text), variable and description."""

    key: str
    type: str
    default: str
    env: str
    doc: str


@dataclass(frozen=True)
class Resolved:
    """One row of `config show`: a field's value (JSON-able, secrets hidden) and where it came from."""

    key: str
    value: Any
    source: str


# --- the schema ---


def schema(model: type[BaseModel] = ClawgymConfig) -> list[FieldDoc]:
    """Every field of `model` that holds a value, by dotted path; a dict or list of models (harness
    settings, the harness mix) also documents its items' fields (`<harness>`, `[]` in the key)."""
    return list(_docs(model, "", env=True))


def _docs(model: type[BaseModel], prefix: str, env: bool) -> Iterator[FieldDoc]:
    for name, info in model.model_fields.items():
        key, annotation = f"{prefix}{name}", info.annotation
        if sub := model_of(annotation):
            yield from _docs(sub, f"{key}.", env)
            continue
        default = "(required)" if info.is_required() else json.dumps(_default(info))
        yield FieldDoc(
            key, type_name(annotation), default, env_name(key) if env else "", one_line(info.description)
        )
        if container := item_model(annotation):
            kind, item = container
            # harness_settings.<harness>.max_turns, harnesses[].name; a dict's items take variables too
            # (CLAWGYM_…__HARNESS_SETTINGS__REFERENCE__MAX_TURNS), a list's only inside the list's JSON
            slot = f".<{name.split('_')[0]}>." if kind == "dict" else "[]."
            yield from _docs(item, f"{key}{slot}", env and kind == "dict")


def _default(info: FieldInfo) -> Any:
    default = info.get_default(call_default_factory=True)
    if isinstance(default, SecretStr):
        return default.get_secret_value() and HIDDEN
    return TypeAdapter(info.annotation).dump_python(default, mode="json")


def one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def type_name(annotation: Any) -> str:
    """An annotation as the docs write it: `int`, `list[str]`, `float | None`, `'grpo' | 'ppo'`."""
    if annotation is type(None):
        return "None"
    if annotation is SecretStr:
        return "secret"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, UnionType):
        return " | ".join(type_name(a) for a in args)
    if args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def schema_markdown(model: type[ClawgymConfig] = ClawgymConfig) -> str:
    """docs/config.md: a table per section, each field's key, type, default, variable and description."""
    rows = schema(model)
    out = [
        "# Configuration reference",
        "",
        "Generated from the config sections' field descriptions by `clawgym config schema --markdown`",
        "(tests/cli/test_config_cli.py fails when this file and the sections differ). Where a value comes",
        "from, highest first: `--set KEY=VALUE` > a command's flag > `CLAWGYM_*` variable > the YAML file",
        "(`-c`) > the default. A variable or `--set` takes JSON for a list or dict field; a whole section",
        "takes JSON in its variable (`CLAWGYM_STORE='{\"pool_size\": 8}'`). An unknown key from any of them",
        "is an error naming the nearest one. `clawgym config show -c FILE` prints a resolved config, each",
        "value with its source.",
    ]
    for name, info in model.model_fields.items():
        out += ["", f"## {name}", "", one_line(info.description), ""]
        out += ["| key | type | default | variable | description |", "| --- | --- | --- | --- | --- |"]
        for r in rows:
            if r.key.split(".")[0] == name:
                cells = (f"`{r.key}`", _cell(r.type), f"`{_cell(r.default)}`", f"`{r.env}`" if r.env else "",
                         _cell(r.doc))  # fmt: skip
                out.append(f"| {' | '.join(cells)} |")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def schema_json(model: type[BaseModel] = ClawgymConfig) -> str:
    return json.dumps([asdict(r) for r in schema(model)], indent=1)


# --- a resolved config ---


def resolved(cfg: ClawgymConfig, layers: Sequence[Layer]) -> list[Resolved]:
    """Each field's value in `cfg` and its source: the highest of `layers` (lowest first) that names
    it, else "default" (or "derived" where a validator set it from another field)."""
    rows = []
    for key, info in leaves(ClawgymConfig):
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part)
        value = hide(TypeAdapter(info.annotation).dump_python(node, mode="json"), node)
        source = next((layer.source for layer in reversed(layers) if _names(layer.values, key)), "")
        if not source:
            source = "default" if value == hide(_default(info), None) else "derived"
        rows.append(Resolved(key, value, source))
    return rows


def _names(values: Mapping[str, Any], key: str) -> bool:
    """Whether nested `values` hold `key` (a dotted path) or something below it."""
    node: Any = values
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def hide(value: Any, original: Any) -> Any:
    """`value` without secrets: a set SecretStr as HIDDEN, passwords in URLs (user:***@host) and
    credential query parameters starred, in strings at any depth."""
    if isinstance(original, SecretStr):
        return HIDDEN if original.get_secret_value() else ""
    if isinstance(value, str):
        try:
            value = redact(value)
        except ValueError:  # a URL with a port that is no number: hide all that could be a password
            value = re.sub(r"(://)[^/@]*@", r"\1***@", value)
        return _SECRET_QUERY.sub(r"\1***", value)
    if isinstance(value, list):
        return [hide(v, None) for v in value]
    if isinstance(value, dict):
        return {k: hide(v, None) for k, v in value.items()}
    return value
