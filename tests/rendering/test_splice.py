"""Assistant-token splicing (ARCHITECTURE.md §5) with the real tiny-qwen3 tokenizer and template."""

import numpy as np
import pytest

from clawgym.policies import load_tokenizer
from clawgym.protocols.conversation import Conversation, Message, Tool, ToolCall
from clawgym.rendering.splice import GeneratedTurn, HeldTurn, PromptBuilder, chain_keys, turn_key
from clawgym.rendering.template import ChatTemplate

TOOLS = (Tool("bash", "Run a command.", {"type": "object", "properties": {"command": {"type": "string"}}}),)
SYSTEM = Message("system", "You are an agent.")
USER = Message("user", "List the files.")
CALL_TEXT = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'


@pytest.fixture(scope="module")
def builder():
    return PromptBuilder(ChatTemplate(load_tokenizer("tiny-qwen3")))


def generate(builder, conv, text, turns, end=True, message=None):
    """Builds conv's prompt, 'generates' `text` (+ <|im_end|>), keeps the turn; returns (prompt, output)."""
    tok = builder.template.tokenizer
    built = builder.build(conv, turns)
    out = tok.encode(text, add_special_tokens=False) + (
        [tok.convert_tokens_to_ids("<|im_end|>")] if end else []
    )
    key = turn_key(built.prompt_key, message)
    seg = np.asarray(built.ids[built.segment_start :], dtype="<i4")
    turns[key] = GeneratedTurn(key, built.parent, seg, np.asarray(out, dtype="<i4"))
    return built, out


def test_spliced_prompt_equals_the_full_rendering_when_generated_text_round_trips(builder):
    """When the model's tokens are exactly what the template would render, splicing changes
    nothing: the incremental prompt equals tokenizing the full rendering."""
    turns: dict = {}
    assistant = Message("assistant", "", tool_calls=(ToolCall("bash", '{"command": "ls"}', "call_1"),))
    first, out = generate(builder, Conversation((SYSTEM, USER), TOOLS), CALL_TEXT, turns, message=assistant)
    conv = Conversation((SYSTEM, USER, assistant, Message("tool", "a.txt", tool_call_id="call_1")), TOOLS)
    second = builder.build(conv, turns)
    t = builder.template
    assert second.ids == t.encode(t.render(conv.messages, conv.tools)), "incremental == full rendering"
    assert second.ids[: len(first.ids) + len(out)] == first.ids + out, "and it extends prompt + output"
    assert second.rendered_tokens == len(second.ids) - len(first.ids) - len(out), (
        "only new tokens were rendered"
    )


def test_generated_ids_win_over_a_retokenization(builder):
    """The policy produced a non-canonical tokenization; the next prompt keeps its exact ids."""
    tok = builder.template.tokenizer
    turns: dict = {}
    odd = [tok.convert_tokens_to_ids(c) for c in ["H", "i"]] + [tok.convert_tokens_to_ids("<|im_end|>")]
    built = builder.build(Conversation((USER,)), turns)
    key = turn_key(built.prompt_key, Message("assistant", "Hi"))
    turns[key] = GeneratedTurn(key, b"", np.asarray(built.ids, "<i4"), np.asarray(odd, "<i4"))
    nxt = builder.build(Conversation((USER, Message("assistant", "Hi"), Message("user", "Again"))), turns)
    assert nxt.ids[: len(built.ids) + 3] == built.ids + odd, "the generated ids are spliced, not re-encoded"


def test_turn_keys_ignore_ids_and_thinking_but_not_content():
    a = Message("assistant", "ok", "thought", (ToolCall("bash", '{"command": "ls"}', "call_1"),))
    b = Message("assistant", " ok\n", "", (ToolCall("bash", '{ "command":"ls" }', "callX"),))
    c = Message("assistant", "ok", "", (ToolCall("bash", '{"command": "pwd"}', "call_1"),))
    key = lambda m: chain_keys(Conversation((USER, m)))[-1]  # noqa: E731
    assert key(a) == key(b), "ids, thinking, whitespace and JSON formatting do not matter"
    assert key(a) != key(c), "different arguments are a different turn"


