"""Anthropic Messages (`POST /v1/messages`, `/v1/messages/count_tokens`): what Claude Code speaks.

Owns the Anthropic wire format: tolerant request models, request → `Conversation`, completion →
message JSON, the SSE event stream (message_start, content_block_start/delta/stop with
text_delta / thinking_delta / input_json_delta, message_delta, message_stop, ping) and the
`{"type": "error", "error": {…}}` shape. Reference: https://docs.anthropic.com/en/api/messages
and https://docs.anthropic.com/en/docs/build-with-claude/streaming. Quirks of real clients are
in the last section; see also ../shared/HARNESSES.md.
"""

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from pydantic import Field

from clawgym.errors import ClawgymError, InvalidArgument, NotFound, Unauthenticated, Unavailable
from clawgym.protocols.conversation import (
    Completion,
    Conversation,
    Failed,
    Finished,
    GenerationOptions,
    Message,
    StreamItem,
    TextDelta,
    ThinkingDelta,
    Tool,
    ToolCall,
    ToolCallDone,
)
from clawgym.protocols.wire import LogOnce, WireModel, WireRequest, ignored_fields, new_id, sse, validate

# --- wire models (ordered as in the API reference) ---


class TextBlock(WireModel):
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = None


class ImageBlock(WireModel):
    type: Literal["image"]
    source: Any = None


class DocumentBlock(WireModel):
    type: Literal["document"]
    source: Any = None


class ToolUseBlock(WireModel):
    type: Literal["tool_use"]
    id: str = ""
    name: str
    input: Any = None


class ToolResultBlock(WireModel):
    type: Literal["tool_result"]
    tool_use_id: str = ""
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class ThinkingBlock(WireModel):
    type: Literal["thinking"]
    thinking: str = ""
    signature: str | None = None


class RedactedThinkingBlock(WireModel):
    type: Literal["redacted_thinking"]
    data: str = ""


ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class AnthropicMessage(WireModel):
    role: Literal["user", "assistant", "system"]  # "system" inside messages: Claude Code sends it
    content: str | list[ContentBlock]


class AnthropicTool(WireModel):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    type: str | None = None  # absent or "custom" for client tools; e.g. "web_search_20250305" for hosted ones
    cache_control: dict[str, Any] | None = None
    defer_loading: bool | None = None


class AnthropicMessagesRequest(WireModel):
    """https://docs.anthropic.com/en/api/messages — fields in the reference's order."""

    model: str = ""
    messages: list[AnthropicMessage]
    max_tokens: int | None = Field(None, ge=1)  # required by Anthropic; absent = up to the context
    metadata: dict[str, Any] | None = None  # Claude Code: {"user_id": "<a JSON string>"}
    stop_sequences: list[str] | None = None
    stream: bool = False
    system: str | list[TextBlock] | None = None
    temperature: float | None = Field(None, ge=0)
    thinking: dict[str, Any] | None = None
    tool_choice: dict[str, Any] | None = None
    tools: list[AnthropicTool] | None = None
    top_k: int | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)


class AnthropicCountTokensRequest(WireModel):
    """https://docs.anthropic.com/en/api/messages-count-tokens"""

    model: str = ""
    messages: list[AnthropicMessage]
    system: str | list[TextBlock] | None = None
    thinking: dict[str, Any] | None = None
    tool_choice: dict[str, Any] | None = None
    tools: list[AnthropicTool] | None = None


# fields real clients send that change nothing here (not logged as ignored)
KNOWN_IGNORED = frozenset({"context_management", "output_config", "service_tier", "container", "mcp_servers"})


# --- request → Conversation ---


def _text_of(blocks: list[Any], where: str) -> str:
    """Text of a list of content blocks; anything but text is refused with a clear 400."""
    parts = []
    for b in blocks:
        kind = b.get("type") if isinstance(b, dict) else getattr(b, "type", None)
        if kind == "text":
            parts.append(b["text"] if isinstance(b, dict) else b.text)
        elif kind in ("image", "document"):
            raise InvalidArgument(f"{where}: {kind} content is not supported by this policy (text only)")
        else:
            raise InvalidArgument(f"{where}: unsupported content block type {kind!r}")
    if not all(isinstance(p, str) for p in parts):
        raise InvalidArgument(f"{where}: text blocks must carry a string")
    return "\n\n".join(parts)


def _system_text(system: str | list[TextBlock] | None) -> str:
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    return "\n\n".join(b.text for b in system if not is_billing_header(b.text))


