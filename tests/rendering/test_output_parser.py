"""The output parser: generated text → text, thinking and tool calls, identical however it is chunked."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from clawgym.protocols.conversation import TextDelta, ThinkingDelta, ToolCallDone
from clawgym.rendering.toolcalls import OutputParser

TURN = (
    "<think>\nCheck the folder first.\n</think>\n\nI'll look.\n"
    '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "read", "arguments": {"path": "é.txt"}}\n</tool_call>'
)


def parse(pieces, **kwargs):
    counter = itertools.count()
    p = OutputParser(lambda: f"id{next(counter)}", **kwargs)
    events = [e for piece in pieces for e in p.feed(piece)] + p.finish()
    return p, events


def test_thinking_text_and_several_tool_calls_are_separated():
    p, events = parse([TURN])
    assert p.thinking == "Check the folder first.", repr(p.thinking)
    assert p.text == "I'll look.", repr(p.text)
    assert [(c.name, c.arguments, c.id) for c in p.tool_calls] == [
        ("bash", '{"command": "ls -la"}', "id0"),
        ("read", '{"path": "é.txt"}', "id1"),
    ], p.tool_calls
    assert [type(e) for e in events if isinstance(e, ToolCallDone)] == [ToolCallDone, ToolCallDone]


@settings(max_examples=200)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(TURN)), max_size=30))
def test_any_chunking_gives_the_same_result(cuts):
    """Text arrives token by token in arbitrary pieces; the parse must not depend on where they split."""
    bounds = sorted(set(cuts))
    pieces = [TURN[a:b] for a, b in zip([0, *bounds], [*bounds, len(TURN)], strict=True)]
    p, events = parse(pieces)
    assert (p.text, p.thinking, [c.name for c in p.tool_calls]) == (
        "I'll look.",
        "Check the folder first.",
        ["bash", "read"],
    )
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == p.text, "deltas add up to the text"
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == p.thinking


def test_a_tool_call_is_emitted_as_soon_as_its_closing_tag_arrives():
    counter = itertools.count()
    p = OutputParser(lambda: f"id{next(counter)}")
    assert p.feed('<tool_call>\n{"name": "bash", "arguments": {}}\n') == [], "incomplete call: nothing yet"
    events = p.feed("</tool_call>")
    assert [type(e) for e in events] == [ToolCallDone], (
        f"the call is emitted on its closing tag, got {events}"
    )


def test_partial_tag_is_held_back_but_plain_text_streams():
    p = OutputParser(lambda: "x")
    assert p.feed("Hello <to") == [TextDelta("Hello")], "text streams; '<to' might start a tool call"
    assert p.feed("day") == [TextDelta(" <today")], "released once it cannot be a tag"


def test_malformed_tool_json_is_returned_as_text():
    p, _ = parse(['Try: <tool_call>\n{"name": "bash", "arguments": {oops}}\n</tool_call> then'])
    assert p.tool_calls == [] and "<tool_call>" in p.text and "{oops}" in p.text, p.text


def test_arguments_that_are_not_an_object_are_text_and_unterminated_calls_too():
    p, _ = parse(['<tool_call>{"name": "bash", "arguments": [1]}</tool_call>'])
    assert p.tool_calls == [], "every protocol needs object arguments"
    p, _ = parse(['<tool_call>{"name": "bash", "arguments": {}}'])
    assert p.tool_calls == [] and p.text.startswith("<tool_call>"), "a cut-off call comes back as text"


def test_tool_calls_are_not_parsed_when_the_request_has_no_tools():
    p, _ = parse(['<tool_call>{"name": "bash", "arguments": {}}</tool_call>'], parse_tool_calls=False)
    assert p.tool_calls == [] and p.text.startswith("<tool_call>")


def test_a_generation_prompt_that_opens_thinking_starts_in_thinking():
    p, _ = parse(["reasoning here\n</think>\n\nanswer"], starts_in_thinking=True)
    assert (p.thinking, p.text) == ("reasoning here", "answer")


def test_namespaced_functions_carry_their_namespace():
    p, _ = parse(
        ['<tool_call>{"name": "spawn_agent", "arguments": {}}</tool_call>'],
        namespaces={"spawn_agent": "agents"},
    )
    assert p.tool_calls[0].namespace == "agents"
