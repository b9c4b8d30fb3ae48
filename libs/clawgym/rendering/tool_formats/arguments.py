"""Parameter values written as bare text (Qwen3-Coder `<parameter=…>`, GLM `<arg_value>`) → JSON values.

Owns the typing of one value by its parameter's JSON schema, the convention Qwen3-Coder's and
GLM's own parsers follow: a string parameter keeps its text as is; integers, numbers and booleans
are read as such; objects and arrays are JSON (or a Python literal, which models also write); a
parameter the schema does not describe is JSON if it parses, else text. A value that does not
read as its type stays text: the harness validates arguments and tells the model, which is better
than dropping the call. It knows nothing about tags.
"""

import ast
import json
from typing import Any

_STRING = {"string", "str", "text", "varchar", "char", "enum"}
_INTEGER = {"integer", "int", "uint", "long", "short", "unsigned"}
_NUMBER = {"number", "float", "double"}
_BOOLEAN = {"boolean", "bool", "binary"}
_STRUCTURED = {"object", "array", "dict", "list"}


def schema_types(schema: dict[str, Any], param: str) -> list[str] | None:
    """The declared type names of `param` in a tool's JSON schema (lowercase), None if undeclared."""
    props = schema.get("properties") if isinstance(schema, dict) else None
    spec = props.get(param) if isinstance(props, dict) else None
    if not isinstance(spec, dict):
        return None
    declared = spec.get("type")
    if isinstance(declared, str):
        return [declared.lower()]
    if isinstance(declared, list):
        return [t.lower() for t in declared if isinstance(t, str)]
    for key in ("anyOf", "oneOf"):  # e.g. {"anyOf": [{"type": "string"}, {"type": "null"}]}
        if isinstance(spec.get(key), list):
            return [
                t["type"].lower() for t in spec[key] if isinstance(t, dict) and isinstance(t.get("type"), str)
            ]
    if "enum" in spec:
        return ["enum"]
    return []  # declared without a type: anything goes


def typed_value(text: str, types: list[str] | None) -> Any:
    """`text` as the value its declared types ask for (see the module docstring)."""
    if types is not None and ("null" in types or not types) and text.strip().lower() == "null":
        return None
    if types is None or not types:
        return _json_or_text(text)
    for t in types:
        if t in _STRING:
            return text
    for t in types:
        if t in _INTEGER:
            try:
                return int(text.strip())
            except ValueError:
                continue
        if t in _NUMBER:
            try:
                number = float(text.strip())
            except ValueError:
                continue
            return (
                int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
            )
        if t in _BOOLEAN and text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
        if t in _STRUCTURED:
            value = _structured(text)
            if value is not None:
                return value
    return _json_or_text(text)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _structured(text: str) -> Any:
    """A JSON object or array, or one written as a Python literal (single quotes, True); else None."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, dict | list) else None
