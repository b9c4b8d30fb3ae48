"""The streaming machinery the tagged tool-call formats share: thinking, text, and call blocks.

Owns `TaggedParser`: fed detokenized text in arbitrary pieces, it emits `ThinkingDelta` for a
`<think>…</think>` block at the start of a turn, `TextDelta` for text, and `ToolCallDone` for each
block between a format's open and close tag whose body the format's `parse_body` accepts. Text is
held back only while its end could still become a tag, and a call is emitted the moment its close
tag arrives. A block whose body does not parse comes back as text, tags included, so nothing the
model wrote is lost and a malformed call is plainly "no tool call". What a body means is each
format's module; this one knows no format.
"""

from collections.abc import Callable, Sequence

from clawgym.protocols.conversation import OutputEvent, TextDelta, ThinkingDelta, Tool, ToolCall, ToolCallDone

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
NewId = Callable[[], str]


def partial_tag_len(text: str, tag: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `tag` (may still become it)."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


class StreamParser:
    """What the proxy drives: `feed` text, then `finish`; `text`, `thinking`, `tool_calls` accumulate."""

    def __init__(
        self,
        new_id: NewId,
        *,
        parse_tool_calls: bool = True,
        starts_in_thinking: bool = False,
        tools: Sequence[Tool] = (),
        namespaces: dict[str, str] | None = None,
    ) -> None:
        self._new_id = new_id
        self._parse_calls = parse_tool_calls
        self._tools = {t.name: t for t in tools}
        self._namespaces = namespaces if namespaces is not None else {t.name: t.namespace for t in tools}
        self._starts_in_thinking = starts_in_thinking
        self._pending_ws = ""  # whitespace held until we know more text follows it
        self._segment_start = True  # leading whitespace of a text segment is dropped
        self._buf = ""  # fed text not yet decided
        self.text = ""
        self.thinking = ""
        self.tool_calls: list[ToolCall] = []

    def feed(self, text: str) -> list[OutputEvent]:
        self._buf += text
        events: list[OutputEvent] = []
        while self._step(events, final=False):
            pass
        return events

    def finish(self) -> list[OutputEvent]:
        events: list[OutputEvent] = []
        while self._step(events, final=True):
            pass
        self._flush(events)
        self._buf = ""
        return events

    def _step(self, events: list[OutputEvent], final: bool) -> bool:
        """Consumes what can be decided from the buffer; True if it should be called again."""
        raise NotImplementedError

    def _flush(self, events: list[OutputEvent]) -> None:
        """At the end of the turn: what is still held back (the format says what it becomes)."""
        raise NotImplementedError

    # --- what formats build calls with ---

    def schema_of(self, name: str) -> dict:
        """The JSON schema of the request's tool `name` ({} when the request has no such tool)."""
        tool = self._tools.get(name)
        return tool.parameters if tool is not None and isinstance(tool.parameters, dict) else {}

    def make_call(self, name: str, arguments: str) -> ToolCall:
        return ToolCall(
            name=name, arguments=arguments, id=self._new_id(), namespace=self._namespaces.get(name, "")
        )

    # --- emitting ---

    def _emit_call(self, call: ToolCall, events: list[OutputEvent]) -> None:
        self.tool_calls.append(call)
        events.append(ToolCallDone(call=call, index=len(self.tool_calls) - 1))
        self._pending_ws, self._segment_start = "", True

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


class TaggedParser(StreamParser):
    """A turn of optional `<think>` thinking, then text with tool calls in `call_open … call_close`.

    Subclasses set the tags and `parse_body`; `wrappers` are structure tokens around a run of calls
    (DeepSeek's `<｜tool▁calls▁begin｜>`), dropped from the text."""

    call_open = "<tool_call>"
    call_close = "</tool_call>"
    wrappers: tuple[str, ...] = ()
    thinks = True  # a `<think>` block at the start of the turn is thinking

    def __init__(self, new_id: NewId, **kwargs) -> None:
        super().__init__(new_id, **kwargs)
        self._state = "thinking" if self._starts_in_thinking else ("start" if self.thinks else "text")

    def parse_body(self, body: str) -> ToolCall | None:
        """The call a block's body (between the tags) encodes, or None if it is malformed."""
        raise NotImplementedError

    def _flush(self, events: list[OutputEvent]) -> None:
        """An unterminated thinking block stays thinking, an unterminated tool call becomes text."""
        if self._state == "call":
            self._emit_text(self.call_open + self._buf, events)
        elif self._state == "thinking":
            self._emit_thinking(self._buf.rstrip("\n"), events)
        elif self._buf:
            self._emit_text(self._buf, events)

    # --- the state machine ---

    def _step(self, events: list[OutputEvent], final: bool) -> bool:
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
            return self._step_thinking(events, final)
        if self._state == "text":
            return self._step_text(events, final)
        return self._step_call(events)

    def _step_thinking(self, events: list[OutputEvent], final: bool) -> bool:
        end = self._buf.find(THINK_CLOSE)
        if end >= 0:
            self._emit_thinking(self._buf[:end].rstrip("\n"), events)
            self._buf = self._buf[end + len(THINK_CLOSE) :]
            self._state, self._segment_start = "text", True
            return True
        if final:
            return False
        hold = partial_tag_len(self._buf, THINK_CLOSE)
        safe = self._buf[: len(self._buf) - hold]
        keep = len(safe) - len(safe.rstrip("\n"))  # trailing newlines may precede </think>
        self._emit_thinking(safe[: len(safe) - keep], events)
        self._buf = self._buf[len(safe) - keep :]
        return False

    def _step_text(self, events: list[OutputEvent], final: bool) -> bool:
        tags = (self.call_open, *self.wrappers) if self._parse_calls else ()
        found = [(i, tag) for tag in tags if (i := self._buf.find(tag)) >= 0]
        if found:
            start, tag = min(found)
            self._emit_text(self._buf[:start], events)
            self._buf = self._buf[start + len(tag) :]
            if tag == self.call_open:
                self._pending_ws, self._segment_start = "", True
                self._state = "call"
            return True
        hold = 0 if final else max((partial_tag_len(self._buf, tag) for tag in tags), default=0)
        self._emit_text(self._buf[: len(self._buf) - hold], events)
        self._buf = self._buf[len(self._buf) - hold :]
        return False

    def _step_call(self, events: list[OutputEvent]) -> bool:
        end = self._buf.find(self.call_close)
        if end < 0:
            return False
        body = self._buf[:end]
        self._buf = self._buf[end + len(self.call_close) :]
        self._state = "text"
        call = self.parse_body(body)
        if call is None:
            self._emit_text(self.call_open + body + self.call_close, events)
        else:
            self._emit_call(call, events)
        return True
