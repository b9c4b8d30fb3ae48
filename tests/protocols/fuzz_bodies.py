"""Fuzzed request bodies for the proxy's model endpoints (hypothesis strategies), and the scripted
proxy they are sent to; shared by tests/protocols/test_fuzz_endpoints.py,
tests/protocols/test_malformed_text.py and bench/fuzz.py.

Bodies are valid requests with one field replaced by an arbitrary JSON value, wholly arbitrary
JSON, or bytes that are not JSON; the text in them is hostile (lone UTF-16 surrogates, control-
token strings, the renderer's escape characters, NULs, long names). Valid requests also carry
JSON nested up to 5,000 levels where it is rendered (tool schemas, tool-call inputs and argument
strings) and prompts far longer than the scripted engine's 4k context (up to `max_prompt_chars`).
"""

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from clawgym.inference.scripted import ScriptedEngine
from clawgym.policies import load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.records import RegisteredRollout, RolloutSpec
from clawgym.store.sql import SqlStore

TOOL_CALL_REPLY = 'ok <tool_call>\n{"name": "t", "arguments": {}}\n</tool_call>'


@dataclass
class ScriptedProxy:
    app: Any  # the real proxy app (real tokenizer) over a scripted engine
    store: SqlStore  # a SQLite store holding one registered rollout
    rollout: RegisteredRollout


def scripted_proxy(store_path: str, replies: list[str]) -> ScriptedProxy:
    """The proxy app answering `replies` in turn, with one rollout (its key: `rollout.token`)."""
    tok = load_tokenizer("tiny-qwen3")
    store = SqlStore(f"sqlite:///{store_path}")
    run = store.create_run("fuzz")
    reg = store.register_rollouts(run.id, [RolloutSpec(group_id="g", task_id="t", harness="fuzz")])[0]
    engine = ScriptedEngine.from_texts(tok, replies, max_context=4096)
    return ScriptedProxy(create_app(ProxyConfig(), engine, store, tok), store, reg)


HOSTILE = ["\ud800", "\udfff", "\ud83d\ude00", "<|im_start|>system\n", "<|im_end|>", "<think>", "<tool_call>",
           "\ue000", "\ue0001\ue001", "\x00", "n" * 5000]  # fmt: skip
text = st.lists(st.sampled_from(HOSTILE) | st.text(max_size=6), max_size=4).map("".join)
leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
    | st.sampled_from(
        ["user", "assistant", "system", "tool", "text", "tool_use", "function", "message", "image"]
    )
)
json_value = st.recursive(
    leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=16,
)

BASES = {
    "/v1/messages": {
        "model": "m",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
    },
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/chat/completions": {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
    },
    "/v1/responses": {
        "model": "m",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "tools": [{"type": "function", "name": "t", "parameters": {"type": "object"}}],
    },
}
# fields to replace, including ones nested in the first message / item
FIELDS = {
    "/v1/messages": ["messages", "max_tokens", "system", "tools", "stop_sequences", "temperature", "tool_choice",
                     "stream", "top_p", "top_k", "metadata", "thinking", "messages.0.content", "messages.0.role"],
    "/v1/messages/count_tokens": ["messages", "system", "tools", "messages.0.content"],
    "/v1/chat/completions": ["messages", "max_tokens", "max_completion_tokens", "stop", "tools", "tool_choice",
                             "stream", "stream_options", "n", "seed", "temperature", "messages.0.content",
                             "messages.0.role"],
    "/v1/responses": ["input", "instructions", "tools", "max_output_tokens", "stream", "tool_choice",
                      "previous_response_id", "input.0.content", "input.0.type", "input.0.role"],
}  # fmt: skip


def replace(body: dict, path: str, value):
    body = json.loads(json.dumps(body))
    parts = path.split(".")
    target = body
    for p in parts[:-1]:
        target = target[int(p)] if isinstance(target, list) else target[p]
    target[parts[-1]] = value
    return body


# --- deep nesting: where a request's JSON is rendered (and was recursed over) ---

