"""A teacher answering through the proxy: a second real clawgym proxy (scripted engine, its own store)
on a loopback port is the upstream; the proxy under test forwards each harness call to it, records
the teacher's answer re-tokenized in the policy's chat template, marked as a teacher's, and answers
the harness in its own protocol. The API key reaches the upstream and nothing else."""

import json
import logging

import anthropic
import numpy as np
import openai
import pytest

from clawgym.errors import InvalidArgument
from clawgym.records import Group, RolloutWithCalls, is_teacher
from clawgym.trainer.batch import build_batch
from clawgym.trainer.demonstrations import Demonstrations, select
from clawgym.trajectory import tree_from_calls

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
TEACHER_CALL = (
    'Listing first.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>'
)
TEACHER_FINAL = "All done: the folder holds two files."


def teacher_pair(proxy_factory, api: str = "openai_chat", key: str | None = None):
    """(upstream, proxy under test): the upstream's scripted engine says TEACHER_CALL then TEACHER_FINAL;
    the proxy's own engine scripts nothing (it must never be asked)."""
    upstream = proxy_factory([TEACHER_CALL, TEACHER_FINAL])
    teacher = {
        "kind": "upstream",
        "url": upstream.url + "/v1",
        "api": api,
        "model": "teacher-model",
        "api_key": upstream.token if key is None else key,
    }
    return upstream, proxy_factory([], teacher=teacher)


def expected_turn(tokenizer, messages: list[dict], turn: dict) -> tuple[str, list[int]]:
    """What the policy's template places after the generation prompt for `turn`, through <|im_end|>,
    and the ids of the whole rendered conversation up to there: computed here from the template alone."""
    tools = [BASH]
    before = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    after = tokenizer.apply_chat_template([*messages, turn], tools=tools, tokenize=False)
    assert after.startswith(before)
    text = after[len(before) :]
    text = text[: text.index("<|im_end|>") + len("<|im_end|>")]
    return text, tokenizer.encode(before + text, add_special_tokens=False)


