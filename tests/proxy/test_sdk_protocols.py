"""The official `anthropic` and `openai` SDKs against the running proxy: every response and event parses.

Each protocol gets a full tool-use round trip (a tool call that writes a file, then a final
message), streaming and not, through a scripted engine tokenized by the real tiny-qwen3
tokenizer, with a real SQLite store. After the round trip the second call's recorded prompt
must extend the first call's prompt + output exactly (assistant-token splicing).
"""

import json

import anthropic
import openai
import pytest

WRITE_ARGS = {"path": "hello.txt", "content": "héllo wörld"}
WRITE_FILE_TOOL = {
    "name": "write_file",
    "description": "Write a text file in the workspace.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
}
OPENAI_TOOL = {
    "type": "function",
    "function": {
        "name": WRITE_FILE_TOOL["name"],
        "description": WRITE_FILE_TOOL["description"],
        "parameters": WRITE_FILE_TOOL["input_schema"],
    },
}
RESPONSES_TOOL = {
    "type": "function",
    "name": WRITE_FILE_TOOL["name"],
    **{"parameters": WRITE_FILE_TOOL["input_schema"]},
}


def assert_second_prompt_extends_first(proxy) -> None:
    calls = proxy.calls()
    assert [c.seq for c in calls] == [0, 1], f"two calls recorded in order, got seqs {[c.seq for c in calls]}"
    first = calls[0].prompt_ids.tolist() + calls[0].output_ids.tolist()
    second = calls[1].prompt_ids.tolist()
    assert second[: len(first)] == first, "second prompt must start with the first prompt + output exactly"
    assert len(second) > len(first), "the tool result must add new prompt tokens"
    assert calls[1].response["_clawgym"]["prefix_extended"], "the call must be counted as a prefix extension"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_anthropic_sdk_completes_a_tool_use_round_trip(proxy_factory, script, stream):
    """Claude Code's protocol: tool_use with stop_reason tool_use, then a final text turn."""
    p = proxy_factory([script.tool_call, script.final])
    client = anthropic.Anthropic(base_url=p.url, api_key=p.token, max_retries=0)
    messages = [{"role": "user", "content": "Create hello.txt"}]
    kwargs = {"model": "policy", "max_tokens": 128000, "tools": [WRITE_FILE_TOOL]}

    def call(msgs):
        if not stream:
            return client.messages.create(messages=msgs, timeout=60, **kwargs), []
        with client.messages.stream(messages=msgs, **kwargs) as s:
            events = list(s)
            return s.get_final_message(), events

    first, events = call(messages)
    assert first.stop_reason == "tool_use", (
        f"a turn ending in a tool call stops for tool_use, got {first.stop_reason}"
    )
    uses = [b for b in first.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "write_file", (
        f"one write_file call expected, got {first.content}"
    )
    assert uses[0].input == WRITE_ARGS, "tool input must round-trip non-ASCII text exactly"
    assert uses[0].id.startswith("toolu_"), "Anthropic tool ids look like toolu_…"
    if stream:
        kinds = {e.type for e in events}
        assert {"message_start", "content_block_start", "content_block_stop", "message_stop"} <= kinds, kinds

    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "wrote 11 bytes"}],
        },
    ]
    final, events = call(messages)
    assert final.stop_reason == "end_turn", f"a plain answer ends the turn, got {final.stop_reason}"
    assert [b.text for b in final.content if b.type == "text"] == [script.final], (
        "final text must arrive intact"
    )
    assert final.usage.cache_read_input_tokens > 0, "spliced prompt tokens are reported as cache reads"
    if stream:
        deltas = [e for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]
        assert len(deltas) > 3, "text must stream as the engine produces tokens, not as one chunk"
        assert "".join(e.delta.text for e in deltas) == script.final, "deltas concatenate to the text"
    assert_second_prompt_extends_first(p)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_chat_sdk_completes_a_tool_use_round_trip(proxy_factory, script, stream):
    """opencode / Qwen Code / mini-swe-agent's protocol: tool_calls with finish_reason tool_calls."""
    p = proxy_factory([script.tool_call, script.final])
    client = openai.OpenAI(base_url=p.url + "/v1", api_key=p.token, max_retries=0)
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Create hello.txt"},
    ]

    def call(msgs):
        if not stream:
            r = client.chat.completions.create(
                model="policy", messages=msgs, tools=[OPENAI_TOOL], max_tokens=4000
            )
            m = r.choices[0]
            return m.message.content, m.message.tool_calls, m.finish_reason, r.usage
        chunks = list(
            client.chat.completions.create(
                model="policy",
                messages=msgs,
                tools=[OPENAI_TOOL],
                stream=True,
                stream_options={"include_usage": True},
                max_completion_tokens=4000,
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert len(finish) == 1, f"exactly one chunk carries the finish reason, got {finish}"
        assert chunks[-1].usage is not None and not chunks[-1].choices, (
            "include_usage sends a final usage chunk"
        )
        return text or None, calls, finish[0], chunks[-1].usage

    content, tool_calls, finish, usage = call(messages)
    assert finish == "tool_calls", f"a tool call turn finishes with tool_calls, got {finish}"
    assert len(tool_calls) == 1 and tool_calls[0].function.name == "write_file", f"got {tool_calls}"
    assert json.loads(tool_calls[0].function.arguments) == WRITE_ARGS, (
        "arguments are a JSON string of the input"
    )
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0, "usage is reported"

    call_id = tool_calls[0].id
    messages += [
        # opencode's shape: assistant tool_calls with no content key, tool content as a list of text parts
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "write_file", "arguments": tool_calls[0].function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": [{"type": "text", "text": "wrote 11 bytes"}]},
    ]
    content, tool_calls, finish, usage = call(messages)
    assert finish == "stop" and not tool_calls, (
        f"a plain answer finishes with stop, got {finish} {tool_calls}"
    )
    assert content == script.final, "final text must arrive intact"
    assert usage.prompt_tokens_details.cached_tokens > 0, "spliced prompt tokens are reported as cached"
    assert_second_prompt_extends_first(p)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_openai_responses_sdk_completes_a_tool_use_round_trip(proxy_factory, script, stream):
    """Codex's protocol: a function_call output item, then function_call_output in the next input."""
    p = proxy_factory([script.tool_call, script.final])
    client = openai.OpenAI(base_url=p.url + "/v1", api_key=p.token, max_retries=0)
    items: list = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "Sandbox: workspace-write."}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Create hello.txt"}]},
    ]
    kwargs = {"model": "policy", "instructions": "You are Codex.", "tools": [RESPONSES_TOOL], "store": False}

    def call(inp):
        if not stream:
            return client.responses.create(input=inp, **kwargs), []
        with client.responses.stream(input=inp, **kwargs) as s:
            events = list(s)
            return s.get_final_response(), events

    first, events = call(items)
    calls = [o for o in first.output if o.type == "function_call"]
    assert first.status == "completed", f"got status {first.status}"
    assert len(calls) == 1 and calls[0].name == "write_file", (
        f"one function_call expected, got {first.output}"
    )
    assert json.loads(calls[0].arguments) == WRITE_ARGS, "arguments are a JSON string of the input"
    if stream:
        kinds = [e.type for e in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
        assert "response.function_call_arguments.done" in kinds, "a tool call is announced as complete"

    items += [o.model_dump(exclude_none=True) for o in first.output]
    items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": "wrote 11 bytes"})
    final, events = call(items)
    assert final.output_text == script.final, f"final text must arrive intact, got {final.output_text!r}"
    assert final.usage.input_tokens_details.cached_tokens > 0, "spliced prompt tokens are reported as cached"
    if stream:
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert len(deltas) > 3 and "".join(deltas) == script.final, (
            "text streams incrementally and completely"
        )
    assert_second_prompt_extends_first(p)


def test_sdks_list_the_served_model(proxy_factory):
    """`GET /v1/models` parses in both SDKs (harnesses probe it)."""
    p = proxy_factory()
    models = openai.OpenAI(base_url=p.url + "/v1", api_key=p.token, max_retries=0).models.list()
    assert [m.id for m in models.data] == ["tiny-qwen3"], "the OpenAI SDK sees the served model"
    page = anthropic.Anthropic(base_url=p.url, api_key=p.token, max_retries=0).models.list()
    assert [m.id for m in page.data] == ["tiny-qwen3"], "the Anthropic SDK sees the served model"


def test_anthropic_sdk_counts_tokens_like_the_prompt(proxy_factory, tokenizer):
    """count_tokens answers the length of the prompt the policy would see."""
    p = proxy_factory()
    client = anthropic.Anthropic(base_url=p.url, api_key=p.token, max_retries=0)
    counted = client.messages.count_tokens(
        model="policy", messages=[{"role": "user", "content": "hi"}], tools=[WRITE_FILE_TOOL]
    ).input_tokens
    client.messages.create(
        model="policy", max_tokens=100, messages=[{"role": "user", "content": "hi"}], tools=[WRITE_FILE_TOOL]
    )
    recorded = len(p.calls()[0].prompt_ids)
    assert counted == recorded, f"count_tokens ({counted}) must equal the recorded prompt length ({recorded})"
