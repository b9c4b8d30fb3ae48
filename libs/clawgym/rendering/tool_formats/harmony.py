"""gpt-oss "harmony" output: messages on channels, tool calls addressed to `functions.NAME`.

A turn is a run of messages, each `<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>
BODY` ended by `<|end|>`, `<|call|>` or `<|return|>`, the next starting `<|start|>assistant`
(the recipient may also stand before the channel: `<|start|>assistant to=functions.x<|channel|>…`,
as the template writes history). Owns the reading of such a turn: the analysis channel is thinking,
final and commentary without a recipient (a preamble) are text, and a message to `functions.NAME`
is a tool call whose body is the JSON arguments, emitted at its `<|call|>` (or at the end of the
turn, where `<|call|>` was the engine's stop token and never reached the parser). Output that is
not in this shape, and a call whose body is not a JSON object, is text.
"""

import json
import re

from clawgym.protocols.conversation import OutputEvent
from clawgym.rendering.tool_formats.base import NewId, StreamParser, partial_tag_len
from clawgym.rendering.tool_formats.hermes import json_call

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
_HEADER_OPENERS = (START, "assistant", CHANNEL, " to=", "to=")
_MAX_HEADER = 512  # a header longer than this is not one: the model is writing plain text
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*([\w.-]+)")
_RECIPIENT = re.compile(r"(?:^|\s)to=([^\s<]+)")


class HarmonyParser(StreamParser):
    def __init__(self, new_id: NewId, **kwargs) -> None:
        super().__init__(new_id, **kwargs)
        self._state = "header"  # header → body → header …; "plain" once the output is not harmony
        self._header = ""
        self._kind = ""  # the open message: "thinking", "text" or "call"
        self._recipient = ""

    def _flush(self, events: list[OutputEvent]) -> None:
        """An open message ends with the turn: thinking and text flush, a call is parsed."""
        if self._state == "body":
            self._close_message(self._buf, events)
        elif self._buf.strip():
            self._emit_text(self._buf, events)

    # --- the state machine ---

    def _step(self, events: list[OutputEvent], final: bool) -> bool:
        if self._state == "header":
            return self._step_header(events, final)
        if self._state == "body":
            return self._step_body(events, final)
        self._emit_text(self._buf, events)  # plain: not harmony, all of it is text
        self._buf = ""
        return False

    def _step_header(self, events: list[OutputEvent], final: bool) -> bool:
        at = self._buf.find(MESSAGE)
        head = self._buf if at < 0 else self._buf[:at]
        stripped = head.lstrip()
        opens = any(stripped.startswith(o) or o.startswith(stripped) for o in _HEADER_OPENERS)
        if not opens or len(head) > _MAX_HEADER or (at < 0 and final):
            self._state = "plain"
            return True
        if at < 0:
            return False
        self._header, self._buf = head, self._buf[at + len(MESSAGE) :]
        channel = _CHANNEL.search(head)
        recipient = _RECIPIENT.search(head.replace(CHANNEL, " ").replace(CONSTRAIN, " "))
        self._recipient = recipient.group(1) if recipient else ""
        if self._recipient:
            self._kind = "call"
        elif channel is not None and channel.group(1) == "analysis":
            self._kind = "thinking"
        else:
            self._kind = "text"
            self._pending_ws, self._segment_start = "", True
        if self._kind == "thinking" and self.thinking:
            self._emit_thinking("\n\n", events)  # between two analysis messages
        self._state = "body"
        return True

    def _step_body(self, events: list[OutputEvent], final: bool) -> bool:
        found = [(i, end) for end in ENDS if (i := self._buf.find(end)) >= 0]
        if found:
            at, end = min(found)
            body, self._buf = self._buf[:at], self._buf[at + len(end) :]
            self._close_message(body, events)
            self._state = "header"
            return True
        if self._kind == "call" or final:
            return False  # a call's body is read whole
        hold = max(partial_tag_len(self._buf, end) for end in ENDS)
        safe, self._buf = self._buf[: len(self._buf) - hold], self._buf[len(self._buf) - hold :]
        self._stream(safe, events)
        return False

    def _stream(self, text: str, events: list[OutputEvent]) -> None:
        if self._kind == "thinking":
            self._emit_thinking(text, events)
        else:
            self._emit_text(text, events)

    def _close_message(self, body: str, events: list[OutputEvent]) -> None:
        if self._kind != "call":
            self._stream(body, events)
            return
        call = None
        if self._recipient.startswith("functions.") and self._parse_calls:
            try:
                found = json_call(
                    {"name": self._recipient.removeprefix("functions."), "arguments": json.loads(body)}
                )
            except (ValueError, RecursionError):
                found = None
            call = None if found is None else self.make_call(*found)
        if call is None:
            self._segment_start = True
            self._emit_text(self._header + MESSAGE + body, events)
        else:
            self._emit_call(call, events)