def _message(m: AnthropicMessage, i: int) -> list[Message]:
    where = f"messages.{i}"
    if isinstance(m.content, str):
        role = "system" if m.role == "system" else m.role
        return [Message(role=role, content=m.content)]
    if m.role == "system":
        return [Message(role="system", content=_text_of(m.content, where))]
    if m.role == "assistant":
        text, thinking, calls = [], [], []
        for b in m.content:
            if isinstance(b, TextBlock):
                text.append(b.text)
            elif isinstance(b, ThinkingBlock):
                thinking.append(b.thinking)
            elif isinstance(b, ToolUseBlock):
                args = b.input if b.input is not None else {}
                calls.append(ToolCall(name=b.name, arguments=json.dumps(args, ensure_ascii=False), id=b.id))
            elif isinstance(b, RedactedThinkingBlock):
                continue
            else:
                raise InvalidArgument(f"{where}: {b.type} content is not supported in an assistant turn")
        return [Message("assistant", "\n\n".join(text), "\n\n".join(thinking), tuple(calls))]
    out: list[Message] = []
    pending: list[str] = []
    for b in m.content:
        if isinstance(b, ToolResultBlock):
            if pending:
                out.append(Message("user", "\n\n".join(pending)))
                pending = []
            content = (
                b.content if isinstance(b.content, str) else _text_of(b.content or [], f"{where}.tool_result")
            )
            out.append(Message("tool", content, tool_call_id=b.tool_use_id))
        elif isinstance(b, TextBlock):
            pending.append(b.text)
        elif isinstance(b, ImageBlock | DocumentBlock):
            raise InvalidArgument(f"{where}: {b.type} content is not supported by this policy (text only)")
        else:
            raise InvalidArgument(f"{where}: {b.type} content is not supported in a user turn")
    if pending:
        out.append(Message("user", "\n\n".join(pending)))
    return out


def _tools(tools: list[AnthropicTool] | None, log_once: LogOnce) -> tuple[Tool, ...]:
    out = []
    for t in tools or []:
        if t.type not in (None, "custom"):
            log_once(f"anthropic:hosted:{t.type}", f"anthropic_messages: hosted tool {t.type!r} dropped")
            continue
        out.append(Tool(name=t.name, description=t.description, parameters=t.input_schema))
    return tuple(out)


def to_conversation(
    req: AnthropicMessagesRequest | AnthropicCountTokensRequest, log_once: LogOnce
) -> Conversation:
    messages: list[Message] = []
    system = _system_text(req.system)
    if system:
        messages.append(Message("system", system))
    for i, m in enumerate(req.messages):
        messages.extend(_message(m, i))
    if not messages:
        raise InvalidArgument("messages: at least one message is required")
    return Conversation(tuple(messages), _tools(req.tools, log_once))


# --- completion → JSON ---

STOP_REASONS = {"length": "max_tokens", "abort": "end_turn"}


def stop_reason(c: Completion) -> str:
    if c.stop_sequence is not None:
        return "stop_sequence"
    if c.finish_reason == "stop" and c.tool_calls:
        return "tool_use"
    return STOP_REASONS.get(c.finish_reason, "end_turn")


def tool_input(call: ToolCall) -> dict[str, Any]:
    value = call.arguments_value()
    return value if isinstance(value, dict) else {}


def usage(prompt_tokens: int, reused: int, output_tokens: int) -> dict[str, int]:
    """Spliced prompt tokens are reported as cache reads, so input + cache_read = the prompt."""
    return {
        "input_tokens": prompt_tokens - reused,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": reused,
        "output_tokens": output_tokens,
    }


