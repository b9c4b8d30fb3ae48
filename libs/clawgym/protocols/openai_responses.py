"""OpenAI Responses (`POST /v1/responses`): what Codex speaks (and OpenClaw, optionally).

Owns the Responses wire format: tolerant request models, `instructions` + `input` items →
`Conversation` (messages incl. `developer` ones, `reasoning`, `function_call`,
`function_call_output`), completion → `response` JSON with output items (reasoning, message,
function_call), the typed SSE event stream (response.created, response.in_progress,
output_item.added/done, content_part.added/done, output_text.delta/done,
function_call_arguments.delta/done, response.completed with usage) and errors in the OpenAI
shape. Reference: https://platform.openai.com/docs/api-reference/responses
"""

import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field

from clawgym.errors import ClawgymError, InvalidArgument
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
from clawgym.protocols.openai_chat import content_text, error_body
from clawgym.protocols.wire import LogOnce, WireModel, WireRequest, ignored_fields, new_id, sse, validate

# --- wire models (ordered as in the API reference) ---


class MessageItem(WireModel):
    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[dict[str, Any]]


class FunctionCallItem(WireModel):
    type: Literal["function_call"]
    call_id: str = ""
    name: str
    arguments: str = "{}"
    namespace: str | None = None


class FunctionCallOutputItem(WireModel):
    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: str = ""
    output: str | list[dict[str, Any]] | dict[str, Any]


class CustomToolCallItem(WireModel):
    type: Literal["custom_tool_call"]
    call_id: str = ""
    name: str
    input: str = ""


class ReasoningItem(WireModel):
    type: Literal["reasoning"]
    summary: list[dict[str, Any]] = Field(default_factory=list)
    content: list[dict[str, Any]] | None = None


ITEM_MODELS: dict[str, type[WireModel]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "custom_tool_call_output": FunctionCallOutputItem,
    "custom_tool_call": CustomToolCallItem,
    "reasoning": ReasoningItem,
}
# outputs of hosted tools we never offer; harmless to skip when echoed back
SKIPPED_ITEMS = frozenset(
    {"web_search_call", "file_search_call", "image_generation_call", "code_interpreter_call"}
)


class ResponsesTool(WireModel):
    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    tools: list[dict[str, Any]] | None = None  # a `namespace` tool's functions (Codex)


class ResponsesRequest(WireModel):
    """https://platform.openai.com/docs/api-reference/responses/create — fields in the reference's order."""

    include: list[str] | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    metadata: dict[str, Any] | None = None
    model: str = ""
    parallel_tool_calls: bool | None = None
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    reasoning: dict[str, Any] | None = None
    store: bool | None = None
    stream: bool | None = False
    temperature: float | None = Field(None, ge=0)
    text: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    tools: list[ResponsesTool] | None = None
    top_p: float | None = Field(None, gt=0, le=1)
    truncation: str | None = None
    user: str | None = None
    # clawgym-specific: what Codex adds
    client_metadata: dict[str, Any] | None = None


KNOWN_IGNORED = frozenset({"service_tier", "safety_identifier", "stream_options", "background", "prompt"})


# --- request → Conversation ---


def _output_text(output: str | list[dict[str, Any]] | dict[str, Any], where: str) -> str:
    if isinstance(output, dict):  # Codex's failure form: {"content": "...", "success": false}
        content = output.get("content", "")
        return content if isinstance(content, str) else content_text(content, where)
    return content_text(output, where)