def test_a_teacher_call_is_recorded_in_the_policy_tokens_marked_and_without_logprobs(
    proxy_factory, tokenizer, tmp_path, caplog
):
    """Chat Completions harness → upstream over Chat Completions: the harness gets the teacher's tool
    call; the record's output ids are the template's rendering of that turn (prompt + output equal the
    whole conversation's ids), logprobs NaN, `_clawgym.teacher` the model; the follow-up call splices
    the teacher's ids; the key is in no log line and no byte of the store."""
    caplog.set_level(logging.DEBUG)
    upstream, p = teacher_pair(proxy_factory)
    client = openai.OpenAI(base_url=p.url + "/v1", api_key=p.token, max_retries=0)
    messages = [
        {"role": "system", "content": "You run commands."},
        {"role": "user", "content": "What is here?"},
    ]
    first = client.chat.completions.create(model="policy", messages=messages, tools=[BASH])
    reply = first.choices[0].message
    assert [(c.function.name, json.loads(c.function.arguments)) for c in reply.tool_calls] == [
        ("bash", {"command": "ls -la"})
    ], f"the teacher's tool call reached the harness: {reply}"
    assert reply.content == "Listing first."

    follow = [*messages, reply.model_dump(exclude_none=True)]
    follow.append({"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "a.txt\nb.txt"})
    second = client.chat.completions.create(model="policy", messages=follow, tools=[BASH])
    assert second.choices[0].message.content == TEACHER_FINAL

    calls = p.calls()
    assert len(calls) == 2 and all(is_teacher(c) for c in calls), "both calls are marked as a teacher's"
    assert calls[0].response["_clawgym"]["teacher"] == "teacher-model"
    assert p.engine.prompts == [], "the policy's engine generated nothing"
    c0 = calls[0]
    assert np.isnan(c0.output_logprobs).all() and len(c0.output_logprobs) == len(c0.output_ids)
    turn = {
        "role": "assistant",
        "content": "Listing first.",
        "tool_calls": [
            {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls -la"}}}
        ],
    }
    text, whole = expected_turn(tokenizer, messages, turn)
    assert tokenizer.decode(c0.output_ids) == text, (
        "the output ids decode to the template's rendering of the turn"
    )
    assert c0.output_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>"), (
        "ends with the turn's stop token"
    )
    assert np.concatenate([c0.prompt_ids, c0.output_ids]).tolist() == whole, (
        "prompt + output ids are exactly the ids of the whole rendered conversation"
    )
    c1 = calls[1]
    spliced = np.concatenate([c0.prompt_ids, c0.output_ids])
    assert c1.prompt_ids[: len(spliced)].tolist() == spliced.tolist(), (
        "the next prompt splices the teacher's ids"
    )
    assert c1.response["_clawgym"]["prefix_extended"]

    upstream_calls = upstream.calls()
    assert len(upstream_calls) == 2 and not is_teacher(upstream_calls[0]), (
        "the upstream captured its own calls"
    )
    key = upstream.token
    assert key not in caplog.text, "the teacher's API key is never logged"
    stores = sorted(tmp_path.glob("store*.db*"))  # both stores (WAL files too): keys are kept hashed
    assert len(stores) >= 2, stores
    for db in stores:
        assert key.encode() not in db.read_bytes(), f"the teacher's API key is not in {db.name}"
    assert key not in json.dumps(
        [c.response for c in calls] + [c.request for c in calls] + [c.headers for c in calls]
    )


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_harness_is_answered_by_an_anthropic_upstream_teacher(proxy_factory, tokenizer, stream):
    """Anthropic Messages harness (JSON or SSE) → upstream over Anthropic Messages: the tool call comes
    back as a `tool_use` block, recorded in the policy's tokens and marked."""
    upstream, p = teacher_pair(proxy_factory, api="anthropic")
    client = anthropic.Anthropic(base_url=p.url, api_key=p.token, max_retries=0)
    tool = {
        "name": "bash",
        "description": "Run a shell command.",
        "input_schema": BASH["function"]["parameters"],
    }
    request = {
        "model": "policy",
        "max_tokens": 256,
        "system": "You run commands.",
        "messages": [{"role": "user", "content": "What is here?"}],
        "tools": [tool],
    }
    if stream:
        with client.messages.stream(**request) as events:
            message = events.get_final_message()
    else:
        message = client.messages.create(**request)
    blocks = [(b.type, getattr(b, "text", None) or getattr(b, "input", None)) for b in message.content]
    assert blocks == [("text", "Listing first."), ("tool_use", {"command": "ls -la"})], blocks
    (call,) = p.calls()
    assert call.protocol == "anthropic_messages"
    assert is_teacher(call) and np.isnan(call.output_logprobs).all()
    decoded = tokenizer.decode(call.output_ids)
    assert decoded.startswith("Listing first.\n<tool_call>") and decoded.endswith("</tool_call><|im_end|>"), (
        decoded
    )
    (upstream_call,) = upstream.calls()
    assert upstream_call.protocol == call.protocol, "the upstream was asked over the Anthropic protocol"


def test_an_upstream_refusal_or_outage_is_the_harness_protocol_error_and_records_nothing(proxy_factory):
    """A wrong key: the upstream's 401 becomes a 502 in the harness's (Anthropic) error shape, the key
    not quoted; an upstream that is down: a 503 in the Chat Completions shape. No call is recorded."""
    secret = "sk-not-the-upstream-key-4242"
    _, p = teacher_pair(proxy_factory, api="anthropic", key=secret)
    client = anthropic.Anthropic(base_url=p.url, api_key=p.token, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as refused:
        client.messages.create(model="policy", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 502
    body = refused.value.response.json()
    assert body["type"] == "error" and "HTTP 401" in body["error"]["message"], body
    assert secret not in json.dumps(body)
    assert p.calls() == [], "a refused teacher call is not recorded"

    down = proxy_factory([], teacher={"kind": "upstream", "url": "http://127.0.0.1:9/v1", "model": "m"})
    chat = openai.OpenAI(base_url=down.url + "/v1", api_key=down.token, max_retries=0)
    with pytest.raises(openai.APIStatusError) as unreachable:
        chat.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}])
    assert unreachable.value.status_code == 503
    assert "unreachable" in unreachable.value.response.json()["error"]["message"]
    assert down.calls() == []


def test_rl_never_trains_a_teacher_call_and_sft_does(proxy_factory):
    """A rollout of teacher calls is left out of an RL batch (counted); its NaN logprobs are refused by
    the RL tree builder; demonstrations read it (logprobs as 0) into a tree."""
    _, p = teacher_pair(proxy_factory)
    client = openai.OpenAI(base_url=p.url + "/v1", api_key=p.token, max_retries=0)
    client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], tools=[BASH])
    rollout = p.store.get_rollout(p.rollout_id)
    group = Group(rollout.group_id, p.run_id, [RolloutWithCalls(rollout, p.calls())])
    batch = build_batch([group], version=0, max_policy_lag=4)
    assert batch.trees == [] and batch.empty == [group.id] and batch.teacher_rollouts == 1, (
        "RL trains no teacher rollout; the group is consumed untrained"
    )
    with pytest.raises(InvalidArgument, match="finite"):
        tree_from_calls(p.calls())
    demos = Demonstrations.of(select([group], teacher_only=True), 1, seed=0)
    assert demos.tokens == len(p.calls()[0].output_ids), "SFT trains every teacher token"
