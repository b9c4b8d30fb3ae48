"""Capture: identity, recording, splicing, budgets, errors and aborts, against the running proxy.

Requests are raw HTTP (httpx) in the exact shapes harnesses send, so a test can say precisely
what the harness changed between calls; the scripted engine says what the policy produced, and
every assertion on tokens reads the calls recorded in the real store.
"""

import asyncio
import time

import httpx
import pytest

from clawgym.rendering.template import ChatTemplate

TOOL = {
    "name": "write_file",
    "description": "Write a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
CHAT_TOOL = {"type": "function", "function": {"name": "write_file", "parameters": TOOL["input_schema"]}}
THINK_AND_CALL = '<think>\nI should write it.\n</think>\n\n<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt"}}\n</tool_call>'


def anthropic_post(p, body, token=None, **headers):
    headers = {"x-api-key": token or p.token, "anthropic-version": "2023-06-01", **headers}
    return httpx.post(f"{p.url}/v1/messages?beta=true", json=body, headers=headers, timeout=30)


def chat_post(p, body, token=None):
    return httpx.post(
        f"{p.url}/v1/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {token or p.token}"},
        timeout=30,
    )


def responses_post(p, body, token=None):
    return httpx.post(
        f"{p.url}/v1/responses",
        json=body,
        headers={"authorization": f"Bearer {token or p.token}"},
        timeout=30,
    )


def extends(calls, i, j) -> bool:
    first = calls[i].prompt_ids.tolist() + calls[i].output_ids.tolist()
    return calls[j].prompt_ids.tolist()[: len(first)] == first


# --- splicing ---


def test_replayed_assistant_turn_reuses_generated_ids_even_when_thinking_is_stripped(proxy_factory):
    """The harness drops the thinking block and re-sends the tool call: the prompt still extends
    the first prompt + the exact generated ids (thinking included), not a re-tokenization."""
    p = proxy_factory([THINK_AND_CALL, "ok"])
    body = {
        "model": "m",
        "max_tokens": 1000,
        "tools": [TOOL],
        "messages": [{"role": "user", "content": "go"}],
    }
    first = anthropic_post(p, body).json()
    kinds = [b["type"] for b in first["content"]]
    assert kinds == ["thinking", "tool_use"], f"thinking and the tool call come back as blocks, got {kinds}"
    use = first["content"][1]
    body["messages"] += [
        {"role": "assistant", "content": [use]},  # thinking stripped, as harnesses may
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "done"}]},
    ]
    assert anthropic_post(p, body).status_code == 200
    calls = p.calls()
    assert extends(calls, 0, 1), "second prompt must start with first prompt + generated ids (with thinking)"


def test_openclaw_rewritten_tool_call_ids_still_splice(proxy_factory):
    """OpenClaw strips underscores from echoed tool-call ids; turns match on content, not ids."""
    p = proxy_factory([THINK_AND_CALL.split("</think>\n\n")[1], "ok"])
    messages = [{"role": "user", "content": "go"}]
    first = chat_post(p, {"model": "m", "messages": messages, "tools": [CHAT_TOOL]}).json()
    call = first["choices"][0]["message"]["tool_calls"][0]
    stripped = call["id"].replace("_", "")
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": stripped}]},
        {"role": "tool", "tool_call_id": stripped, "content": "done"},
        {"role": "user", "content": "[internal context appended by OpenClaw]"},
    ]
    assert chat_post(p, {"model": "m", "messages": messages, "tools": [CHAT_TOOL]}).status_code == 200
    assert extends(p.calls(), 0, 1), "a rewritten call id must not break splicing"


def test_rewritten_history_diverges_instead_of_being_forced(proxy_factory, tokenizer):
    """Compaction rewrites the assistant turn: nothing matches, the prompt is rendered from
    scratch exactly as the chat template says, and the call is not counted as an extension."""
    p = proxy_factory(["first answer", "second answer"])
    messages = [{"role": "user", "content": "hi"}]
    chat_post(p, {"model": "m", "messages": messages})
    messages += [{"role": "assistant", "content": "[compacted summary]"}, {"role": "user", "content": "more"}]
    chat_post(p, {"model": "m", "messages": messages})
    calls = p.calls()
    assert not extends(calls, 0, 1), "a rewritten turn must not splice the old generated ids"
    assert calls[1].response["_clawgym"]["prefix_extended"] is False, "a divergent call is not an extension"
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    expected = tokenizer.encode(text, add_special_tokens=False)
    assert calls[1].prompt_ids.tolist() == expected, "a divergent prompt is the plain template rendering"


