"""Malformed text and hostile field names through the real proxy app (issue #16, item 8).

Reproduces: a lone UTF-16 surrogate (`"\\ud800"` as a JSON escape) anywhere in a request was a
500 (UnicodeEncodeError in the tokenizer or the store; `count_tokens` had no error mapping at
all); now every endpoint answers 400 in its protocol's shape and records nothing. And unknown
field names were logged whole and remembered without bound (100 × 1 MB names: +150 MB, a
110 MB log); now names are clipped, counted past a few, and what is remembered is bounded.
The app is the real one (scripted engine, real tokenizer, real SQLite store), called in process.
"""

import gc
import json
import logging
import tracemalloc

import pytest
from fastapi.testclient import TestClient

from clawgym.protocols.anthropic_messages import AnthropicMessages
from tests.protocols.fuzz_bodies import scripted_proxy

LONE = "\\ud800"  # as JSON text: the escape of a lone high surrogate
LONE_LOW = "\\udfff"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    proxy = scripted_proxy(str(tmp_path_factory.mktemp("text") / "store.db"), ["ok"])
    store, reg = proxy.store, proxy.rollout
    with TestClient(proxy.app, raise_server_exceptions=False) as c:
        c.headers.update({"x-api-key": reg.token, "content-type": "application/json"})
        yield c, store, reg.rollout_id
    store.close()


# (endpoint, raw JSON body): the surrogate in message text, system prompt, tool name, tool
# result, tool arguments, a field name — on every endpoint
SURROGATE_CASES = [
    ("/v1/messages", f'{{"max_tokens": 5, "messages": [{{"role": "user", "content": "a{LONE}b"}}]}}'),
    ("/v1/messages", f'{{"max_tokens": 5, "system": "{LONE_LOW}", "messages": [{{"role": "user", "content": "a"}}]}}'),
    ("/v1/messages", f'{{"max_tokens": 5, "messages": [{{"role": "user", "content": "a"}}], '
                     f'"tools": [{{"name": "t{LONE}", "input_schema": {{}}}}]}}'),
    ("/v1/messages", f'{{"max_tokens": 5, "messages": [{{"role": "user", "content": "a"}}, '
                     f'{{"role": "assistant", "content": [{{"type": "tool_use", "id": "x", "name": "t", "input": {{"p": "{LONE}"}}}}]}}, '
                     f'{{"role": "user", "content": [{{"type": "tool_result", "tool_use_id": "x", "content": "{LONE}"}}]}}]}}'),
    ("/v1/messages", f'{{"max_tokens": 5, "messages": [{{"role": "user", "content": "a"}}], "x{LONE}": 1}}'),
    ("/v1/messages/count_tokens", f'{{"messages": [{{"role": "user", "content": "a{LONE}b"}}]}}'),
    ("/v1/messages/count_tokens", f'{{"system": "{LONE}", "messages": [{{"role": "user", "content": "a"}}]}}'),
    ("/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": "a{LONE}b"}}]}}'),
    ("/v1/chat/completions", f'{{"messages": [{{"role": "system", "content": "{LONE}"}}, {{"role": "user", "content": "a"}}]}}'),
    ("/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": "a"}}], '
                             f'"tools": [{{"type": "function", "function": {{"name": "{LONE}", "parameters": {{}}}}}}]}}'),
    ("/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": "a"}}, {{"role": "assistant", "tool_calls": '
                             f'[{{"id": "c", "type": "function", "function": {{"name": "t", "arguments": "{{\\"p\\": \\"{LONE}\\"}}"}}}}]}}, '
                             f'{{"role": "tool", "tool_call_id": "c", "content": "{LONE}"}}]}}'),
    ("/v1/responses", f'{{"input": "a{LONE}b"}}'),
    ("/v1/responses", f'{{"instructions": "{LONE}", "input": "a"}}'),
    ("/v1/responses", f'{{"input": [{{"type": "message", "role": "user", "content": "a"}}, '
                      f'{{"type": "function_call_output", "call_id": "c", "output": "{LONE}"}}]}}'),
    ("/v1/responses", f'{{"input": "a", "tools": [{{"type": "function", "name": "{LONE}", "parameters": {{}}}}]}}'),
]  # fmt: skip
BAD_BYTES = [
    b'{"input": "\xed\xa0\x80"}',  # a surrogate as UTF-8 bytes (json.loads would let it through)
    b'{"input": "\xff\xfe"}',  # not UTF-8 at all
    b'{"input": "a\xc3"}',  # truncated UTF-8
]


