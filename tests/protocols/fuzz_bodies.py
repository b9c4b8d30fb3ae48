"""Fuzzed request bodies for the proxy's model endpoints (hypothesis strategies), and the scripted
proxy they are sent to; shared by tests/protocols/test_fuzz_endpoints.py,
tests/protocols/test_malformed_text.py and bench/fuzz.py.

Bodies are valid requests with one field replaced by an arbitrary JSON value, wholly arbitrary
JSON, or bytes that are not JSON; the text in them is hostile (lone UTF-16 surrogates, control-
token strings, the renderer's escape characters, NULs, long names).
"""

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from clawgym.inference.scripted import ScriptedEngine
from clawgym.policies import load_tokenizer
from clawgym.proxy.config import ProxyConfig
from clawgym.records import RegisteredRollout, RolloutSpec
from clawgym.store.sql import SqlStore
from clawgym_services.proxy.server import create_app

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


def bodies(endpoint: str):
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
