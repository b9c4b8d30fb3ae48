"""Where a call's time goes (issue #18): every pre-engine and recording step is timed, and the
record built in the store thread (off the event loop) is the same record as the old path's."""

import itertools

import httpx
from prometheus_client.parser import text_string_to_metric_families

TOOL = {
    "name": "write_file",
    "description": "Write a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
CALL = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a.txt"}}\n</tool_call>'
STAGES = {"identity", "read_body", "json", "validate", "chain_keys", "turn_fetch", "render",
          "build_splice", "build_render", "build_tokenize", "build_response", "record", "put_turn"}  # fmt: skip


def conversation(p, calls: int) -> None:
    """A harness loop: a long system prompt, each call answered by a tool call and its result."""
    messages = [{"role": "user", "content": "go"}]
    for i in range(calls):
        body = {"model": "m", "max_tokens": 1000, "system": "You are careful. " * 300, "tools": [TOOL],
                "messages": messages}  # fmt: skip
        r = httpx.post(f"{p.url}/v1/messages", json=body, headers={"x-api-key": p.token}, timeout=30)
        assert r.status_code == 200, r.text
        use = next(b for b in r.json()["content"] if b["type"] == "tool_use")
        messages = [*messages, {"role": "assistant", "content": [use]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": f"ok {i}"}]}]  # fmt: skip


def stage_counts(p) -> dict[str, float]:
    text = httpx.get(f"{p.url}/metrics").text
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "clawgym_proxy_stage_seconds")
    return {s.labels["stage"]: s.value for s in fam.samples if s.name.endswith("_count")}


def test_every_step_of_a_call_is_timed_once_per_call(proxy_factory):
    p = proxy_factory([CALL] * 3)
    conversation(p, 3)
    counts = stage_counts(p)
    assert set(counts) == STAGES, f"stages timed: {sorted(counts)}"
    assert all(n == 3 for n in counts.values()), f"each stage once per call, got {counts}"
    timings = p.calls()[1].response["_clawgym"]
    assert {"identity_s", "json_s", "validate_s", "build_tokenize_s"} <= set(timings), timings


def test_the_record_built_off_the_loop_keeps_the_turn_later_calls_splice_onto(proxy_factory, tokenizer):
    """The record and the kept turn, built in the store thread, hold the call's ids: later calls
    splice onto it."""
    p = proxy_factory([CALL] * 3)
    conversation(p, 3)
    calls = p.calls()
    assert [c.seq for c in calls] == [0, 1, 2]
    for a, b in itertools.pairwise(calls):
        first = a.prompt_ids.tolist() + a.output_ids.tolist()
        assert b.prompt_ids.tolist()[: len(first)] == first, "each call extends the previous prompt + output"
        assert b.response["_clawgym"]["prefix_extended"] is True
    assert tokenizer.decode(calls[2].output_ids.tolist()).startswith("<tool_call>")
    assert len(calls[0].prompt_ids) > 600 and len(calls[0].output_logprobs) == len(calls[0].output_ids)


def post(p, messages) -> dict:
    body = {"model": "m", "max_tokens": 1000, "system": "You are careful. " * 300, "tools": [TOOL],
            "messages": messages}  # fmt: skip
    r = httpx.post(f"{p.url}/v1/messages", json=body, headers={"x-api-key": p.token}, timeout=30)
    assert r.status_code == 200, r.text
    return next(b for b in r.json()["content"] if b["type"] == "tool_use")


def result(use, text):
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": text}]}


def harness_with_a_branch_and_a_compaction(p) -> None:
    """Three calls in a row, a retry branching off the first answer, then a compacted history."""
    messages = [{"role": "user", "content": "go"}]
    first = None
    for i in range(3):
        use = post(p, messages)
        first = first or [*messages, {"role": "assistant", "content": [use]}]
        messages = [*messages, {"role": "assistant", "content": [use]}, result(use, f"ok {i}")]
    post(p, [*first, result(first[-1]["content"][0], "retried")])
    post(p, [{"role": "user", "content": "summary: three files written"}])


def test_turns_held_whole_record_the_prompts_the_live_state_builds(proxy_factory, pg_url, redis_url):
    """PostgreSQL + Redis, with and without `proxy.held_turns_mb`: the same calls record the same
    prompt ids (the held turn is the chain's, across a branch and a compaction), and the held
    path spares the live-state fetch of every call that extends this replica's last turn."""
    recorded = {}
    for mb in (256, 0):
        p = proxy_factory([CALL] * 5, store_url=pg_url, redis_url=redis_url, held_turns_mb=mb)
        harness_with_a_branch_and_a_compaction(p)
        calls = p.calls()
        recorded[mb] = [c.prompt_ids.tolist() for c in calls]
        first_answer = calls[0].prompt_ids.tolist() + calls[0].output_ids.tolist()
        assert [c.response["_clawgym"]["prefix_extended"] for c in calls] == [False, True, True, True, False]
        held = p.app.state.gateway.held
        assert (held is not None and len(held) == 5) if mb else held is None, "each answered call is held"
    assert recorded[256] == recorded[0], "held or fetched, the prompts are the same ids"
    assert recorded[0][3][: len(first_answer)] == first_answer, "the branch extends the first answer"


def test_held_turns_stay_within_their_bytes():
    import numpy as np

    from clawgym.proxy.held import HeldTurns
    from clawgym.rendering.splice import HeldTurn

    held = HeldTurns(max_bytes=3 * 400)
    turn = lambda k: HeldTurn(k, np.zeros(100, "<i4"), None)  # noqa: E731 (400 bytes)
    for k in (b"a", b"b", b"c"):
        held.put("r1", turn(k))
    assert held.get("r1", b"a") is not None  # now the most recently used
    held.put("r1", turn(b"d"))
    assert held.get("r1", b"b") is None and len(held) == 3, "the least recently used went"
    assert held.get("r2", b"a") is None, "turns are per rollout"
    held.put("r1", HeldTurn(b"big", np.zeros(1000, "<i4"), None))
    assert held.get("r1", b"big") is None and len(held) == 3, "a turn over the whole budget is not held"


def test_the_proxy_opens_its_store_connections_before_its_first_call_and_starts_without_a_store(
    proxy_factory, pg_url, redis_url, tokenizer, free_port
):
    """At startup (`Gateway.warm_up`, the app's lifespan) the store's writer connections are open
    before any call; a store that is not up yet does not stop the proxy from starting."""
    from clawgym.store.grpc_client import StoreClient

    p = proxy_factory([CALL], store_url=pg_url, redis_url=redis_url)
    assert len(p.store._pg_calls._idle) == 2, "the writer's connections, one per batch in flight"
    conversation(p, 1)
    assert len(p.store._pg_calls._idle) == 2, "the call took a warmed connection, opened none"

    from clawgym.inference.scripted import ScriptedEngine
    from clawgym.proxy.app import create_app
    from clawgym.proxy.config import ProxyConfig
    from clawgym.proxy.serving import ServerThread

    engine = ScriptedEngine.from_texts(tokenizer, [CALL], max_context=8192, model="tiny-qwen3")
    with StoreClient(f"127.0.0.1:{free_port}", secret="x" * 32, timeout_s=1) as down:
        app = create_app(ProxyConfig(), engine, down, tokenizer)
        with ServerThread(app) as server:  # started: its warm-up gave up on the store
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
            r = httpx.post(f"{server.url}/v1/messages", json={"model": "m", "max_tokens": 10, "messages": []},
                           headers={"x-api-key": "k"}, timeout=30)  # fmt: skip
            assert (r.status_code, r.json()["type"]) == (503, "error"), "the store's error, Anthropic-shaped"