DEEP = "__DEEP__"  # marks the spot in a body
_USER = {"role": "user", "content": "hi"}
_TOOL_RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}]}
_CHAT_CALL = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": DEEP}}
# name → (endpoint, body with DEEP at the spot, whether the spot is JSON text in a string)
NESTING_SITES: dict[str, tuple[str, dict, bool]] = {
    "messages-tool-schema": (
        "/v1/messages",
        {"model": "m", "max_tokens": 8, "messages": [_USER], "tools": [{"name": "t", "input_schema": DEEP}]},
        False,
    ),
    "messages-tool-use-input": (
        "/v1/messages",
        {"model": "m", "max_tokens": 8, "messages": [
            _USER,
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "t", "input": DEEP}]},
            _TOOL_RESULT,
        ]},
        False,
    ),
    "count-tokens-tool-schema": (
        "/v1/messages/count_tokens",
        {"model": "m", "messages": [_USER], "tools": [{"name": "t", "input_schema": DEEP}]},
        False,
    ),
    "chat-tool-schema": (
        "/v1/chat/completions",
        {"model": "m", "messages": [_USER],
         "tools": [{"type": "function", "function": {"name": "t", "parameters": DEEP}}]},
        False,
    ),
    "chat-tool-call-arguments": (
        "/v1/chat/completions",
        {"model": "m", "messages": [
            _USER,
            {"role": "assistant", "content": None, "tool_calls": [_CHAT_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]},
        True,
    ),
    "responses-tool-schema": (
        "/v1/responses",
        {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "t", "parameters": DEEP}]},
        False,
    ),
    "responses-function-call-arguments": (
        "/v1/responses",
        {"model": "m", "input": [
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "t", "arguments": DEEP},
            {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        ]},
        True,
    ),
}  # fmt: skip


def nested(levels: int, opener: str = "{") -> str:
    """JSON text nested `levels` deep: {"k": {"k": … 1 …}} or [[… 1 …]] (built as text: json.dumps
    itself recurses and cannot write it)."""
    if opener == "[":
        return "[" * levels + "1" + "]" * levels
    return '{"k":' * levels + "1" + "}" * levels


def with_deep(body: dict, levels: int, as_string: bool = False, opener: str = "{") -> bytes:
    """`body` with its DEEP spot holding `levels` of nesting (as JSON text in a string if `as_string`)."""
    deep = json.dumps(nested(levels, opener)) if as_string else nested(levels, opener)
    return json.dumps(body).replace(json.dumps(DEEP), deep).encode()


# --- oversized prompts: far more text than the context holds ---

PROMPT_FIELDS = {
    endpoint: f"{'input' if endpoint == '/v1/responses' else 'messages'}.0.content" for endpoint in BASES
}


def oversized_body(endpoint: str, chars: int, seed: int) -> bytes:
    """A valid request whose prompt is `chars` characters of text (distinct per seed, so no cache
    serves it)."""
    text = (f"{seed} " + "lorem ipsum dolor sit amet " * (chars // 27 + 1))[:chars]
    return json.dumps(replace(BASES[endpoint], PROMPT_FIELDS[endpoint], text)).encode()


@dataclass(frozen=True)
class FuzzBody:
    data: bytes
    depth: int = 0  # levels of the nesting placed in it (0: none placed)
    oversized: bool = False  # a prompt far longer than the context


def tagged_bodies(endpoint: str, max_prompt_chars: int = 1_000_000):
    """Fuzzed bodies of `endpoint`, each with what it tries (bench/fuzz.py counts them): hostile
    JSON and text, deep nesting, oversized prompts of up to `max_prompt_chars`."""
    sites = [name for name, (e, _, _) in NESTING_SITES.items() if e == endpoint]
    deep = st.builds(
        lambda site, levels, opener: FuzzBody(
            with_deep(NESTING_SITES[site][1], levels, NESTING_SITES[site][2], opener), depth=levels
        ),
        st.sampled_from(sites),
        st.integers(1, 5000) | st.sampled_from([100, 101, 500, 950]),
        st.sampled_from(["{", "["]),
    )
    oversized = st.builds(
        lambda chars, seed: FuzzBody(oversized_body(endpoint, chars, seed), oversized=True),
        st.integers(20_000, max_prompt_chars),
        st.integers(0, 2**32),
    )
    return _hostile(endpoint).map(FuzzBody) | deep | oversized


def bodies(endpoint: str, max_prompt_chars: int = 1_000_000):
    """Every kind of fuzzed body of `endpoint` (`tagged_bodies` without the tags)."""
    return tagged_bodies(endpoint, max_prompt_chars).map(lambda b: b.data)


def _hostile(endpoint: str):
    mutated = st.builds(
        lambda f, v: json.dumps(replace(BASES[endpoint], f, v)).encode(),
        st.sampled_from(FIELDS[endpoint]),
        json_value,
    )
    hostile_text = st.builds(  # a string field of a valid request holding hostile text
        lambda f, v: json.dumps(replace(BASES[endpoint], f, v)).encode(),
        st.sampled_from([f for f in FIELDS[endpoint] if f.endswith(("content", "system", "instructions"))]),
        text,
    )
    arbitrary = st.builds(lambda v: json.dumps(v).encode(), json_value)
    return mutated | hostile_text | arbitrary | st.binary(max_size=40)
