"""OpenAI Chat Completions (`POST /v1/chat/completions`): opencode, Qwen Code, mini-swe-agent, OpenClaw.

Owns the Chat Completions wire format: tolerant request models, request → `Conversation`,
completion → `chat.completion` JSON, the `chat.completion.chunk` SSE stream ending in
`data: [DONE]` (with a usage chunk when `stream_options.include_usage`), and the OpenAI error
shape `{"error": {"message", "type", "param", "code"}}` (shared with Responses).
Reference: https://platform.openai.com/docs/api-reference/chat/create
"""

import json
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

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


class ChatFunctionCall(WireModel):
    name: str
    arguments: str | dict[str, Any] = "{}"  # a JSON string on the wire; some clients send the object


class ChatToolCall(WireModel):
    id: str = ""
    type: str = "function"
    function: ChatFunctionCall


class ChatMessage(WireModel):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None  # assistant turns with tool_calls may omit it
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None
    # clawgym-specific: thinking echoed back (vLLM / Qwen convention)
    reasoning_content: str | None = None


class ChatFunction(WireModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(WireModel):
    type: str = "function"
    function: ChatFunction | None = None


class StreamOptions(WireModel):
    include_usage: bool | None = None


class ChatCompletionRequest(WireModel):
    """https://platform.openai.com/docs/api-reference/chat/create — fields in the reference's order."""

    messages: list[ChatMessage]
    model: str = ""
    frequency_penalty: float | None = None
    logprobs: bool | None = None
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    metadata: dict[str, Any] | None = None
    n: int | None = Field(None, ge=1)
    parallel_tool_calls: bool | None = None
    presence_penalty: float | None = None
    reasoning_effort: str | None = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    store: bool | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(None, ge=0)
    tool_choice: str | dict[str, Any] | None = None
    tools: list[ChatTool] | None = None
    top_logprobs: int | None = None
    top_p: float | None = Field(None, gt=0, le=1)
    user: str | None = None
    # clawgym-specific (vLLM's extension)
    top_k: int | None = Field(None, ge=0)


KNOWN_IGNORED = frozenset(
    {"thinking", "usage", "enable_thinking", "chat_template_kwargs", "prompt_cache_key"}
)


# --- request → Conversation ---


def content_text(content: str | list[dict[str, Any]] | None, where: str) -> str:
    """Text of a message's content: a string, or a list of text parts; other parts are a 400."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text", "refusal"):
            text = part.get("text", part.get("refusal"))
            if not isinstance(text, str):
                raise InvalidArgument(f"{where}: a {kind} part must carry a string")
            parts.append(text)
        elif kind in ("image_url", "input_image", "input_audio", "file", "input_file"):
            raise InvalidArgument(f"{where}: {kind} content is not supported by this policy (text only)")
        else:
            raise InvalidArgument(f"{where}: unsupported content part type {kind!r}")
    return "\n\n".join(parts)


def _arguments(args: str | dict[str, Any]) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _message(m: ChatMessage, i: int) -> Message:
    where = f"messages.{i}.content"
    text = content_text(m.content, where)
    if m.role in ("system", "developer"):
        return Message("system", text)
    if m.role == "user":
        return Message("user", text)
    if m.role in ("tool", "function"):
        return Message("tool", text, tool_call_id=m.tool_call_id or "")
    calls = tuple(
        ToolCall(name=c.function.name, arguments=_arguments(c.function.arguments), id=c.id)
        for c in m.tool_calls or []
    )
    return Message("assistant", text, m.reasoning_content or "", calls)


def to_conversation(req: ChatCompletionRequest, log_once: LogOnce) -> Conversation:
    if not req.messages:
        raise InvalidArgument("messages: at least one message is required")
    tools = []
    for t in req.tools or []:
        if t.type != "function" or t.function is None:
            log_once(f"chat:tool:{t.type}", f"openai_chat: non-function tool {t.type!r} dropped")
            continue
        f = t.function
        tools.append(Tool(name=f.name, description=f.description or "", parameters=f.parameters or {}))
    return Conversation(tuple(_message(m, i) for i, m in enumerate(req.messages)), tuple(tools))


# --- completion → JSON ---


def finish_reason(c: Completion) -> str:
    if c.finish_reason == "length":
        return "length"
    return "tool_calls" if c.tool_calls and c.stop_sequence is None else "stop"


def tool_call_json(call: ToolCall, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    return out if index is None else {"index": index, **out}


class ChatReply:
    def __init__(self, model: str, prompt_tokens: int, reused_tokens: int, include_usage: bool) -> None:
        self.id = new_id("chatcmpl-")()
        self.new_tool_id = new_id("call_")
        self._model = model
        self._created = int(time.time())
        self._prompt, self._reused = prompt_tokens, reused_tokens
        self._include_usage = include_usage

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        return {
            "prompt_tokens": self._prompt,
            "completion_tokens": output_tokens,
            "total_tokens": self._prompt + output_tokens,
            "prompt_tokens_details": {"cached_tokens": self._reused},
        }

    def response(self, c: Completion) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": c.text if c.text or not c.tool_calls else None,
        }
        if c.tool_calls:
            message["tool_calls"] = [tool_call_json(call) for call in c.tool_calls]
        if c.thinking:
            message["reasoning_content"] = c.thinking
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish_reason(c), "logprobs": None}
            ],
            "usage": self._usage(c.usage.output_tokens),
        }

    # --- SSE events ---

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self._created,
                "model": self._model,
                "choices": [choice],
            }
        )

    async def stream(self, items: AsyncIterator[StreamItem]) -> AsyncIterator[bytes]:
        yield self._chunk({"role": "assistant", "content": ""})
        async for item in items:
            if isinstance(item, TextDelta):
                yield self._chunk({"content": item.text})
            elif isinstance(item, ThinkingDelta):
                yield self._chunk({"reasoning_content": item.text})
            elif isinstance(item, ToolCallDone):
                yield self._chunk({"tool_calls": [tool_call_json(item.call, item.index)]})
            elif isinstance(item, Finished):
                c = item.completion
                yield self._chunk({}, finish_reason(c))
                if self._include_usage:
                    yield sse(
                        {
                            "id": self.id,
                            "object": "chat.completion.chunk",
                            "created": self._created,
                            "model": self._model,
                            "choices": [],
                            "usage": self._usage(c.usage.output_tokens),
                        }
                    )
                yield sse("[DONE]")
            elif isinstance(item, Failed):
                yield stream_error(item.error)


# --- errors (the OpenAI shape, shared with Responses) ---

ERROR_TYPES: list[tuple[type[Exception], str]] = [
    (InvalidArgument, "invalid_request_error"),
    (Unauthenticated, "authentication_error"),
    (NotFound, "not_found_error"),
    (Unavailable, "service_unavailable"),
]


def error_body(error: Exception) -> dict[str, Any]:
    kind = next((name for cls, name in ERROR_TYPES if isinstance(error, cls)), "server_error")
    if isinstance(error, ClawgymError) and kind == "server_error" and error.http_status < 500:
        kind = "invalid_request_error"
    return {"error": {"message": str(error), "type": kind, "param": None, "code": None}}


def stream_error(error: Exception) -> bytes:
    return sse(error_body(error))


# --- quirks ---
# OpenClaw strips underscores from the tool-call ids it echoes (`call_ab` → `callab`): turns are
# matched on content (`Message.fingerprint`), never on ids, so the rewrite is harmless.
# Assistant messages with `tool_calls` and no `content` key, and tool results given as a list of
# text parts (opencode, Qwen Code), are accepted by the models above.


# --- the protocol ---


class OpenAIChat:
    """The Chat Completions protocol for the proxy (`WireProtocol`)."""

    name = "openai_chat"

    def __init__(self) -> None:
        self._log_once = LogOnce()

    def parse(self, body: Any) -> WireRequest:
        req: ChatCompletionRequest = validate(ChatCompletionRequest, body)
        ignored_fields(req, self._log_once, self.name, KNOWN_IGNORED)
        if (req.n or 1) > 1:
            raise InvalidArgument("n: only one choice per request is supported")
        conv = to_conversation(req, self._log_once)
        stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        options = GenerationOptions(
            max_tokens=req.max_completion_tokens or req.max_tokens,
            stop=stop,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            seed=req.seed,
            stream=bool(req.stream),
            parse_tool_calls=bool(conv.tools) and req.tool_choice != "none",
            include_usage=bool(req.stream_options and req.stream_options.include_usage),
        )
        return WireRequest(conv, options, req.model, req)

    def reply(self, request: WireRequest, prompt_tokens: int, reused_tokens: int) -> ChatReply:
        return ChatReply(request.model, prompt_tokens, reused_tokens, request.options.include_usage)

    def error_body(self, error: ClawgymError) -> dict[str, Any]:
        return error_body(error)

    def stream_error(self, error: Exception) -> bytes:
        return stream_error(error)