def test_a_missing_ancestor_falls_back_to_an_earlier_turn_or_a_full_render(builder):
    turns: dict = {}
    a1 = Message("assistant", "one")
    generate(builder, Conversation((USER,)), "one", turns, message=a1)
    conv2 = Conversation((USER, a1, Message("user", "next")))
    generate(builder, conv2, "two", turns, message=Message("assistant", "two"))
    conv3 = Conversation((*conv2.messages, Message("assistant", "two"), Message("user", "last")))
    assert builder.build(conv3, turns).extended, "the whole chain is there: extends the last turn"
    first_key = chain_keys(conv3)[1]
    del turns[first_key]  # the root turn expired
    rebuilt = builder.build(conv3, turns)
    assert not rebuilt.extended, "without its ancestor a turn cannot be rebuilt: render from scratch"
    t = builder.template
    assert rebuilt.ids == t.encode(t.render(conv3.messages, ())), "the fallback is the plain rendering"


def test_an_output_cut_by_the_length_limit_gets_its_turn_closed(builder):
    """No stop token was generated, so the continuation closes the turn itself."""
    turns: dict = {}
    a1 = Message("assistant", "partial")
    first, out = generate(builder, Conversation((USER,)), "partial", turns, end=False, message=a1)
    nxt = builder.build(Conversation((USER, a1, Message("user", "go on"))), turns)
    tail = builder.template.tokenizer.decode(nxt.ids[len(first.ids) + len(out) :])
    assert tail.startswith("<|im_end|>\n<|im_start|>user\ngo on"), repr(tail)


# --- a turn held whole (proxy.held) builds the prompt its chain of turns builds ---


def held_of(built, out, message) -> HeldTurn:
    key = turn_key(built.prompt_key, message)
    return HeldTurn(key, np.asarray(built.ids + out, "<i4"), out[-1] if out else None)


@pytest.mark.parametrize("end", [True, False], ids=["stopped", "cut-by-length"])
def test_a_held_turn_builds_the_prompt_its_chain_builds(builder, end):
    """Three calls deep, then a branch off the first turn and a compacted history: wherever the
    held turn is the request's newest assistant turn the prompt is the chain's, id for id."""
    turns: dict = {}
    held: dict = {}
    conv = Conversation((SYSTEM, USER), TOOLS)
    for i in range(3):
        a = Message("assistant", f"step {i}")
        built, out = generate(builder, conv, f"step {i}", turns, end=end, message=a)
        held[turn_key(built.prompt_key, a)] = held_of(built, out, a)
        conv = Conversation((*conv.messages, a, Message("user", f"result {i}")), TOOLS)
        keys = chain_keys(conv)
        via_chain, via_held = builder.build(conv, turns, keys), builder.build(conv, {}, keys, held[keys[-2]])
        assert via_held.ids == via_chain.ids, f"call {i + 2}: the held turn gives the chain's prompt"
        assert (via_held.parent, via_held.segment_start) == (via_chain.parent, via_chain.segment_start)
    # a branch: the harness retries from the first turn with another result
    branch = Conversation((*conv.messages[:3], Message("user", "another result")), TOOLS)
    keys = chain_keys(branch)
    assert builder.build(branch, {}, keys, held[keys[2]]).ids == builder.build(branch, turns, keys).ids
    # compaction: the history was rewritten, so no held turn is its newest assistant turn
    compacted = Conversation(
        (SYSTEM, Message("user", "summary of steps 0-2"), Message("assistant", "ok")), TOOLS
    )
    keys = chain_keys(compacted)
    assert keys[-1] not in held and not builder.build(compacted, {}, keys, None).extended
    t = builder.template
    assert builder.build(compacted, {}, keys, None).ids == t.encode(t.render(compacted.messages, TOOLS, True))


def test_a_held_turn_that_is_not_in_the_request_is_not_used(builder):
    turns: dict = {}
    a = Message("assistant", "one")
    built, out = generate(builder, Conversation((USER,)), "one", turns, message=a)
    other = Conversation((USER, Message("assistant", "two"), Message("user", "next")))
    plain = builder.build(other, {}, None, held_of(built, out, a))
    assert not plain.extended, "a turn the request does not hold is never spliced"