def _items(req: ResponsesRequest, log_once: LogOnce) -> list[Message]:
    """Input items → messages. Consecutive reasoning / assistant message / function_call items
    form one assistant turn, which is how the proxy emitted them."""
    out: list[Message] = []
    if isinstance(req.input, str):
        return [Message("user", req.input)]
    turn: Message | None = None

    def flush() -> None:
        nonlocal turn
        if turn is not None:
            out.append(turn)
            turn = None

    for i, raw in enumerate(req.input):
        where = f"input.{i}"
        kind = raw.get("type") or ("message" if "role" in raw else None)
        if not isinstance(kind, str):
            raise InvalidArgument(f"{where}: an input item needs a string `type` (or a `role`)")
        if kind in SKIPPED_ITEMS:
            log_once(f"responses:item:{kind}", f"openai_responses: input item {kind!r} skipped")
            continue
        if kind == "item_reference":
            raise InvalidArgument(
                f"{where}: item_reference is not supported (requests must carry full history)"
            )
        model = ITEM_MODELS.get(kind or "")
        if model is None:
            raise InvalidArgument(f"{where}: unsupported input item type {kind!r}")
        item = validate(model, raw)
        if isinstance(item, MessageItem):
            text = (
                content_text(item.content, f"{where}.content")
                if not isinstance(item.content, str)
                else item.content
            )
            if item.role == "assistant":
                if turn is not None and (turn.content or turn.tool_calls):
                    flush()
                prior = turn.thinking if turn is not None else ""
                turn = Message("assistant", text, prior)
                continue
            flush()
            out.append(Message("system" if item.role in ("system", "developer") else "user", text))
        elif isinstance(item, ReasoningItem):
            flush()
            parts = [
                p.get("text", "") for p in (item.content or item.summary) if isinstance(p.get("text"), str)
            ]
            turn = Message("assistant", "", "\n\n".join(parts))
        elif isinstance(item, FunctionCallItem | CustomToolCallItem):
            args = item.arguments if isinstance(item, FunctionCallItem) else item.input
            call = ToolCall(name=item.name, arguments=args, id=item.call_id)
            base = turn if turn is not None else Message("assistant")
            turn = Message("assistant", base.content, base.thinking, (*base.tool_calls, call))
        else:
            flush()
            out.append(
                Message("tool", _output_text(item.output, f"{where}.output"), tool_call_id=item.call_id)
            )
    flush()
    return out


def _tools(tools: list[ResponsesTool] | None, log_once: LogOnce) -> tuple[Tool, ...]:
    out: list[Tool] = []
    for t in tools or []:
        if t.type == "function" and t.name:
            out.append(Tool(name=t.name, description=t.description or "", parameters=t.parameters or {}))
        elif t.type == "namespace":
            # Codex groups sub-agent functions in a namespace tool: flattened into plain functions,
            # remembering the namespace so the call can name it when echoed back
            for f in t.tools or []:
                name = f.get("name")
                if f.get("type", "function") != "function" or not isinstance(name, str):
                    continue
                params = f.get("parameters")
                desc = f.get("description")
                out.append(
                    Tool(
                        name=name,
                        description=desc if isinstance(desc, str) else "",
                        parameters=params if isinstance(params, dict) else {},
                        namespace=t.name or "",
                    )
                )
        else:
            log_once(f"responses:tool:{t.type}", f"openai_responses: hosted tool {t.type!r} dropped")
    return tuple(out)


def to_conversation(req: ResponsesRequest, log_once: LogOnce) -> Conversation:
    messages = []
    if req.instructions:
        messages.append(Message("system", req.instructions))
    messages += _items(req, log_once)
    if not messages:
        raise InvalidArgument("input: at least one item is required")
    return Conversation(tuple(messages), _tools(req.tools, log_once))


# --- completion → JSON ---