class AnthropicReply:
    """One call's answer: the message JSON, or its event stream."""

    def __init__(self, model: str, prompt_tokens: int, reused_tokens: int) -> None:
        self.id = new_id("msg_")()
        self.new_tool_id = new_id("toolu_")
        self._model = model
        self._prompt, self._reused = prompt_tokens, reused_tokens

    def _message(self, content: list[dict[str, Any]], c: Completion | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": content,
            "stop_reason": stop_reason(c) if c else None,
            "stop_sequence": c.stop_sequence if c else None,
            "usage": usage(self._prompt, self._reused, c.usage.output_tokens if c else 0),
        }

    def response(self, c: Completion) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if c.thinking:
            content.append({"type": "thinking", "thinking": c.thinking, "signature": ""})
        if c.text:
            content.append({"type": "text", "text": c.text})
        for call in c.tool_calls:
            content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)})
        return self._message(content, c)

    # --- SSE events ---

    async def stream(self, items: AsyncIterator[StreamItem]) -> AsyncIterator[bytes]:
        yield sse({"type": "message_start", "message": self._message([], None)}, "message_start")
        yield sse({"type": "ping"}, "ping")
        index, open_kind = -1, None

        def close() -> bytes:
            return sse({"type": "content_block_stop", "index": index}, "content_block_stop")

        async for item in items:
            if isinstance(item, TextDelta | ThinkingDelta):
                kind = "text" if isinstance(item, TextDelta) else "thinking"
                if open_kind != kind:
                    if open_kind is not None:
                        if open_kind == "thinking":
                            yield _delta(index, {"type": "signature_delta", "signature": ""})
                        yield close()
                    index, open_kind = index + 1, kind
                    block = (
                        {"type": "text", "text": ""}
                        if kind == "text"
                        else {"type": "thinking", "thinking": "", "signature": ""}
                    )
                    yield sse(
                        {"type": "content_block_start", "index": index, "content_block": block},
                        "content_block_start",
                    )
                delta = (
                    {"type": "text_delta", "text": item.text}
                    if kind == "text"
                    else {"type": "thinking_delta", "thinking": item.text}
                )
                yield _delta(index, delta)
            elif isinstance(item, ToolCallDone):
                if open_kind is not None:
                    if open_kind == "thinking":
                        yield _delta(index, {"type": "signature_delta", "signature": ""})
                    yield close()
                index, open_kind = index + 1, None
                call = item.call
                block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
                yield sse(
                    {"type": "content_block_start", "index": index, "content_block": block},
                    "content_block_start",
                )
                args = json.dumps(tool_input(call), ensure_ascii=False)
                yield _delta(index, {"type": "input_json_delta", "partial_json": args})
                yield close()
            elif isinstance(item, Finished):
                if open_kind is not None:
                    if open_kind == "thinking":
                        yield _delta(index, {"type": "signature_delta", "signature": ""})
                    yield close()
                c = item.completion
                yield sse(
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": stop_reason(c), "stop_sequence": c.stop_sequence},
                        "usage": usage(self._prompt, self._reused, c.usage.output_tokens),
                    },
                    "message_delta",
                )
                yield sse({"type": "message_stop"}, "message_stop")
            elif isinstance(item, Failed):
                yield stream_error(item.error)


def _delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")


# --- errors ---

ERROR_TYPES: list[tuple[type[Exception], str]] = [
    (InvalidArgument, "invalid_request_error"),
    (Unauthenticated, "authentication_error"),
    (NotFound, "not_found_error"),
    (Unavailable, "overloaded_error"),
]


def error_body(error: Exception) -> dict[str, Any]:
    kind = next((name for cls, name in ERROR_TYPES if isinstance(error, cls)), "api_error")
    if isinstance(error, ClawgymError) and error.http_status == 413:  # Anthropic's own type for it
        kind = "request_too_large"
    if isinstance(error, ClawgymError) and kind == "api_error" and error.http_status < 500:
        kind = "invalid_request_error"
    return {"type": "error", "error": {"type": kind, "message": str(error)}}


def stream_error(error: Exception) -> bytes:
    return sse(error_body(error), "error")


# --- quirks ---

BILLING_HEADER = "x-anthropic-billing-header:"


def is_billing_header(text: str) -> bool:
    """Claude Code's system block 0 is an attribution line for Anthropic's billing, not a prompt:
    dropped, so it neither reaches the policy nor breaks prefix sharing if it changes."""
    return text.lstrip().startswith(BILLING_HEADER)


# --- the protocol ---


class AnthropicMessages:
    """The Anthropic Messages protocol for the proxy (`WireProtocol`)."""

    name = "anthropic_messages"

    def __init__(self) -> None:
        self._log_once = LogOnce()

    def parse(self, body: Any) -> WireRequest:
        req: AnthropicMessagesRequest = validate(AnthropicMessagesRequest, body)
        ignored_fields(req, self._log_once, self.name, KNOWN_IGNORED)
        conv = to_conversation(req, self._log_once)
        choice = (req.tool_choice or {}).get("type")
        options = GenerationOptions(
            max_tokens=req.max_tokens,
            stop=tuple(req.stop_sequences or ()),
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            stream=req.stream,
            parse_tool_calls=bool(conv.tools) and choice != "none",
        )
        return WireRequest(conv, options, req.model, req)

    def parse_count_tokens(self, body: Any) -> Conversation:
        req: AnthropicCountTokensRequest = validate(AnthropicCountTokensRequest, body)
        return to_conversation(req, self._log_once)

    def reply(self, request: WireRequest, prompt_tokens: int, reused_tokens: int) -> AnthropicReply:
        return AnthropicReply(request.model, prompt_tokens, reused_tokens)

    def error_body(self, error: ClawgymError) -> dict[str, Any]:
        return error_body(error)

    def stream_error(self, error: Exception) -> bytes:
        return stream_error(error)
