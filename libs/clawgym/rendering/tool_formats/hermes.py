"""Hermes / Qwen2.5 / Qwen3 tool calls: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`.

Owns the JSON body of one block: a name and object arguments (`parameters` accepted, and
arguments written as a JSON string of an object). Also the format clawgym describes tools in for
a template that renders none (`clawgym.rendering.template`), so the same parser reads the reply.
"""

import json
from collections.abc import Callable

from clawgym.protocols.conversation import ToolCall
from clawgym.rendering.tool_formats.base import TaggedParser


def json_call(value: object) -> tuple[str, str] | None:
    """(name, arguments JSON) of `{"name": str, "arguments"|"parameters": {…}}`, else None."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return None
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if not isinstance(args, dict):  # every protocol needs an object (Anthropic `input`)
        return None
    return value["name"], json.dumps(args, ensure_ascii=False)


def parse_json_body(body: str, new_id: Callable[[], str], namespaces: dict[str, str]) -> ToolCall | None:
    """The ToolCall inside one `<tool_call>` block, or None unless it is `{"name": str, "arguments": {…}}`."""
    try:
        found = json_call(json.loads(body))
    except (ValueError, RecursionError):
        return None
    if found is None:
        return None
    name, arguments = found
    return ToolCall(name=name, arguments=arguments, id=new_id(), namespace=namespaces.get(name, ""))


class HermesParser(TaggedParser):
    """`<think>` thinking, then text and `<tool_call>{json}</tool_call>` blocks."""

    def parse_body(self, body: str) -> ToolCall | None:
        return parse_json_body(body.strip(), self._new_id, self._namespaces)