def test_each_call_renders_only_its_new_messages(proxy_factory):
    """Three turns: each prompt extends the previous call, and the tokens rendered per call are
    only those after the spliced prefix (cost grows with the new tokens, not the history)."""
    p = proxy_factory(["one", "two", "three"])
    system = "You are a careful agent. " * 200  # a long system prompt, like a harness's
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "start"}]
    for i, answer in enumerate(["one", "two"]):
        chat_post(p, {"model": "m", "messages": messages})
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": f"next {i}"}]
    chat_post(p, {"model": "m", "messages": messages})
    calls = p.calls()
    assert extends(calls, 0, 1) and extends(calls, 1, 2), "every call extends the one before"
    rendered = [c.response["_clawgym"]["rendered_tokens"] for c in calls]
    assert rendered[0] == len(calls[0].prompt_ids), "the first call renders everything"
    assert rendered[2] < 20 < len(calls[2].prompt_ids), f"later calls render only new tokens, got {rendered}"


# --- identity and recording ---


@pytest.mark.parametrize("protocol", ["anthropic", "chat", "responses"])
def test_unknown_token_is_401_in_the_protocol_error_shape_and_records_nothing(proxy_factory, protocol):
    p = proxy_factory()
    if protocol == "anthropic":
        r = anthropic_post(
            p, {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "cg-nope"
        )
        assert r.json()["error"]["type"] == "authentication_error", r.text
        assert r.json()["type"] == "error", "Anthropic errors have type: error"
    else:
        post = chat_post if protocol == "chat" else responses_post
        body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "input": "x"}
        r = post(p, body, "cg-nope")
        assert r.json()["error"]["type"] == "authentication_error", r.text
    assert r.status_code == 401, f"unknown key → 401, got {r.status_code}"
    assert p.calls() == [], "nothing is recorded for a refused request"
    assert p.engine.prompts == [], "the engine never sees a refused request"


def test_ended_rollout_is_refused(proxy_factory):
    """A finished rollout's token is refused (its group may already be trained on)."""
    p = proxy_factory(token_cache_ttl_s=0)
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    assert anthropic_post(p, body).status_code == 200
    p.store.finish_rollout(p.rollout_id, "finished", reward=1.0, passed=True)
    r = anthropic_post(p, body)
    assert r.status_code == 401 and "ended" in r.json()["error"]["message"], r.text
    assert len(p.calls()) == 1, "the refused call is not recorded"


def test_bearer_key_headers_and_policy_data_are_recorded(proxy_factory):
    """ANTHROPIC_AUTH_TOKEN sends Bearer; the call records token ids, logprobs, versions and the
    harness's session headers, never the credentials."""
    p = proxy_factory(["hello there"])
    body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}]}
    r = httpx.post(
        f"{p.url}/v1/messages",
        json=body,
        headers={
            "authorization": f"Bearer {p.token}",
            "x-claude-code-session-id": "s-1",
            "x-claude-code-agent-id": "a-2",
        },
        timeout=30,
    )
    assert r.status_code == 200, r.text
    (call,) = p.calls()
    assert call.headers.get("x-claude-code-session-id") == "s-1", (
        f"session header recorded, got {call.headers}"
    )
    assert call.headers.get("x-claude-code-agent-id") == "a-2", "sub-agent header recorded"
    assert "authorization" not in call.headers and "x-api-key" not in call.headers, (
        "credentials never recorded"
    )
    n = len(call.output_ids)
    assert n > 0 and len(call.output_logprobs) == n and len(call.output_versions) == n, (
        "one logprob/version per token"
    )
    assert (call.output_logprobs < 0).all(), "the engine's logprobs are recorded as given"
    assert call.request == body, "the raw request is recorded"
    assert call.response["content"][0]["text"] == "hello there", "the response sent is recorded"
    assert call.protocol == "anthropic_messages" and call.finish_reason == "stop"


def test_each_call_records_the_temperature_the_engine_sampled_at(proxy_factory):
    """The harness's own temperature, 1.0 where it sends none, and a forced proxy.temperature over
    both: what the engine sampled at is recorded with the call (the trainer's logprobs use it)."""
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    free = proxy_factory(["one", "two", "three"])
    for sent in (0.3, None, 0.0):
        r = anthropic_post(free, body if sent is None else {**body, "temperature": sent})
        assert r.status_code == 200, r.text
    assert [c.temperature for c in free.calls()] == [0.3, 1.0, 0.0], "the harness's, else 1.0"
    assert [p.temperature for p in free.engine.params] == [0.3, 1.0, 0.0], "what the engine was asked"
    forced = proxy_factory(["one"], temperature=0.7)
    anthropic_post(forced, {**body, "temperature": 0.3})
    assert [c.temperature for c in forced.calls()] == [0.7], "a forced temperature wins and is recorded"