class ResponsesReply:
    def __init__(self, req: ResponsesRequest, prompt_tokens: int, reused_tokens: int) -> None:
        self.id = new_id("resp_")()
        self.new_tool_id = new_id("call_")
        self._new_item_id = {k: new_id(f"{k}_") for k in ("rs", "msg", "fc")}
        self._req = req
        self._created = int(time.time())
        self._prompt, self._reused = prompt_tokens, reused_tokens
        self._seq = 0
        self._item_ids: dict[str, str] = {}

    def _item_id(self, slot: str, kind: str) -> str:
        """Item ids are stable across the stream and the recorded response of one call."""
        if slot not in self._item_ids:
            self._item_ids[slot] = self._new_item_id[kind]()
        return self._item_ids[slot]

    def _usage(self, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": self._prompt,
            "input_tokens_details": {"cached_tokens": self._reused},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": self._prompt + output_tokens,
        }

    def _reasoning_item(self, text: str, done: bool) -> dict[str, Any]:
        item: dict[str, Any] = {"type": "reasoning", "id": self._item_id("rs", "rs"), "summary": []}
        if done:
            item["summary"] = [{"type": "summary_text", "text": text}]
        return item

    def _message_item(self, text: str | None) -> dict[str, Any]:
        content = (
            [] if text is None else [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
        )
        return {
            "type": "message",
            "id": self._item_id("msg", "msg"),
            "status": "in_progress" if text is None else "completed",
            "role": "assistant",
            "content": content,
        }

    def _call_item(self, call: ToolCall, index: int, done: bool) -> dict[str, Any]:
        item: dict[str, Any] = {
            "type": "function_call",
            "id": self._item_id(f"fc{index}", "fc"),
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments if done else "",
            "status": "completed" if done else "in_progress",
        }
        if call.namespace:
            item["namespace"] = call.namespace
        return item

    def _response(self, output: list[dict[str, Any]], c: Completion | None) -> dict[str, Any]:
        r = self._req
        status = (
            "in_progress" if c is None else ("incomplete" if c.finish_reason == "length" else "completed")
        )
        return {
            "id": self.id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": r.instructions,
            "max_output_tokens": r.max_output_tokens,
            "model": r.model,
            "output": output,
            "parallel_tool_calls": r.parallel_tool_calls if r.parallel_tool_calls is not None else True,
            "previous_response_id": None,
            "reasoning": r.reasoning or {"effort": None, "summary": None},
            "store": False,
            "temperature": r.temperature,
            "text": r.text or {"format": {"type": "text"}},
            "tool_choice": r.tool_choice or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in r.tools or []],
            "top_p": r.top_p,
            "truncation": r.truncation or "disabled",
            "usage": self._usage(c.usage.output_tokens) if c else None,
            "user": r.user,
            "metadata": r.metadata or {},
        }

    def _output(self, c: Completion) -> list[dict[str, Any]]:
        out = []
        if c.thinking:
            out.append(self._reasoning_item(c.thinking, True))
        if c.text:
            out.append(self._message_item(c.text))
        out += [self._call_item(call, i, True) for i, call in enumerate(c.tool_calls)]
        return out

    def response(self, c: Completion) -> dict[str, Any]:
        return self._response(self._output(c), c)

    # --- SSE events ---

    def _event(self, kind: str, **fields: Any) -> bytes:
        self._seq += 1
        return sse({"type": kind, "sequence_number": self._seq - 1, **fields}, kind)

    async def stream(self, items: AsyncIterator[StreamItem]) -> AsyncIterator[bytes]:
        yield self._event("response.created", response=self._response([], None))
        yield self._event("response.in_progress", response=self._response([], None))
        index, open_kind, text = -1, None, ""

        def close() -> list[bytes]:
            if open_kind == "reasoning":
                item = self._reasoning_item(text, True)
                part = {"type": "summary_text", "text": text}
                return [
                    self._event(
                        "response.reasoning_summary_text.done",
                        item_id=item["id"],
                        output_index=index,
                        summary_index=0,
                        text=text,
                    ),
                    self._event(
                        "response.reasoning_summary_part.done",
                        item_id=item["id"],
                        output_index=index,
                        summary_index=0,
                        part=part,
                    ),
                    self._event("response.output_item.done", output_index=index, item=item),
                ]
            if open_kind == "message":
                item = self._message_item(text)
                ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
                return [
                    self._event("response.output_text.done", **ids, text=text, logprobs=[]),
                    self._event("response.content_part.done", **ids, part=item["content"][0]),
                    self._event("response.output_item.done", output_index=index, item=item),
                ]
            return []

        async for item in items:
            if isinstance(item, ThinkingDelta | TextDelta):
                kind = "reasoning" if isinstance(item, ThinkingDelta) else "message"
                if open_kind != kind:
                    for b in close():
                        yield b
                    index, open_kind, text = index + 1, kind, ""
                    if kind == "reasoning":
                        added = self._reasoning_item("", False)
                        yield self._event("response.output_item.added", output_index=index, item=added)
                        yield self._event(
                            "response.reasoning_summary_part.added",
                            item_id=added["id"],
                            output_index=index,
                            summary_index=0,
                            part={"type": "summary_text", "text": ""},
                        )
                    else:
                        added = self._message_item(None)
                        yield self._event("response.output_item.added", output_index=index, item=added)
                        yield self._event(
                            "response.content_part.added",
                            item_id=added["id"],
                            output_index=index,
                            content_index=0,
                            part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
                        )
                text += item.text
                if kind == "reasoning":
                    yield self._event(
                        "response.reasoning_summary_text.delta",
                        item_id=self._item_ids["rs"],
                        output_index=index,
                        summary_index=0,
                        delta=item.text,
                    )
                else:
                    yield self._event(
                        "response.output_text.delta",
                        item_id=self._item_ids["msg"],
                        output_index=index,
                        content_index=0,
                        delta=item.text,
                        logprobs=[],
                    )
            elif isinstance(item, ToolCallDone):
                for b in close():
                    yield b
                index, open_kind = index + 1, None
                added = self._call_item(item.call, item.index, False)
                ids = {"item_id": added["id"], "output_index": index}
                yield self._event("response.output_item.added", output_index=index, item=added)
                yield self._event("response.function_call_arguments.delta", **ids, delta=item.call.arguments)
                yield self._event(
                    "response.function_call_arguments.done",
                    **ids,
                    name=item.call.name,
                    arguments=item.call.arguments,
                )
                yield self._event(
                    "response.output_item.done",
                    output_index=index,
                    item=self._call_item(item.call, item.index, True),
                )
            elif isinstance(item, Finished):
                for b in close():
                    yield b
                c = item.completion
                done = "response.incomplete" if c.finish_reason == "length" else "response.completed"
                yield self._event(done, response=self.response(c))
            elif isinstance(item, Failed):
                failed = self._response([], None)
                failed.update(status="failed", error={"code": "server_error", "message": str(item.error)})
                yield self._event("response.failed", response=failed)


