"""The proxy's configuration section (`ClawgymConfig.proxy`, env `CLAWGYM_PROXY__…`).

Owns the proxy's fields and defaults; the engine it talks to is configured by the `inference`
section (`clawgym.inference.config`), the store by `store`.
"""

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from clawgym.rendering.tool_formats import FORMATS
from clawgym.section import Section

DEFAULT_RECORDED_HEADERS = (
    "user-agent",
    "anthropic-version",
    "anthropic-beta",
    "x-claude-code-session-id",
    "x-claude-code-agent-id",
    "session-id",
    "session_id",
    "thread-id",
    "x-codex-parent-thread-id",
    "x-session-id",
    "x-parent-session-id",
    "traceparent",
    "originator",
    "x-stainless-lang",
)


class TeacherConfig(Section):
    """Who answers the harness's calls instead of the policy (`proxy/teacher.py`): the answers are
    recorded in the policy's tokens, marked as a teacher's, for supervised steps (`trainer.sft`)."""

    kind: Literal["", "upstream", "oracle"] = Field(
        "",
        description="empty = the policy answers (training, evaluation); upstream = an OpenAI- or "
        "Anthropic-compatible server (`url`, `model`, `api_key`: another clawgym proxy, vLLM, a hosted "
        "API); oracle = each task's reference solution in the harness's own action format",
    )
    url: str = Field("", description="upstream: the server's base URL, with its /v1")
    api: Literal["openai_chat", "anthropic"] = Field(
        "openai_chat",
        description="upstream: the protocol it speaks (POST /chat/completions or /messages)",
    )
    model: str = Field("", description="upstream: the model name sent, and recorded as the teacher")
    api_key: SecretStr = Field(
        SecretStr(""),
        description="upstream: its API key (Authorization: Bearer / x-api-key); never logged nor recorded",
    )
    max_tokens: int = Field(
        4096, gt=0, description="upstream: reply length asked for when the harness asks for none"
    )
    timeout_s: float = Field(300.0, gt=0, description="upstream: seconds one teacher answer may take")
    suites: list[str] = Field(
        default_factory=list,
        description="oracle: the task suites (names or folders) whose solutions it answers with; "
        "empty = trainer.suite and evaluation.suite",
    )

    @model_validator(mode="after")
    def _upstream_named(self) -> "TeacherConfig":
        if self.kind == "upstream" and not (self.url and self.model):
            raise ValueError("proxy.teacher: kind upstream needs url and model")
        return self


