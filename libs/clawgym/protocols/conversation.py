"""The canonical conversation every wire protocol converts to, and the completion it converts back.

Owns the protocol-neutral vocabulary: `Conversation` (messages + tools), `GenerationOptions`
(what the harness asked of the sampler), `OutputEvent`s (what the proxy streams while the engine
decodes) and `Completion` (the parsed assistant turn). It knows nothing about any wire format,
chat template or tokenizer: protocols build these, `clawgym.rendering` renders them.
"""

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """One function call of an assistant turn. `arguments` is the JSON text as generated or echoed."""

    name: str
    arguments: str
    id: str = ""
    namespace: str = ""  # the Responses `namespace` tool this function came from, echoed back to Codex

    def arguments_value(self) -> Any:
        """The arguments as a JSON value when they parse, else the raw text."""
        try:
            return json.loads(self.arguments)
        except (ValueError, RecursionError):
            return self.arguments

    def canonical_arguments(self) -> str:
        """Key-sorted compact JSON of the arguments (raw stripped text if they do not parse).

        Harnesses re-serialise arguments (Anthropic `input` objects, OpenAI strings), so turns are
        compared on this form, never on the bytes or the call id (OpenClaw rewrites ids).
        """
        if len(self.arguments) <= MEMO_MAX_CHARS:
            return _canonical_memo(self.arguments)
        return _canonical(self.arguments)


MEMO_MAX_CHARS = 8192  # arguments memoised only up to this size: the memo holds at most ~32 MB


@functools.lru_cache(maxsize=2048)
def _canonical_memo(arguments: str) -> str:
    # every later call of a rollout repeats its earlier tool calls, and each request's chain keys
    # fingerprint them all: a JSON parse + dump each per call without this memo
    return _canonical(arguments)


def _canonical(arguments: str) -> str:
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments.strip()
    if isinstance(value, str) and value == arguments:
        return arguments.strip()
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Message:
    """One canonical message. Tool results are `role="tool"` messages with the result as text."""

    role: Role
    content: str = ""
    thinking: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""

    def fingerprint(self) -> str:
        """What must be equal for two messages to be 'the same turn' when splicing generated ids.

        Assistant turns compare on stripped text and tool calls by name and arguments; thinking
        is left out (harnesses strip or keep it at will) and so are ids. Other messages compare
        on role and exact content.
        """
        if self.role == "assistant":  # length-prefixed parts: unambiguous without escaping
            parts = [self.content.strip(), *(f"{c.name}\0{c.canonical_arguments()}" for c in self.tool_calls)]
            return "assistant:" + "".join(f"{len(p)}:{p}" for p in parts)
        return f"{self.role}:{self.content}"  # the role is a fixed word: the rest is all content


@dataclass(frozen=True)
class Tool:
    """A function the model may call. `parameters` is its JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    namespace: str = ""  # set when flattened out of a Responses `namespace` tool


@dataclass(frozen=True)
class Conversation:
    """What the model is asked to continue: messages in order, the tools it may call."""

    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()

    def tool_namespaces(self) -> dict[str, str]:
        """Function name → namespace, for tools that came out of a namespace tool."""
        return {t.name: t.namespace for t in self.tools if t.namespace}


@dataclass(frozen=True)
class GenerationOptions:
    """What the harness asked of the sampler; None = the deployment's default."""

    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stream: bool = False
    parse_tool_calls: bool = True  # False for tool_choice "none" or a request without tools
    include_usage: bool = False  # Chat Completions `stream_options.include_usage`


# --- what the proxy streams while the engine decodes ---


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ThinkingDelta:
    text: str


@dataclass(frozen=True)
class ToolCallDone:
    """A tool call whose closing tag was generated; `index` counts tool calls in this turn."""

    call: ToolCall
    index: int


OutputEvent = TextDelta | ThinkingDelta | ToolCallDone

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    output_tokens: int
    reused_prompt_tokens: int = 0  # prompt tokens spliced from earlier calls (reported as cached)


@dataclass(frozen=True)
class Completion:
    """One parsed assistant turn, as the harness receives it."""

    text: str
    thinking: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    stop_sequence: str | None = None  # the stop string that ended the turn, if one did

    def as_message(self) -> Message:
        return Message(
            role="assistant", content=self.text, thinking=self.thinking, tool_calls=self.tool_calls
        )


# --- how a call's event stream ends ---


@dataclass(frozen=True)
class Finished:
    """The turn is complete and recorded; the protocol may send its final events."""

    completion: Completion


@dataclass(frozen=True)
class Failed:
    """Generation failed after the response had started (the engine went away mid-stream)."""

    error: Exception


StreamItem = TextDelta | ThinkingDelta | ToolCallDone | Finished | Failed
