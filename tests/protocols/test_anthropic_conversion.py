"""Anthropic Messages → Conversation, feature by feature, with the request shapes Claude Code sends.

Shapes follow ../shared/HARNESSES.md: a billing-header system block, `role: "system"` entries in
`messages`, `metadata.user_id` as a JSON string, `thinking` / `context_management` /
`output_config`, tools with JSON-Schema 2020-12 and `defer_loading`, `cache_control` everywhere.
"""

import json
import logging

import pytest

from clawgym.errors import InvalidArgument
from clawgym.protocols.anthropic_messages import AnthropicMessages
from clawgym.protocols.conversation import Message, ToolCall

BASH_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {"command": {"type": "string"}},
    "required": ["command"],
    "additionalProperties": False,
}


def claude_code_body(**overrides):
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 128000,
        "stream": True,
        "temperature": 1,
        "system": [
            {
                "type": "text",
                "text": "x-anthropic-billing-header: cc_version=2.1.332.a1b; cc_entrypoint=sdk-cli; cch=0f3e;",
            },
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Use the tools.", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>\nBe careful.\n</system-reminder>"},
                    {"type": "text", "text": "Create hello.txt", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ],
        "tools": [
            {"name": "Bash", "description": "Run a command.", "input_schema": BASH_SCHEMA},
            {
                "name": "WebFetch",
                "description": "Fetch.",
                "input_schema": {"type": "object"},
                "defer_loading": True,
            },
        ],
        "metadata": {"user_id": json.dumps({"device_id": "d1", "account_uuid": "", "session_id": "s1"})},
        "thinking": {"type": "enabled", "budget_tokens": 31999},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
    }
    body.update(overrides)
    return body


@pytest.fixture
def protocol():
    return AnthropicMessages()


# --- system prompt ---


def test_billing_header_block_is_dropped_and_system_blocks_are_joined(protocol):
    conv = protocol.parse(claude_code_body()).conversation
    assert conv.messages[0] == Message("system", "You are Claude Code.\n\nUse the tools."), conv.messages[0]
    assert "billing" not in conv.messages[0].content, "the billing header never reaches the policy"


def test_system_entries_inside_messages_stay_in_place(protocol):
    body = claude_code_body(
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Mid-conversation reminder."},
            {"role": "user", "content": [{"type": "text", "text": "go on"}]},
        ]
    )
    roles = [(m.role, m.content) for m in protocol.parse(body).conversation.messages[1:]]
    assert roles == [("user", "hi"), ("system", "Mid-conversation reminder."), ("user", "go on")], roles


# --- body fields Claude Code sends ---


def test_claude_code_extras_are_accepted_and_known_ones_not_logged(protocol, caplog):
    with caplog.at_level(logging.INFO, logger="clawgym.protocols"):
        req = protocol.parse(claude_code_body(unknown_field=1))
        protocol.parse(claude_code_body(unknown_field=1))
    assert req.options.max_tokens == 128000 and req.options.stream, req.options
    logged = [r.getMessage() for r in caplog.records]
    assert logged == ["anthropic_messages: field 'unknown_field' is present in the request but ignored"], (
        f"only unknown fields are logged, once: {logged}"
    )


def test_user_text_blocks_are_joined_and_cache_control_ignored(protocol):
    user = protocol.parse(claude_code_body()).conversation.messages[1]
    assert user == Message(
        "user", "<system-reminder>\nBe careful.\n</system-reminder>\n\nCreate hello.txt"
    ), user


# --- tools ---


def test_tools_keep_their_2020_12_schema_and_deferred_tools_stay(protocol):
    tools = protocol.parse(claude_code_body()).conversation.tools
    assert [t.name for t in tools] == ["Bash", "WebFetch"], "client tools, deferred ones included"
    assert tools[0].parameters == BASH_SCHEMA, "the schema passes through untouched"


def test_hosted_tools_are_dropped(protocol):
    body = claude_code_body(tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}])
    conv = protocol.parse(body).conversation
    assert conv.tools == () and not protocol.parse(body).options.parse_tool_calls, "hosted tools are dropped"


def test_tool_choice_none_disables_tool_call_parsing(protocol):
    req = protocol.parse(claude_code_body(tool_choice={"type": "none"}))
    assert not req.options.parse_tool_calls, "tool_choice none: generated <tool_call> text stays text"


# --- tool use and results ---


def test_tool_use_and_tool_results_become_calls_and_tool_messages(protocol):
    body = claude_code_body(
        messages=[
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Use ls.", "signature": "sig"},
                    {"type": "text", "text": "Listing."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "pwd"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "a.txt",
                        "cache_control": {"type": "ephemeral"},
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [{"type": "text", "text": "/w"}],
                        "is_error": False,
                    },
                    {"type": "text", "text": "<system-reminder>todo</system-reminder>"},
                ],
            },
        ]
    )
    msgs = protocol.parse(body).conversation.messages[2:]
    assert msgs[0] == Message(
        "assistant",
        "Listing.",
        "Use ls.",
        (ToolCall("Bash", '{"command": "ls"}', "toolu_1"), ToolCall("Bash", '{"command": "pwd"}', "toolu_2")),
    ), msgs[0]
    assert msgs[1:] == (
        Message("tool", "a.txt", tool_call_id="toolu_1"),
        Message("tool", "/w", tool_call_id="toolu_2"),
        Message("user", "<system-reminder>todo</system-reminder>"),
    ), msgs[1:]


def test_redacted_thinking_is_skipped(protocol):
    body = claude_code_body(
        messages=[
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "content": [{"type": "redacted_thinking", "data": "…"}, {"type": "text", "text": "y"}],
            },
            {"role": "user", "content": "z"},
        ]
    )
    assert protocol.parse(body).conversation.messages[2] == Message("assistant", "y")


# --- unsupported content ---


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}],
        [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}],
        [{"type": "document", "source": {"type": "text", "data": "x"}}],
    ],
    ids=["image", "image-in-tool-result", "document"],
)
def test_images_and_documents_are_refused_with_a_clear_message(protocol, content):
    with pytest.raises(InvalidArgument, match="not supported by this policy"):
        protocol.parse(claude_code_body(messages=[{"role": "user", "content": content}]))


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": "hi"},
        {"messages": [{"role": "bot", "content": "x"}]},
        {"messages": [], "max_tokens": 0},
    ],
    ids=["empty", "messages-not-list", "bad-role", "zero-max-tokens"],
)
def test_malformed_bodies_are_invalid_argument_not_a_crash(protocol, body):
    with pytest.raises(InvalidArgument, match=r"malformed request|at least one"):
        protocol.parse(body)
