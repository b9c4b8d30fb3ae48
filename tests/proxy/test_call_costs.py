"""Where a call's time goes (issue #18): every pre-engine and recording step is timed, and the
record built in the store thread (off the event loop) is the same record as the old path's."""

import itertools

import httpx
import pytest
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


@pytest.mark.parametrize("record_off_loop", [True, False])
def test_the_record_built_off_the_loop_is_the_old_paths_record(proxy_factory, tokenizer, record_off_loop):
    """Both paths record the same ids and keep the same turn: later calls splice onto it."""
    p = proxy_factory([CALL] * 3, record_off_loop=record_off_loop)
    conversation(p, 3)
    calls = p.calls()
    assert [c.seq for c in calls] == [0, 1, 2]
    for a, b in itertools.pairwise(calls):
        first = a.prompt_ids.tolist() + a.output_ids.tolist()
        assert b.prompt_ids.tolist()[: len(first)] == first, "each call extends the previous prompt + output"
        assert b.response["_clawgym"]["prefix_extended"] is True
    assert tokenizer.decode(calls[2].output_ids.tolist()).startswith("<tool_call>")
    assert len(calls[0].prompt_ids) > 600 and len(calls[0].output_logprobs) == len(calls[0].output_ids)
