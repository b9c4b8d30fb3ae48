"""Teachers: who answers a harness's calls instead of the policy, to record demonstrations.

Owns the `Teacher` protocol (a conversation in, an assistant `Message` out), the upstream teacher
(an OpenAI Chat Completions or Anthropic Messages server: another clawgym proxy, vLLM, a hosted
API; `proxy.teacher`), and `TeacherEngine`, which stands in for the policy's engine for one call:
it asks the teacher, re-tokenizes the answer in the policy's chat template
(`clawgym.rendering.retokenize`) and hands those ids to the ordinary call path, which parses,
streams, records and keeps them for splicing as it does a generation. So a teacher's call is
recorded like any other, in the policy's tokens, with NaN logprobs (no policy sampled them) and
`_clawgym.teacher` set (`records.is_teacher`): RL never trains it (`trainer.batch.on_policy`), SFT
does. The oracle teacher (a task's reference solution) is `clawgym.proxy.oracle`.

An upstream that fails answers the harness in its own protocol's error shape (unreachable, 5xx or
429: 503; any other refusal: 502), and nothing is recorded for the call. The API key is sent in a
header only; it never enters a log line, an error message or a record.
"""

import json
import logging
import math
from collections.abc import AsyncIterator
from typing import Any, Protocol

import httpx

from clawgym.errors import ClawgymError, Unavailable
from clawgym.inference.interface import EngineStatus, PromptIds, SamplingParams, TokenChunk
from clawgym.protocols.conversation import Conversation, FinishReason, GenerationOptions, Message, ToolCall
from clawgym.protocols.wire import clip
from clawgym.proxy.config import TeacherConfig
from clawgym.proxy.pools import WorkerPools
from clawgym.records import Rollout
from clawgym.rendering.retokenize import turn_ids
from clawgym.rendering.template import ChatTemplate, tool_schema

log = logging.getLogger(__name__)

ANTHROPIC_VERSION = "2023-06-01"
MAX_ERROR_CHARS = 300  # of an upstream's error body, quoted to the harness


class TeacherFailed(ClawgymError):
    """The upstream teacher answered with an error that a retry will not change (HTTP 502)."""

    grpc_code = "UNAVAILABLE"
    http_status = 502


class Teacher(Protocol):
    name: str  # recorded as `_clawgym.teacher`: the model's name, or "oracle"

    async def answer(
        self, conv: Conversation, options: GenerationOptions, rollout: Rollout
    ) -> tuple[Message, FinishReason]:
        """The assistant turn that answers `conv`, and why it ended."""
        ...

    async def aclose(self) -> None: ...


# --- the upstream teacher ---


def chat_body(conv: Conversation, options: GenerationOptions, model: str, max_tokens: int) -> dict[str, Any]:
    """`conv` as a Chat Completions request (not streamed)."""
    messages: list[dict[str, Any]] = []
    for i, m in enumerate(conv.messages):
        if m.role == "assistant":
            d: dict[str, Any] = {"role": "assistant", "content": m.content or None}
            if m.tool_calls:
                d["tool_calls"] = [
                    {"id": c.id or f"call_{i}_{k}", "type": "function",
                     "function": {"name": c.name, "arguments": c.arguments}}
                    for k, c in enumerate(m.tool_calls)
                ]  # fmt: skip
            messages.append(d)
        elif m.role == "tool":
            messages.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        else:
            messages.append({"role": m.role, "content": m.content})
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": options.max_tokens or max_tokens,
    }
    if conv.tools:
        body["tools"] = [tool_schema(t) for t in conv.tools]
    return body | _sampling(options)


