"""Llama 3.1 / 3.2 / 3.3 JSON tool calls: `{"name": …, "parameters": {…}}` as the whole reply, or after
`<|python_tag|>`.

Owns the reading of one turn: a reply whose first character is `{` opening a `"key"` is held
until that JSON object closes, and is a tool call if it is `{"name", "parameters"|"arguments"}`;
several may follow, separated by `;` or whitespace (as vLLM's parser accepts). `<|python_tag|>`
anywhere starts the same. Text after the calls is text; an object that is not a call, or one cut
off, is text too. Llama 3 has no thinking.
"""

import json

from clawgym.protocols.conversation import OutputEvent, ToolCall
from clawgym.rendering.tool_formats.base import NewId, StreamParser, partial_tag_len
from clawgym.rendering.tool_formats.hermes import json_call

PYTHON_TAG = "<|python_tag|>"


class _ObjectEnd:
    """Finds where a JSON object that starts a string ends, fed the string as it grows."""

    def __init__(self) -> None:
        self.pos, self.depth, self.in_string, self.escaped = 0, 0, False, False

    def scan(self, text: str) -> int:
        """Index just past the object's closing brace, or -1 while it is still open."""
        while self.pos < len(text):
            ch = text[self.pos]
            self.pos += 1
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return self.pos
        return -1


class Llama3Parser(StreamParser):
    def __init__(self, new_id: NewId, **kwargs) -> None:
        super().__init__(new_id, **kwargs)
        self._state = "start" if self._parse_calls else "text"
        self._tag = ""  # the python tag that opened the calls, given back with a malformed one
        self._object: _ObjectEnd | None = None

    def _flush(self, events: list[OutputEvent]) -> None:
        """A cut-off object (with its python tag) becomes text."""
        if self._buf.strip():
            self._emit_text(self._tag + self._buf, events)

    def _step(self, events: list[OutputEvent], final: bool) -> bool:
        if self._state == "start":
            stripped = self._buf.lstrip()
            if stripped.startswith(PYTHON_TAG):
                self._buf, self._tag, self._state = stripped[len(PYTHON_TAG) :], PYTHON_TAG, "calls"
                return True
            after_brace = stripped[1:].lstrip()
            if stripped.startswith("{") and after_brace.startswith('"'):
                self._buf, self._state = stripped, "calls"
                return True
            waiting = (
                not stripped
                or PYTHON_TAG.startswith(stripped)
                or (stripped.startswith("{") and not after_brace)
            )
            if waiting and not final:
                return False  # could still open a call
            self._state = "text"
            return True
        if self._state == "text":
            start = self._buf.find(PYTHON_TAG) if self._parse_calls else -1
            if start >= 0:
                self._emit_text(self._buf[:start], events)
                self._buf, self._tag, self._state = self._buf[start + len(PYTHON_TAG) :], PYTHON_TAG, "calls"
                self._pending_ws, self._segment_start = "", True
                return True
            hold = 0 if final or not self._parse_calls else partial_tag_len(self._buf, PYTHON_TAG)
            self._emit_text(self._buf[: len(self._buf) - hold], events)
            self._buf = self._buf[len(self._buf) - hold :]
            return False
        return self._step_calls(events)

    def _step_calls(self, events: list[OutputEvent]) -> bool:
        if self._object is None:
            rest = self._buf.lstrip().lstrip(";").lstrip()
            if not rest:
                return False  # more calls may follow
            if not rest.startswith("{"):
                self._buf, self._state, self._tag = rest, "text", ""
                return True
            self._buf, self._object = rest, _ObjectEnd()
        end = self._object.scan(self._buf)
        if end < 0:
            return False
        raw, self._buf, self._object = self._buf[:end], self._buf[end:], None
        call = self._call_of(raw)
        if call is None:
            self._emit_text(self._tag + raw, events)
            self._state = "text"
        else:
            self._emit_call(call, events)
        self._tag = ""
        return True

    def _call_of(self, raw: str) -> ToolCall | None:
        try:
            found = json_call(json.loads(raw))
        except (ValueError, RecursionError):
            return None
        return None if found is None else self.make_call(*found)
