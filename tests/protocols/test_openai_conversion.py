"""OpenAI Chat Completions and Responses → Conversation, with the shapes opencode, Qwen Code,
mini-swe-agent, OpenClaw and Codex send (../shared/HARNESSES.md), feature by feature."""

import asyncio
import json

import pytest

from clawgym.errors import InvalidArgument
from clawgym.protocols.conversation import Completion, Finished, Message, ToolCall, ToolCallDone, Usage
from clawgym.protocols.openai_chat import OpenAIChat
from clawgym.protocols.openai_responses import OpenAIResponses

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}


@pytest.fixture
def chat():
    return OpenAIChat()


@pytest.fixture
def responses():
    return OpenAIResponses()


# --- Chat: roles and content ---


def test_chat_system_and_developer_roles_become_system_messages(chat):
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "developer", "content": [{"type": "text", "text": "D"}]},
            {"role": "user", "content": '"Create hello.txt"'},  # opencode wraps the prompt in quotes
        ],
    }
    msgs = chat.parse(body).conversation.messages
    assert msgs == (Message("system", "S"), Message("system", "D"), Message("user", '"Create hello.txt"')), (
        msgs
    )


def test_chat_assistant_tool_calls_without_content_and_list_tool_results(chat):
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}],
    }
    msgs = chat.parse(body).conversation.messages
    assert msgs[1] == Message(
        "assistant", "", tool_calls=(ToolCall("bash", '{"command":"ls"}', "call_1"),)
    ), msgs[1]
    assert msgs[2] == Message("tool", "a\n\nb", tool_call_id="call_1"), msgs[2]


def test_chat_options_follow_the_request(chat):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 50,
        "max_completion_tokens": 70,
        "stop": "END",
        "stream": True,
        "stream_options": {"include_usage": True},
        "tool_choice": "auto",
        "temperature": 0.2,
        "seed": 7,
    }
    o = chat.parse(body).options
    assert (o.max_tokens, o.stop, o.stream, o.include_usage, o.temperature, o.seed) == (
        70,
        ("END",),
        True,
        True,
        0.2,
        7,
    )
    assert not o.parse_tool_calls, "no tools: generated <tool_call> text stays text"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"n": 2}, "only one choice"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "not supported",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "not supported"),
        ({"messages": []}, "at least one"),
        ({"messages": [{"role": "user"}], "temperature": -1}, "malformed"),
    ],
    ids=["n", "image", "audio", "empty", "bad-temperature"],
)
def test_chat_unsupported_requests_are_invalid_argument(chat, change, message):
    with pytest.raises(InvalidArgument, match=message):
        chat.parse({"model": "m", "messages": [{"role": "user", "content": "x"}], **change})


# --- Responses (Codex) ---


def codex_body(**overrides):
    body = {
        "model": "clawgym-policy",
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<permissions>…</permissions>"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "<environment_context/>"}],
            },
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Create hello.txt"}],
            },
        ],
        "tools": [
            {
                "type": "function",
                "name": "shell",
                "description": "Run.",
                "strict": False,
                "parameters": SCHEMA,
            },
            {
                "type": "namespace",
                "name": "agents",
                "description": "Tools in the agents namespace.",
                "tools": [
                    {
                        "type": "function",
                        "name": "spawn_agent",
                        "description": "Spawn.",
                        "strict": False,
                        "parameters": SCHEMA,
                    }
                ],
            },
            {"type": "web_search", "external_web_access": False},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "thread-1",
        "client_metadata": {"originator": "codex_exec"},
    }
    body.update(overrides)
    return body


def test_codex_instructions_and_developer_items_become_system_messages(responses):
    msgs = responses.parse(codex_body()).conversation.messages
    assert [m.role for m in msgs] == ["system", "system", "user", "user"], msgs
    assert (
        msgs[0].content == "You are Codex, a coding agent."
        and msgs[1].content == "<permissions>…</permissions>"
    )


def test_codex_namespace_tool_is_flattened_and_web_search_dropped(responses, caplog):
    conv = responses.parse(codex_body()).conversation
    assert [(t.name, t.namespace) for t in conv.tools] == [("shell", ""), ("spawn_agent", "agents")], (
        conv.tools
    )
    assert conv.tool_namespaces() == {"spawn_agent": "agents"}


def test_codex_follow_up_items_form_one_assistant_turn_then_tool_results(responses):
    follow = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Writing."}]},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"command":"ls"}',
        },
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "spawn_agent",
            "arguments": "{}",
            "namespace": "agents",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {
            "type": "function_call_output",
            "call_id": "call_2",
            "output": {"content": "failed", "success": False},
        },
        {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "x"}},
    ]
    body = codex_body()
    body["input"] += follow
    msgs = responses.parse(body).conversation.messages[4:]
    assert msgs[0] == Message(
        "assistant",
        "Writing.",
        "Plan.",
        (ToolCall("shell", '{"command":"ls"}', "call_1"), ToolCall("spawn_agent", "{}", "call_2")),
    ), msgs[0]
    assert msgs[1:] == (
        Message("tool", "a.txt", tool_call_id="call_1"),
        Message("tool", "failed", tool_call_id="call_2"),
    )


def test_codex_string_input_is_one_user_message(responses):
    conv = responses.parse({"model": "m", "input": "hello"}).conversation
    assert conv.messages == (Message("user", "hello"),)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
        ({"input": [{"type": "mystery"}]}, "unsupported input item"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "not supported",
        ),
        ({"input": [{"type": "function_call", "call_id": "c"}]}, "malformed"),
    ],
    ids=["previous-response", "item-reference", "unknown-item", "image", "call-without-name"],
)
def test_responses_unsupported_requests_are_invalid_argument(responses, change, message):
    with pytest.raises(InvalidArgument, match=message):
        responses.parse(codex_body(**change))


def test_responses_function_call_from_a_namespace_names_it(responses):
    """A call to a flattened namespace function comes back with its namespace, for Codex to route."""
    req = responses.parse(codex_body(stream=False))
    reply = responses.reply(req, 10, 0)
    call = ToolCall("spawn_agent", "{}", reply.new_tool_id(), namespace="agents")
    out = reply.response(Completion("", "", (call,), "stop", Usage(10, 5)))["output"]
    assert out == [
        {
            "type": "function_call",
            "id": out[0]["id"],
            "call_id": call.id,
            "name": "spawn_agent",
            "arguments": "{}",
            "status": "completed",
            "namespace": "agents",
        }
    ], out

    async def events():
        yield ToolCallDone(call, 0)
        yield Finished(Completion("", "", (call,), "stop", Usage(10, 5)))

    async def collect():
        return [chunk async for chunk in responses.reply(req, 10, 0).stream(events())]

    lines = [json.loads(c.decode().split("data: ", 1)[1]) for c in asyncio.run(collect())]
    seqs = [e["sequence_number"] for e in lines]
    assert seqs == list(range(len(lines))), "sequence numbers count every event from 0"
    assert lines[-1]["type"] == "response.completed" and lines[-1]["response"]["usage"]["output_tokens"] == 5
