"""Generated text → text, thinking and tool calls, incrementally, in the Hermes/Qwen convention.

Owns the output parser: `<think>…</think>` at the start of a turn is thinking, each
`<tool_call>{"name": …, "arguments": …}</tool_call>` is a tool call (several per turn), the rest is
text. It is fed text as the detokenizer produces it and emits events as soon as they are certain:
text is held back only while it could still be the start of a tag, and a tool call is emitted
the moment its closing tag arrives. A tool call whose JSON does not parse is returned as text,
tags included, so nothing the model wrote is lost. It knows nothing about tokens or protocols.
"""

import json
from collections.abc import Callable

from clawgym.protocols.conversation import OutputEvent, TextDelta, ThinkingDelta, ToolCall, ToolCallDone

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


def _partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (may still become it)."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def parse_tool_call_body(body: str, new_id: Callable[[], str], namespaces: dict[str, str]) -> ToolCall | None:
    """The ToolCall inside one `<tool_call>` block, or None unless it is `{"name": str, "arguments": {…}}`."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
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
    text = json.dumps(args, ensure_ascii=False)
    name = value["name"]
    return ToolCall(name=name, arguments=text, id=new_id(), namespace=namespaces.get(name, ""))


class OutputParser:
    """Streaming parser of one assistant turn. `feed` text, then `finish`; results accumulate."""

    def __init__(
        self,
        new_id: Callable[[], str],
        *,
        parse_tool_calls: bool = True,
        starts_in_thinking: bool = False,
        namespaces: dict[str, str] | None = None,
    ) -> None:
        self._new_id = new_id
        self._parse_calls = parse_tool_calls
        self._namespaces = namespaces or {}
        self._state = "thinking" if starts_in_thinking else "start"
        self._buf = ""
        self._pending_ws = ""  # whitespace held until we know more text follows it
        self._segment_start = True  # leading whitespace of a text segment is dropped
        self.text = ""
        self.thinking = ""
        self.tool_calls: list[ToolCall] = []

    # --- feeding ---

    def feed(self, text: str) -> list[OutputEvent]:
        self._buf += text
        events: list[OutputEvent] = []
        while self._step(events, final=False):
            pass
        return events

    def finish(self) -> list[OutputEvent]:
        """Flushes what is held back: an unterminated thinking block stays thinking, an unterminated
        tool call becomes text."""
        events: list[OutputEvent] = []
        while self._step(events, final=True):
            pass
        if self._state == "call":
            self._emit_text(CALL_OPEN + self._buf, events)
        elif self._state == "thinking":
            self._emit_thinking(self._buf.rstrip("\n"), events)
        elif self._buf:
            self._emit_text(self._buf, events)
        self._buf = ""
        return events

    # --- the state machine ---

    def _step(self, events: list[OutputEvent], final: bool) -> bool:
        """Consumes what can be decided from the buffer; True if it should be called again."""
        if self._state == "start":
            stripped = self._buf.lstrip()
            if stripped.startswith(THINK_OPEN):
                self._buf = stripped[len(THINK_OPEN) :].lstrip("\n")
                self._state = "thinking"
                return True
            if not final and THINK_OPEN.startswith(stripped):
                return False  # could still become <think>
            self._state = "text"
            return True
        if self._state == "thinking":
            end = self._buf.find(THINK_CLOSE)
            if end >= 0:
                self._emit_thinking(self._buf[:end].rstrip("\n"), events)
                self._buf = self._buf[end + len(THINK_CLOSE) :]
                self._state, self._segment_start = "text", True
                return True
            if final:
                return False
            hold = _partial_tag_len(self._buf, THINK_CLOSE)
            safe = self._buf[: len(self._buf) - hold]
            keep = len(safe) - len(safe.rstrip("\n"))  # trailing newlines may precede </think>
            self._emit_thinking(safe[: len(safe) - keep], events)
            self._buf = self._buf[len(safe) - keep :]
            return False
        if self._state == "text":
            start = self._buf.find(CALL_OPEN) if self._parse_calls else -1
            if start >= 0:
                self._emit_text(self._buf[:start], events)
                self._pending_ws, self._segment_start = "", True
                self._buf = self._buf[start + len(CALL_OPEN) :]
                self._state = "call"
                return True
            hold = _partial_tag_len(self._buf, CALL_OPEN) if self._parse_calls and not final else 0
            self._emit_text(self._buf[: len(self._buf) - hold], events)
            self._buf = self._buf[len(self._buf) - hold :]
            return False
        # state == "call"
        end = self._buf.find(CALL_CLOSE)
        if end < 0:
            return False
        body = self._buf[:end]
        self._buf = self._buf[end + len(CALL_CLOSE) :]
        self._state = "text"
        call = parse_tool_call_body(body.strip(), self._new_id, self._namespaces)
        if call is None:
            self._emit_text(CALL_OPEN + body + CALL_CLOSE, events)
        else:
            self.tool_calls.append(call)
            events.append(ToolCallDone(call=call, index=len(self.tool_calls) - 1))
            self._segment_start = True
        return True

    # --- emitting ---

    def _emit_thinking(self, text: str, events: list[OutputEvent]) -> None:
        if not self.thinking:
            text = text.lstrip("\n")  # the newline after <think> belongs to the template's format
        if text:
            self.thinking += text
            events.append(ThinkingDelta(text))

    def _emit_text(self, text: str, events: list[OutputEvent]) -> None:
        """Emits text, dropping a segment's leading whitespace and holding its trailing whitespace."""
        if self._segment_start:
            text = text.lstrip()
            if not text:
                return
            self._segment_start = False
        body = text.rstrip()
        if not body:
            self._pending_ws += text
            return
        out = self._pending_ws + body
        self._pending_ws = text[len(body) :]
        self.text += out
        events.append(TextDelta(out))
