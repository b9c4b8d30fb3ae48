"""Config keys by dotted path (`trainer.algorithm.lr`): the paths a model takes, the type at a path,
and the key a mistyped one was nearest to.

Generic over a pydantic model and knows nothing of where values come from: `clawgym.config` checks
each source (YAML, CLAWGYM_* variables, flags, `--set`) with it, `clawgym.config_report` documents
the paths. Inside a dict or list field the walk goes on into its values' model (`orchestrator.
harness_settings.<harness>.max_turns`, `trainer.harnesses.<i>.weight`); other values are the model's
to validate.
"""

import difflib
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo


def unwrap(annotation: Any) -> Any:
    """`X` of `X | None` (the optional fields); any other annotation as it is."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation is (optionally), else None."""
    annotation = unwrap(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def item_model(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """("dict", M) for `dict[str, M]`, ("list", M) for `list[M]`: the model of a container's values."""
    annotation = unwrap(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and len(args) == 2 and model_of(args[1]):
        return "dict", args[1]
    if origin is list and len(args) == 1 and model_of(args[0]):
        return "list", args[0]
    return None


def fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """Every field of `model` by dotted path, depth first, sections (nested models) before their fields."""
    for name, info in model.model_fields.items():
        yield f"{prefix}{name}", info
        if sub := model_of(info.annotation):
            yield from fields(sub, f"{prefix}{name}.")


def leaves(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    """The fields that hold values (not sections), by dotted path."""
    return ((path, info) for path, info in fields(model) if not model_of(info.annotation))


def annotation_at(model: type[BaseModel], parts: list[str]) -> Any:
    """The annotation of the value at `parts` (keys of dicts and indices of lists included); None when
    the path leaves the model or goes below a plain value."""
    annotation: Any = model
    for part in parts:
        if sub := model_of(annotation):
            if part not in sub.model_fields:
                return None
            annotation = sub.model_fields[part].annotation
        elif container := item_model(annotation):
            annotation = container[1]
        else:
            return None
    return annotation


def unknown_key(model: type[BaseModel], data: Any, prefix: str = "") -> tuple[str, str | None] | None:
    """The first key of `data` (nested mappings, as a config source gives them) that `model` has no
    field for, as (its dotted path, the nearest valid one or None); None when every key is known."""
    if not isinstance(data, Mapping):
        return None  # a value where a section goes: the model's own error says so
    for key, value in data.items():
        name = str(key)
        if name not in model.model_fields:
            path = _first_leaf(f"{prefix}{name}", value)
            return path, _nearest(model, prefix, path)
        annotation = model.model_fields[name].annotation
        path = f"{prefix}{name}."
        if sub := model_of(annotation):
            found = unknown_key(sub, value, path)
        elif (container := item_model(annotation)) and isinstance(value, Mapping | list):
            items = value.items() if isinstance(value, Mapping) else enumerate(value)
            found = next((u for k, v in items if (u := unknown_key(container[1], v, f"{path}{k}."))), None)
        else:
            found = None
        if found:
            return found
    return None


def _first_leaf(path: str, value: Any) -> str:
    """`path` extended by the first key below it, so `trainr: {steps: 3}` reads as trainr.steps."""
    while isinstance(value, Mapping) and value:
        key, value = next(iter(value.items()))
        path = f"{path}.{key}"
    return path


def _nearest(model: type[BaseModel], prefix: str, path: str) -> str | None:
    """The valid path closest to `path` among the fields of `model` (which sits at `prefix`)."""
    candidates = [f"{prefix}{p}" for p, _ in fields(model)]
    # a key put in the wrong place (`trainer.lr`) is nearest to where that name is (`trainer.algorithm.lr`)
    leaf = path.rsplit(".", 1)[-1]
    placed = [c for c in candidates if c.rsplit(".", 1)[-1] == leaf]
    if placed and path.count(".") == prefix.count("."):
        return placed[0]  # several sections have it (algorithm.lr, sft.lr): the first declared
    if close := difflib.get_close_matches(path, placed, n=1, cutoff=0) or difflib.get_close_matches(
        path, candidates, n=1
    ):
        return close[0]
    # nothing close as a whole (`trainr.stesp`): the nearest field name, then below it
    head, _, rest = path[len(prefix) :].partition(".")
    names = difflib.get_close_matches(head, list(model.model_fields), n=1)
    if not names:
        return None
    section = f"{prefix}{names[0]}"
    sub = model_of(model.model_fields[names[0]].annotation)
    if rest and sub:
        return _nearest(sub, f"{section}.", f"{section}.{rest}") or section
    return section
