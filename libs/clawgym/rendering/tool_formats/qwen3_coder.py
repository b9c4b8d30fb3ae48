"""Qwen3-Coder tool calls: `<tool_call><function=NAME><parameter=P>VALUE</parameter>…</function></tool_call>`.

Owns the XML-ish body of one block. Values are bare text, one newline of padding on each side
(the template writes `<parameter=p>\\nvalue\\n</parameter>`), typed by the tool's JSON schema as
Qwen's own parser does (`clawgym.rendering.tool_formats.arguments`); a parameter the schema does
not declare stays text. As Qwen's parser does, a missing `</parameter>` ends at the next
`<parameter=` or `</function>`. A body with no `<function=…>` or with text outside its
parameters is malformed.
"""

import json
import re

from clawgym.protocols.conversation import ToolCall
from clawgym.rendering.tool_formats.arguments import schema_types, typed_value
from clawgym.rendering.tool_formats.base import TaggedParser

_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*?)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)


def _unpad(value: str) -> str:
    """The value without the one newline the template puts on each side."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


class Qwen3CoderParser(TaggedParser):
    """`<think>` thinking (Qwen3.5-style models think in this format too), text and XML calls."""

    def parse_body(self, body: str) -> ToolCall | None:
        match = _FUNCTION.fullmatch(body)
        if match is None:
            return None
        name, inner = match.group(1).strip(), match.group(2)
        schema = self.schema_of(name)
        args: dict[str, object] = {}
        end = 0
        for param in _PARAMETER.finditer(inner):
            if inner[end : param.start()].strip():
                return None  # text between parameters: not this format
            key = param.group(1).strip()
            text = _unpad(param.group(2))
            types = schema_types(schema, key)
            args[key] = text if types is None else typed_value(text, types)
            end = param.end()
        if inner[end:].strip() or not name:
            return None
        return self.make_call(name, json.dumps(args, ensure_ascii=False))