def test_concurrent_calls_of_one_rollout_on_two_replicas_get_distinct_seqs(proxy_factory, pg_url, redis_url):
    """Sub-agents call concurrently and replicas share nothing but Redis and the store: seq
    numbers still come out 0..N-1 without a collision."""
    a = proxy_factory(["x"], store_url=pg_url, redis_url=redis_url)
    b = proxy_factory(["x"], store=a.store, redis_url=redis_url)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def fire():
        async with httpx.AsyncClient(timeout=60) as client:
            reqs = [
                client.post(
                    f"{(a, b)[i % 2].url}/v1/chat/completions",
                    json=body,
                    headers={"authorization": f"Bearer {a.token}"},
                )
                for i in range(16)
            ]
            return await asyncio.gather(*reqs)

    responses = asyncio.run(fire())
    assert [r.status_code for r in responses] == [200] * 16, [
        r.text for r in responses if r.status_code != 200
    ]
    seqs = sorted(c.seq for c in a.calls())
    assert seqs == list(range(16)), f"seqs must be unique and dense, got {seqs}"


def test_seq_continues_from_the_store_after_a_proxy_restart(proxy_factory):
    """A fresh replica (empty live state) continues a rollout's seq after the recorded calls."""
    a = proxy_factory(["x"])
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(2):
        chat_post(a, body)
    b = proxy_factory(["x"], store=a.store)
    assert chat_post(b, body, a.token).status_code == 200
    assert [c.seq for c in a.calls()] == [0, 1, 2], "the new replica must not reuse seq 0"


# --- budgets, stops, parsing ---


def test_max_tokens_is_clamped_to_the_context_and_capped_by_the_deployment(proxy_factory):
    p = proxy_factory(["a b c d e f g h i j k l m n o p"], max_new_tokens=4)
    body = {"model": "m", "max_tokens": 128000, "messages": [{"role": "user", "content": "x"}]}
    r = anthropic_post(p, body).json()
    assert r["stop_reason"] == "max_tokens", f"the cap ends the turn as max_tokens, got {r['stop_reason']}"
    assert r["usage"]["output_tokens"] == 4, "the deployment cap bounds generated tokens"
    q = proxy_factory(["short"], max_context=300)
    anthropic_post(q, body)
    sent = q.engine.params[0].max_new_tokens + len(q.engine.prompts[0])
    assert sent == 300, f"128000 is clamped to what fits the context exactly, got prompt+max_new={sent}"


def test_stop_sequence_cuts_the_text_and_the_recorded_output(proxy_factory, tokenizer):
    p = proxy_factory(["alpha beta STOP gamma delta"])
    body = {
        "model": "m",
        "max_tokens": 100,
        "stop_sequences": ["STOP"],
        "messages": [{"role": "user", "content": "x"}],
    }
    r = anthropic_post(p, body).json()
    assert r["stop_reason"] == "stop_sequence" and r["stop_sequence"] == "STOP", r
    assert r["content"][0]["text"] == "alpha beta", f"text ends before the stop string, got {r['content']}"
    out = tokenizer.decode(p.calls()[0].output_ids.tolist())
    assert out.endswith("STOP"), f"recorded output stops at the stop string: {out!r}"


def test_several_tool_calls_in_one_turn_and_malformed_json_as_text(proxy_factory):
    two = (
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "a"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "b"}}\n</tool_call>'
    )
    bad = 'Let me try. <tool_call>\n{"name": "write_file", "arguments": {path: oops}\n</tool_call>'
    p = proxy_factory([two, bad])
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [CHAT_TOOL]}
    msg = chat_post(p, body).json()["choices"][0]
    assert [c["function"]["arguments"] for c in msg["message"]["tool_calls"]] == [
        '{"path": "a"}',
        '{"path": "b"}',
    ]
    assert msg["finish_reason"] == "tool_calls"
    r = chat_post(p, body)
    assert r.status_code == 200, "malformed tool JSON is never a server error"
    msg = r.json()["choices"][0]
    assert "tool_calls" not in msg["message"] and msg["finish_reason"] == "stop", msg
    assert "{path: oops}" in msg["message"]["content"], "the malformed call comes back as text"


def test_thinking_streams_as_reasoning_content_in_chat(proxy_factory):
    p = proxy_factory(["<think>\nPlan.\n</think>\n\nAnswer."])
    r = chat_post(p, {"model": "m", "messages": [{"role": "user", "content": "x"}]}).json()
    message = r["choices"][0]["message"]
    assert message["reasoning_content"] == "Plan." and message["content"] == "Answer.", message


# --- errors ---


@pytest.mark.parametrize("protocol", ["anthropic", "chat", "responses"])
def test_engine_down_is_503_with_retry_after(proxy_factory, protocol):
    p = proxy_factory(retry_after_s=3)
    p.engine.available = False
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "input": "x"}
    post = {"anthropic": anthropic_post, "chat": chat_post, "responses": responses_post}[protocol]
    r = post(p, body)
    assert r.status_code == 503 and r.headers.get("retry-after") == "3", f"{r.status_code} {r.headers}"
    assert "error" in r.json(), "the error is in the protocol's shape"
    assert p.calls() == [], "nothing is recorded while the engine is down"
    p.engine.available = True
    assert post(p, body).status_code == 200, "the proxy recovers when the engine does"


