"""GLM-4.5 / 4.6 tool calls: `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>…</tool_call>`.

Owns the body of one block: the function name up to the first newline or `<arg_key>`, then
key/value pairs. A value is bare text for a string parameter and JSON otherwise (the template
writes `v | tojson if v is not string else v`); it is typed by the tool's JSON schema
(`clawgym.rendering.tool_formats.arguments`), an undeclared one read as JSON where it parses.
Thinking is a `<think>` block at the start of the turn (GLM writes `<think></think>` when not
thinking).
"""

import json
import re

from clawgym.protocols.conversation import ToolCall
from clawgym.rendering.tool_formats.arguments import schema_types, typed_value
from clawgym.rendering.tool_formats.base import TaggedParser

_PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>\s*", re.DOTALL)


class GlmParser(TaggedParser):
    def parse_body(self, body: str) -> ToolCall | None:
        head = body.partition("<arg_key>")[0]
        name = head.strip()
        if not name or "<" in name or "\n" in name:
            return None
        rest = body[len(head) :]
        schema = self.schema_of(name)
        args: dict[str, object] = {}
        end = 0
        for pair in _PAIR.finditer(rest):
            if pair.start() != end:
                return None  # text between pairs: not this format
            key, text = pair.group(1).strip(), pair.group(2)
            args[key] = typed_value(text, schema_types(schema, key))
            end = pair.end()
        if rest[end:].strip():
            return None
        return self.make_call(name, json.dumps(args, ensure_ascii=False))