def anthropic_body(
    conv: Conversation, options: GenerationOptions, model: str, max_tokens: int
) -> dict[str, Any]:
    """`conv` as an Anthropic Messages request: system messages joined into `system`, tool results as
    `tool_result` blocks of a user turn, consecutive turns of one role merged (the API alternates)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(conv.messages):
        if m.role == "system":
            system.append(m.content)
            continue
        if m.role == "assistant":
            role, blocks = "assistant", [{"type": "text", "text": m.content}] if m.content else []
            blocks += [
                {"type": "tool_use", "id": c.id or f"toolu_{i}_{k}", "name": c.name, "input": _input(c)}
                for k, c in enumerate(m.tool_calls)
            ]
        elif m.role == "tool":
            role, blocks = (
                "user",
                [{"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}],
            )
        else:
            role, blocks = "user", [{"type": "text", "text": m.content}]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    body: dict[str, Any] = {"model": model, "max_tokens": options.max_tokens or max_tokens, "messages": turns}
    if system:
        body["system"] = "\n\n".join(system)
    if conv.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters or {"type": "object"}}
            for t in conv.tools
        ]
    return body | _sampling(options)


def _input(call: ToolCall) -> dict[str, Any]:
    value = call.arguments_value()
    return value if isinstance(value, dict) else {"input": value}


def _sampling(options: GenerationOptions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if options.temperature is not None:
        out["temperature"] = options.temperature
    if options.top_p is not None:
        out["top_p"] = options.top_p
    if options.stop:
        out["stop"] = list(options.stop)
    return out


def chat_answer(body: Any) -> tuple[Message, FinishReason]:
    """The assistant turn and finish reason of a Chat Completions response."""
    choice = body["choices"][0]
    message = choice["message"]
    calls = tuple(
        ToolCall(name=c["function"]["name"], arguments=c["function"].get("arguments") or "{}")
        for c in message.get("tool_calls") or ()
    )
    thinking = message.get("reasoning_content") or message.get("reasoning") or ""
    text = message.get("content") or ""
    finish = "length" if choice.get("finish_reason") == "length" else "stop"
    return Message(role="assistant", content=text, thinking=thinking, tool_calls=calls), finish


def anthropic_answer(body: Any) -> tuple[Message, FinishReason]:
    """The assistant turn and finish reason of an Anthropic Messages response."""
    text, thinking, calls = [], [], []
    for block in body["content"]:
        if block["type"] == "text":
            text.append(block["text"])
        elif block["type"] == "thinking":
            thinking.append(block.get("thinking", ""))
        elif block["type"] == "tool_use":
            calls.append(
                ToolCall(name=block["name"], arguments=json.dumps(block["input"], ensure_ascii=False))
            )
    finish = "length" if body.get("stop_reason") == "max_tokens" else "stop"
    message = Message(
        role="assistant", content="".join(text), thinking="".join(thinking), tool_calls=tuple(calls)
    )
    return message, finish


class UpstreamTeacher:
    """An OpenAI- or Anthropic-compatible server answering every call (`proxy.teacher`, kind upstream)."""

    def __init__(self, cfg: TeacherConfig, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.cfg = cfg
        self.name = cfg.model
        key = cfg.api_key.get_secret_value()
        if cfg.api == "anthropic":
            self._path, headers = "/messages", {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
        else:
            self._path, headers = "/chat/completions", {"authorization": f"Bearer {key}"}
        self._key = key
        self._client = httpx.AsyncClient(
            base_url=cfg.url.rstrip("/"), headers=headers, timeout=cfg.timeout_s, transport=transport
        )

    async def answer(
        self, conv: Conversation, options: GenerationOptions, rollout: Rollout
    ) -> tuple[Message, FinishReason]:
        build, read = (
            (anthropic_body, anthropic_answer) if self.cfg.api == "anthropic" else (chat_body, chat_answer)
        )
        body = build(conv, options, self.cfg.model, self.cfg.max_tokens)
        try:
            response = await self._client.post(self._path, json=body)
        except httpx.HTTPError as e:  # connect, read, timeout: the message names the URL, never a header
            raise Unavailable(
                f"teacher {self.cfg.url} unreachable: {type(e).__name__}: {self._hide(e)}"
            ) from None
        if response.status_code != 200:
            detail = self._hide(clip(response.text, MAX_ERROR_CHARS))
            error = f"teacher {self.cfg.url} answered HTTP {response.status_code}: {detail}"
            if response.status_code >= 500 or response.status_code == 429:
                raise Unavailable(error)
            raise TeacherFailed(error)
        try:
            return read(response.json())
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise TeacherFailed(
                f"teacher {self.cfg.url} answered with no {self.cfg.api} response ({type(e).__name__}: "
                f"{self._hide(clip(str(e), MAX_ERROR_CHARS))})"
            ) from None

    def _hide(self, text: object) -> str:
        """`text` with the API key cut out: an upstream may echo what it was sent."""
        out = str(text)
        return out.replace(self._key, "***") if self._key else out

    async def aclose(self) -> None:
        await self._client.aclose()


# --- one call answered by a teacher ---


class TeacherEngine:
    """The `Engine` for one teacher-served call: the teacher's answer as one chunk of policy ids (module
    doc), logprobs NaN (none was sampled), every token marked with the served policy version."""

    def __init__(
        self,
        teacher: Teacher,
        template: ChatTemplate,
        pools: WorkerPools,
        conv: Conversation,
        options: GenerationOptions,
        rollout: Rollout,
        policy_version: int,
    ) -> None:
        self.teacher, self.template, self.pools = teacher, template, pools
        self.conv, self.options, self.rollout = conv, options, rollout
        self.policy_version = policy_version

    def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        return self._answer(params)

    async def _answer(self, params: SamplingParams) -> AsyncIterator[TokenChunk]:
        turn, finish = await self.teacher.answer(self.conv, self.options, self.rollout)
        ids = await self.pools.render(turn_ids, self.template, self.conv, turn, owner=self.rollout.id)
        if len(ids) > params.max_new_tokens:  # as an engine would: cut at the budget
            ids, finish = ids[: params.max_new_tokens], "length"
        n = len(ids)
        yield TokenChunk(ids, [math.nan] * n, [self.policy_version] * n, finish)

    async def status(self) -> EngineStatus:  # the gateway asks the policy's engine, never this one
        raise NotImplementedError

    async def load_weights(self, version: int, uri: str) -> float:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


def make_teacher(cfg: TeacherConfig) -> Teacher | None:
    """The teacher `proxy.teacher` names, or None (the policy answers)."""
    if cfg.kind == "upstream":
        return UpstreamTeacher(cfg)
    if cfg.kind == "oracle":
        from clawgym.proxy.oracle import OracleTeacher

        return OracleTeacher(cfg.suites)
    return None
