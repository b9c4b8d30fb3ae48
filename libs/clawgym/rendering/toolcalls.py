"""Generated text → text, thinking and tool calls, in the Hermes/Qwen convention (the default format).

`OutputParser` is the Hermes/Qwen parser of `clawgym.rendering.tool_formats`: `<think>…</think>` at
the start of a turn is thinking, each `<tool_call>{"name": …, "arguments": …}</tool_call>` is a tool
call (several per turn), the rest is text. Other models' formats, and choosing one by name, are in
`clawgym.rendering.tool_formats`.
"""

from collections.abc import Callable

from clawgym.protocols.conversation import ToolCall
from clawgym.rendering.tool_formats.hermes import HermesParser, parse_json_body

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


def parse_tool_call_body(body: str, new_id: Callable[[], str], namespaces: dict[str, str]) -> ToolCall | None:
    """The ToolCall inside one `<tool_call>` block, or None unless it is `{"name": str, "arguments": {…}}`."""
    return parse_json_body(body, new_id, namespaces)


class OutputParser(HermesParser):
    """Streaming parser of one assistant turn. `feed` text, then `finish`; results accumulate."""

    def __init__(
        self,
        new_id: Callable[[], str],
        *,
        parse_tool_calls: bool = True,
        starts_in_thinking: bool = False,
        namespaces: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            new_id,
            parse_tool_calls=parse_tool_calls,
            starts_in_thinking=starts_in_thinking,
            namespaces=namespaces or {},
        )