class ProxyConfig(Section):
    """What `clawgym serve proxy` serves and how it captures."""

    host: str = Field("127.0.0.1", description="address the proxy listens on")
    port: int = Field(8080, description="port the proxy listens on")
    reuse_port: bool = Field(
        False,
        description="bind with SO_REUSEPORT, so replicas on one host network share the port and the "
        "kernel spreads connections between them (the chart's host-network mode: no kube-proxy)",
    )
    instance: str = Field(
        "",
        description="this replica's name, recorded with every call it serves (`_clawgym.proxy`); "
        "empty = the host name",
    )
    served_model_name: str = Field(
        "",
        description="model name reported by /v1/models and in responses; "
        "empty = any name the harness asks for is echoed back",
    )
    redis_url: str = Field(
        "",
        description="Redis for live state shared by proxy replicas (token cache, "
        "generated turns, call seq numbers); empty = in-process (embedded, one replica)",
    )
    redis_prefix: str = Field("clawgym", description="prefix of every Redis key the proxy writes")
    max_new_tokens: int = Field(
        0,
        ge=0,
        description="deployment-wide cap on generated tokens per call "
        "(bounds training rollouts); 0 = only the context bounds it",
    )
    temperature: float | None = Field(
        None,
        ge=0,
        description="sampling temperature forced on every call; "
        "None = the request's value (1.0 if it sends none)",
    )
    token_cache_ttl_s: float = Field(
        15.0,
        ge=0,
        description="how long a resolved rollout token is cached; "
        "a rollout that ends is refused at most this long after",
    )
    turn_cache_ttl_s: float = Field(
        86400.0,
        gt=0,
        description="how long a rollout's generated turns are kept for splicing after its last call",
    )
    memory_max_rollouts: int = Field(
        4096,
        gt=0,
        description="in-process live state: rollouts whose turns are kept (least recently used are dropped)",
    )
    store_threads: int = Field(
        32, ge=1, description="threads waiting on store calls (recording, token lookups)"
    )
    render_threads: int = Field(4, ge=1, description="threads rendering and tokenizing prompts")
    render_per_rollout: int = Field(
        2,
        ge=0,
        description="render threads one rollout may hold at once; its further calls wait their turn "
        "(a rollout keeping several long prompts in flight cannot queue every other rollout's calls "
        "behind them); 0 = no limit",
    )
    token_run_cache: int = Field(
        64,
        ge=0,
        description="long text runs (a harness's system prompt + tools) kept tokenized, shared by every "
        "rollout; 0 = off (each rollout's first call tokenizes them anew)",
    )
    token_run_cache_mb: int = Field(
        32,
        ge=0,
        description="memory for the runs `token_run_cache` keeps (their text and ids; least recently used "
        "dropped): a ~100 kB system prompt + tools takes ~1 MB; a run larger than this is never kept; "
        "0 = off",
    )
    max_chars_per_token: int = Field(
        0,
        ge=0,
        description="a prompt whose text to tokenize has more characters than the tokens left of the "
        "context times this is refused (400, prompt is too long) before it is tokenized; 0 = the "
        "tokenizer's longest vocabulary entry, which never refuses a prompt that fits (a smaller value "
        "refuses sooner, but also a prompt of long tokens that would fit: runs of spaces, rules)",
    )
    max_json_depth: int = Field(
        100,
        ge=1,
        description="deepest nesting of lists and objects accepted in a request body, and in the tool-call "
        "arguments it carries as JSON text; deeper is a 400 before anything recurses over it "
        "(rendering a few hundred levels overflowed the escaping's recursion: HTTP 500)",
    )
    held_turns_mb: int = Field(
        256,
        ge=0,
        description="memory for the whole prompt + output ids of turns this replica generated, so a "
        "rollout's next call here splices without fetching and joining its history from the live "
        "state (least recently used dropped); 0 = off (every call fetches its history from the live state)",
    )
    retry_after_s: int = Field(
        2, ge=0, description="Retry-After seconds sent with 503 while the engine is down"
    )
    max_body_bytes: int = Field(
        64 * 1024 * 1024,
        gt=0,
        description="largest request body accepted: a larger Content-Length is refused (413) before "
        "the body is read, a chunked body as soon as it grows past it",
    )
    read_timeout_s: float = Field(
        60.0,
        gt=0,
        description="seconds a client has to send a whole request (headers and body) from its first "
        "byte, and a new connection to start one; slower clients are disconnected (slowloris)",
    )
    tool_call_format: str = Field(
        "",
        description="how the policy's generated text carries tool calls: qwen (Hermes/Qwen3 "
        "`<tool_call>{json}`), qwen3-coder (`<function=…><parameter=…>`), llama3, glm, deepseek or harmony "
        "(gpt-oss); empty = the format the policy's chat template teaches (qwen where it shows none)",
    )
    teacher: TeacherConfig = Field(
        default_factory=TeacherConfig,
        description="a teacher that answers every call instead of the policy (demonstrations)",
    )
    recorded_headers: list[str] = Field(
        default_factory=lambda: list(DEFAULT_RECORDED_HEADERS),
        description="request headers recorded with each call (lowercase); credentials are never recorded",
    )

    @field_validator("tool_call_format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value and value not in FORMATS:
            raise ValueError(f"unknown tool-call format {value!r}: expected one of {sorted(FORMATS)}")
        return value
