"""DeepSeek-V3 / V3.1 tool calls, between full-width special tokens.

V3.1 writes `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>…
<｜tool▁calls▁end｜>`; V3 wrote `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{json}\\n```
<｜tool▁call▁end｜>`. Owns the body of one call in either spelling; the outer begin/end tokens are
structure and dropped from the text. Thinking (V3.1's thinking mode, R1) is a `<think>` block.
"""

import json
import re

from clawgym.protocols.conversation import ToolCall
from clawgym.rendering.tool_formats.base import TaggedParser
from clawgym.rendering.tool_formats.hermes import json_call

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_V3 = re.compile(r"function\s*" + SEP + r"([^\n]+)\n```(?:json)?\n(.*)\n```\s*", re.DOTALL)


class DeepSeekParser(TaggedParser):
    call_open, call_close = CALL_BEGIN, CALL_END
    wrappers = (CALLS_BEGIN, CALLS_END)

    def parse_body(self, body: str) -> ToolCall | None:
        v3 = _V3.fullmatch(body)
        if v3 is not None:
            name, args = v3.group(1).strip(), v3.group(2)
        else:
            name, sep, args = body.partition(SEP)
            if not sep:
                return None
            name = name.strip()
        if not name or SEP in args:
            return None
        try:
            found = json_call({"name": name, "arguments": json.loads(args)})
        except (ValueError, RecursionError):
            return None
        return None if found is None else self.make_call(*found)