def test_prompt_beyond_the_context_is_400(proxy_factory):
    p = proxy_factory(max_context=64)
    r = chat_post(p, {"model": "m", "messages": [{"role": "user", "content": "word " * 200}]})
    assert r.status_code == 400 and "context" in r.json()["error"]["message"], r.text
    assert p.calls() == [], "nothing is recorded"


def test_images_are_a_clear_400(proxy_factory):
    p = proxy_factory()
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}
    r = anthropic_post(p, {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [image]}]})
    assert r.status_code == 400 and "image" in r.json()["error"]["message"], r.text


def test_client_disconnect_aborts_generation_and_records_the_call_as_aborted(proxy_factory, tokenizer):
    long_text = " ".join(f"word{i}" for i in range(400))
    p = proxy_factory([long_text])
    p.engine.token_delay_s = 0.01
    body = {"model": "m", "max_tokens": 2000, "stream": True, "messages": [{"role": "user", "content": "x"}]}
    with httpx.stream(
        "POST", f"{p.url}/v1/messages", json=body, headers={"x-api-key": p.token}, timeout=30
    ) as r:
        seen = 0
        for line in r.iter_lines():
            seen += line.startswith("event: content_block_delta")
            if seen >= 5:
                break
    deadline = time.monotonic() + 20
    while not p.calls() and time.monotonic() < deadline:
        time.sleep(0.05)
    (call,) = p.calls()
    assert call.finish_reason == "abort", (
        f"a call cut by the client is recorded as aborted, got {call.finish_reason}"
    )
    full = len(tokenizer.encode(long_text, add_special_tokens=False))
    assert 5 <= len(call.output_ids) < full, (
        f"generation stopped early: {len(call.output_ids)} of {full} tokens"
    )
    assert p.engine.aborted == 1, "the engine stream was closed (aborting the request there)"


# --- the other endpoints ---


def test_health_probes_and_metrics(proxy_factory):
    p = proxy_factory(["answer"], harness="claude-code")
    assert httpx.head(f"{p.url}/api/hello").status_code == 200, "Claude Code's probe is answered"
    assert httpx.get(f"{p.url}/healthz").json()["status"] == "ok"
    messages = [{"role": "user", "content": "hi"}]
    chat_post(p, {"model": "m", "messages": messages})
    messages += [{"role": "assistant", "content": "answer"}, {"role": "user", "content": "again"}]
    chat_post(p, {"model": "m", "messages": messages})
    text = httpx.get(f"{p.url}/metrics").text
    labels = 'harness="claude-code",protocol="openai_chat"'
    assert f"clawgym_proxy_prefix_extended_calls_total{{{labels}}} 1.0" in text, "one of two calls extended"
    assert f'clawgym_proxy_calls_total{{finish_reason="stop",{labels}}} 2.0' in text, "both calls counted"
    assert f"clawgym_proxy_sampling_temperature_sum{{{labels}}} 2.0" in text, "two calls at the default 1.0"
    for name in (
        "ttft_seconds",
        "overhead_seconds",
        "latency_seconds",
        "prompt_tokens_total",
        "output_tokens_total",
    ):
        assert f"clawgym_proxy_{name}" in text, f"metric {name} is exported"
    p.engine.available = False
    assert httpx.get(f"{p.url}/healthz").status_code == 503, "health reports a down engine"


def test_template_without_tools_describes_them_in_the_system_prompt(tokenizer):
    """A plain ChatML template (SmolLM2-style) gets the tools in the system prompt, tool calls as
    text and tool results as <tool_response> user turns."""
    import copy

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    from clawgym.protocols.conversation import Message, Tool, ToolCall

    t = ChatTemplate(tok)
    assert not t.info.renders_tools and not t.info.renders_tool_calls, t.info
    text = t.render(
        [
            Message("system", "Be brief."),
            Message("user", "go"),
            Message("assistant", "", tool_calls=(ToolCall("write_file", '{"path": "a"}'),)),
            Message("tool", "ok"),
        ],
        [Tool("write_file", "Write.", {"type": "object"})],
    )
    assert "Be brief.\n\n# Tools" in text and '"name": "write_file"' in text, (
        "tools described after the system prompt"
    )
    assert '<tool_call>\n{"name": "write_file", "arguments": {"path": "a"}}\n</tool_call>' in text, text
    assert "<|im_start|>user\n<tool_response>\nok\n</tool_response>" in text, "tool results as user turns"