def assert_protocol_error(endpoint: str, r) -> None:
    assert r.status_code == 400, f"{endpoint}: {r.status_code} {r.text[:300]}"
    body = r.json()
    if endpoint.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    else:
        assert body["error"]["type"] == "invalid_request_error" and "message" in body["error"], body


@pytest.mark.parametrize(("endpoint", "body"), SURROGATE_CASES)
def test_a_lone_surrogate_is_a_400_in_the_protocols_shape_and_records_nothing(client, endpoint, body):
    c, store, rollout_id = client
    json.loads(body)  # the body itself is valid JSON: only its text is not Unicode
    before = len(store.list_calls(rollout_id))
    r = c.post(endpoint, content=body.encode())
    assert_protocol_error(endpoint, r)
    assert "surrogate" in r.json()["error"]["message"]
    assert len(store.list_calls(rollout_id)) == before


@pytest.mark.parametrize("body", BAD_BYTES, ids=["utf8-surrogate", "not-utf8", "truncated-utf8"])
@pytest.mark.parametrize(
    "endpoint", ["/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions", "/v1/responses"]
)
def test_bytes_that_are_not_utf8_are_a_400_on_every_endpoint(client, endpoint, body):
    c, store, rollout_id = client
    before = len(store.list_calls(rollout_id))
    assert_protocol_error(endpoint, c.post(endpoint, content=body))
    assert len(store.list_calls(rollout_id)) == before


def test_paired_surrogates_are_valid_text_and_served(client):
    """The check refuses lone surrogates only: an emoji escaped as a pair (ensure_ascii clients) is fine."""
    c, store, rollout_id = client
    before = len(store.list_calls(rollout_id))
    body = '{"messages": [{"role": "user", "content": "smile \\ud83d\\ude00"}]}'
    r = c.post("/v1/chat/completions", content=body.encode())
    assert r.status_code == 200, r.text
    assert store.list_calls(rollout_id)[-1].request["messages"][0]["content"] == "smile 😀"
    assert len(store.list_calls(rollout_id)) == before + 1


def huge_names_body(n: int, size: int, salt: str) -> bytes:
    body = {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    body.update({f"{salt}{i:04d}" + "n" * size: 1 for i in range(n)})
    return json.dumps(body).encode()


def test_many_huge_unknown_field_names_are_logged_bounded(client, caplog):
    """100 unknown fields with 100 KB names (10 MB of names) in one request, twice with new
    names: answered, and the log holds a few clipped names and a count, not the names."""
    c, _, _ = client
    with caplog.at_level(logging.INFO, logger="clawgym.protocols"):
        for salt in ("a", "b"):
            r = c.post("/v1/messages", content=huge_names_body(100, 100_000, salt))
            assert r.status_code == 200, r.text[:300]
    logged = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "more unknown fields in one request are ignored" in logged, logged[:500]
    assert len(logged) < 8_000, f"{len(logged)} characters logged for ignored field names"


def test_what_is_remembered_of_ignored_fields_is_bounded():
    """The protocol remembers which names it logged (to log each once): 20 requests × 50 fresh
    100 KB names (100 MB of names) leave well under 1 MB behind."""
    protocol = AnthropicMessages()
    bodies = [json.loads(huge_names_body(50, 100_000, f"r{i}-")) for i in range(20)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for body in bodies:
            protocol.parse(body)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000, f"{kept} bytes kept after parsing requests with huge unknown field names"