# --- errors: the OpenAI shape (`openai_chat.error_body`) ---

# --- quirks ---
# Codex sends instructions as `developer` items, a `namespace` tool grouping sub-agent functions
# (flattened above) and a hosted `web_search` tool (dropped: the policy cannot search). It never
# sends `previous_response_id` (store:false, full history every call); one that is sent is refused.


# --- the protocol ---


class OpenAIResponses:
    """The Responses protocol for the proxy (`WireProtocol`)."""

    name = "openai_responses"

    def __init__(self) -> None:
        self._log_once = LogOnce()

    def parse(self, body: Any) -> WireRequest:
        req: ResponsesRequest = validate(ResponsesRequest, body)
        ignored_fields(req, self._log_once, self.name, KNOWN_IGNORED)
        if req.previous_response_id:
            raise InvalidArgument("previous_response_id is not supported: send the full history in `input`")
        conv = to_conversation(req, self._log_once)
        options = GenerationOptions(
            max_tokens=req.max_output_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            stream=bool(req.stream),
            parse_tool_calls=bool(conv.tools) and req.tool_choice != "none",
        )
        return WireRequest(conv, options, req.model, req)

    def reply(self, request: WireRequest, prompt_tokens: int, reused_tokens: int) -> ResponsesReply:
        return ResponsesReply(request.wire, prompt_tokens, reused_tokens)

    def error_body(self, error: ClawgymError) -> dict[str, Any]:
        return error_body(error)

    def stream_error(self, error: Exception) -> bytes:
        failed = {
            "type": "error",
            "code": "server_error",
            "message": str(error),
            "param": None,
            "sequence_number": 0,
        }
        return sse(failed, "error")
