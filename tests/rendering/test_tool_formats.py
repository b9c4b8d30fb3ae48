"""Tool-call formats against each model family's published chat template (tests/data/chat_templates).

A template renders an assistant turn with `tool_calls` (transformers' `apply_chat_template`, as the
proxy renders prompts); the format's parser must give those calls back, however the text is cut
into pieces. Where a template is canonical, rendering the parsed calls gives back the text the
model wrote; where it normalises, the test says how.
"""

import copy
import functools
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from pydantic import ValidationError

from clawgym.errors import InvalidArgument
from clawgym.policies import load_tokenizer, policy_spec
from clawgym.protocols.conversation import Message, TextDelta, ThinkingDelta, Tool, ToolCall, ToolCallDone
from clawgym.proxy.config import ProxyConfig
from clawgym.rendering.template import ChatTemplate
from clawgym.rendering.tool_formats import FORMATS, detect_format, make_parser

TEMPLATES = Path(__file__).parent.parent / "data" / "chat_templates"

BASH = Tool(
    "bash",
    "run a command",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "integer"},
            "env": {"type": "object"},
            "verbose": {"type": "boolean"},
        },
    },
)
WRITE = Tool(
    "write",
    "write a file",
    {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}},
)
TOOLS = (BASH, WRITE)
# quotes, a backslash, newlines, non-ASCII and an emoji: what escaping and typing get wrong
TRICKY = {"command": "printf \"a\\tb\" > 'x y'\necho naïve 日本 🦀", "timeout": 30}
SECOND = {"path": "notes/é.md", "content": 'line 1\n\n  line "3"\n'}


@dataclass(frozen=True)
class Family:
    template: str  # file in tests/data/chat_templates
    format: str
    end: str  # the token that ends the generated turn: the engine stops on it, the parser never sees it
    multi: bool  # the template renders several calls in one assistant turn
    string_arguments: bool = False  # the template expects `arguments` as JSON text, not an object


FAMILIES = {
    "qwen3": Family("qwen3.jinja", "qwen", "<|im_end|>", True),
    "qwen3-coder": Family("qwen3-coder.jinja", "qwen3-coder", "<|im_end|>", True),
    "llama3.1": Family("llama3.1.jinja", "llama3", "<|eot_id|>", False),
    "glm-4.6": Family("glm-4.6.jinja", "glm", "", True),
    "deepseek-v3.1": Family("deepseek-v3.1.jinja", "deepseek", "<｜end▁of▁sentence｜>", True, True),
    "gpt-oss": Family("gpt-oss.jinja", "harmony", "<|call|>", False),
}


@functools.cache
def tokenizer_with(template: str):
    """The tiny-qwen3 tokenizer rendering with a vendored template (the vocabulary does not matter here)."""
    tok = copy.copy(load_tokenizer("tiny-qwen3"))
    tok.chat_template = (TEMPLATES / template).read_text()
    return tok


def wire_call(name: str, args: dict, family: Family) -> dict:
    arguments = json.dumps(args, ensure_ascii=False) if family.string_arguments else args
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def render_turn(family: Family, calls: list[tuple[str, dict]], **assistant) -> str:
    """The assistant turn the template renders after a user message, as the model would have generated
    it: from the end of the generation prompt to (not including) the end-of-turn token."""
    tok = tokenizer_with(family.template)
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
        }
        for t in TOOLS
    ]
    user = [{"role": "user", "content": "go"}]
    message = {
        "role": "assistant",
        "content": "",
        **assistant,
        "tool_calls": [wire_call(n, a, family) for n, a in calls],
    }
    prompt = tok.apply_chat_template(user, tools=tools, add_generation_prompt=True, tokenize=False)
    full = tok.apply_chat_template([*user, message], tools=tools, tokenize=False)
    assert full.startswith(prompt), "the rendered turn continues the generation prompt"
    turn = full[len(prompt) :]
    return turn[: turn.rindex(family.end)] if family.end else turn


def parse(fmt: str, pieces, **kwargs):
    counter = itertools.count()
    p = make_parser(fmt, lambda: f"call_{next(counter)}", tools=TOOLS, **kwargs)
    events = [e for piece in pieces for e in p.feed(piece)] + p.finish()
    return p, events


def outcome(p) -> tuple:
    return (p.text, p.thinking, [(c.name, json.loads(c.arguments)) for c in p.tool_calls])


# --- each template teaches its format, and its rendered calls parse back ---


@pytest.mark.parametrize("name", FAMILIES)
def test_the_format_is_detected_from_the_published_template(name):
    family = FAMILIES[name]
    assert detect_format((TEMPLATES / family.template).read_text()) == family.format, name


@pytest.mark.parametrize("name", FAMILIES)
def test_a_rendered_tool_call_parses_back_to_the_same_call(name):
    family = FAMILIES[name]
    turn = render_turn(family, [("bash", TRICKY)])
    p, events = parse(family.format, [turn])
    assert [(c.name, json.loads(c.arguments)) for c in p.tool_calls] == [("bash", TRICKY)], turn
    assert p.text == "", f"nothing of the call is left as text: {p.text!r}"
    assert [type(e) for e in events if isinstance(e, ToolCallDone)] == [ToolCallDone]


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f.multi])
def test_a_rendered_turn_of_several_calls_parses_back_in_order(name):
    family = FAMILIES[name]
    turn = render_turn(family, [("bash", TRICKY), ("write", SECOND), ("bash", {"command": "ls"})])
    p, _ = parse(family.format, [turn])
    assert [(c.name, json.loads(c.arguments)) for c in p.tool_calls] == [
        ("bash", TRICKY),
        ("write", SECOND),
        ("bash", {"command": "ls"}),
    ], turn
    assert [c.id for c in p.tool_calls] == ["call_0", "call_1", "call_2"], "each call gets its own id"


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if f.format not in ("harmony", "llama3")])
def test_rendering_the_parsed_calls_gives_back_the_text_the_model_wrote(name):
    """The template is canonical for what it renders: parse, render the parsed calls, same text."""
    family = FAMILIES[name]
    written = render_turn(family, [("bash", TRICKY), ("write", SECOND)])
    p, _ = parse(family.format, [written])
    again = render_turn(family, [(c.name, json.loads(c.arguments)) for c in p.tool_calls])
    assert again == written


def test_llama_and_gpt_oss_templates_render_one_call_per_turn_and_reproduce_it():
    for name in ("llama3.1", "gpt-oss"):
        family = FAMILIES[name]
        written = render_turn(family, [("write", SECOND)])
        p, _ = parse(family.format, [written])
        assert render_turn(family, [(c.name, json.loads(c.arguments)) for c in p.tool_calls]) == written, name
    with pytest.raises(Exception, match="single tool-call"):
        render_turn(FAMILIES["llama3.1"], [("bash", TRICKY), ("write", SECOND)])


def test_templates_normalise_what_the_model_may_write_differently():
    """Where a template is not canonical, the parse is still right and re-rendering normalises:
    JSON whitespace (Qwen3, DeepSeek), harmony's header order, Qwen3-Coder's missing close tag."""
    compact = '<tool_call>\n{"name":"bash","arguments":{"timeout":5,"command":"ls"}}\n</tool_call>'
    p, _ = parse("qwen", [compact])
    again = render_turn(FAMILIES["qwen3"], [(c.name, json.loads(c.arguments)) for c in p.tool_calls])
    assert again.endswith('{"name": "bash", "arguments": {"timeout": 5, "command": "ls"}}\n</tool_call>'), (
        "key order is kept, separators become the template's"
    )
    model = '<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{"command":"ls"}'
    p, _ = parse("harmony", [model])
    again = render_turn(FAMILIES["gpt-oss"], [(c.name, json.loads(c.arguments)) for c in p.tool_calls])
    assert again == ' to=functions.bash<|channel|>commentary json<|message|>{"command": "ls"}', again
    loose = "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</function>\n</tool_call>"
    p, _ = parse("qwen3-coder", [loose])
    assert outcome(p)[2] == [("bash", {"command": "ls"})], "a missing </parameter> ends at </function>"


@pytest.mark.parametrize("name", FAMILIES)
def test_the_proxys_renderer_writes_a_parsed_call_back_into_history_as_the_model_wrote_it(name):
    """What the proxy does with a call: parse the model's text, and render it back as history on the
    next request (`ChatTemplate`, which finds by probing whether a template takes arguments as an
    object or, like DeepSeek-V3.1's, as JSON text)."""
    family = FAMILIES[name]
    template = ChatTemplate(tokenizer_with(family.template))
    assert template.info.renders_tool_calls, f"{name}: the template renders assistant tool calls"
    assert template.info.arguments_as_text == family.string_arguments
    written = render_turn(family, [("bash", TRICKY)])
    p, _ = parse(family.format, [written])
    user = Message("user", "go")
    history = [
        user,
        Message("assistant", tool_calls=(ToolCall(p.tool_calls[0].name, p.tool_calls[0].arguments, "c1"),)),
    ]
    prompt = template.render([user], TOOLS)
    rendered = template.render(history, TOOLS, add_generation_prompt=False)
    assert rendered.startswith(prompt), name
    turn = rendered[len(prompt) :]
    turn = turn[: turn.rindex(family.end)] if family.end else turn
    assert turn == written, f"{name}: the history turn is the text the model wrote"


# --- streaming: any cut gives the one-shot result ---

STREAMED = {
    "qwen3": "<think>\nLook first.\n</think>\n\nI'll list it.\n"
    + render_turn(FAMILIES["qwen3"], [("bash", TRICKY), ("write", SECOND)]).split("</think>\n\n", 1)[1],
    "qwen3-coder": "Listing.\n" + render_turn(FAMILIES["qwen3-coder"], [("bash", TRICKY), ("write", SECOND)]),
    "llama3.1": render_turn(FAMILIES["llama3.1"], [("bash", TRICKY)])
    + '; {"name": "write", "parameters": '
    + json.dumps(SECOND)
    + "}",
    "glm-4.6": "\n<think>Look first.</think>\nI'll list it."
    + render_turn(FAMILIES["glm-4.6"], [("bash", TRICKY), ("write", SECOND)]).split("</think>", 1)[1],
    "deepseek-v3.1": "I'll list it."
    + render_turn(FAMILIES["deepseek-v3.1"], [("bash", TRICKY), ("write", SECOND)]),
    "gpt-oss": "<|channel|>analysis<|message|>Look first.<|end|><|start|>assistant<|channel|>commentary<|message|>I'll list it.<|end|>"
    + "<|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>"
    + json.dumps(TRICKY, ensure_ascii=False)
    + "<|call|><|start|>assistant<|channel|>commentary to=functions.write <|constrain|>json<|message|>"
    + json.dumps(SECOND, ensure_ascii=False),
}
EXPECTED_TEXT = {"qwen3-coder": "Listing.", "llama3.1": ""}


@pytest.mark.parametrize("name", FAMILIES)
def test_every_split_point_and_char_by_char_give_the_one_shot_result(name):
    family, turn = FAMILIES[name], STREAMED[name]
    whole, events = parse(family.format, [turn])
    expected_text = EXPECTED_TEXT.get(name, "I'll list it.")
    assert outcome(whole) == (
        expected_text,
        "" if name in ("qwen3-coder", "llama3.1", "deepseek-v3.1") else "Look first.",
        [("bash", TRICKY), ("write", SECOND)],
    ), turn
    for cut in range(1, len(turn)):
        p, _ = parse(family.format, [turn[:cut], turn[cut:]])
        assert outcome(p) == outcome(whole), f"split at {cut}: {turn[:cut]!r} | {turn[cut:]!r}"
    p, events = parse(family.format, list(turn))
    assert outcome(p) == outcome(whole), "char by char"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == p.text, "text deltas add up"
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == p.thinking


@pytest.mark.parametrize("name", FAMILIES)
def test_a_call_is_emitted_the_moment_it_is_complete(name):
    """Fed up to the end of the first call, the parser has emitted it (the turn is not over)."""
    family, turn = FAMILIES[name], STREAMED[name]
    marks = {"qwen": "</tool_call>", "qwen3-coder": "</tool_call>", "glm": "</tool_call>"}
    marks.update(deepseek="<｜tool▁call▁end｜>", harmony="<|call|>", llama3="};")
    mark = marks[family.format]
    head = turn[: turn.index(mark) + len(mark) - (1 if mark == "};" else 0)]
    p = make_parser(family.format, lambda: "id", tools=TOOLS)
    events = p.feed(head)
    assert [e.call.name for e in events if isinstance(e, ToolCallDone)] == ["bash"], head


def test_text_streams_and_is_held_only_while_it_could_be_a_tag():
    p = make_parser("qwen3-coder", lambda: "id", tools=TOOLS)
    assert p.feed("Checking <tool") == [TextDelta("Checking")]
    assert p.feed("s now") == [TextDelta(" <tools now")], "released once it cannot be a tag"
    p = make_parser("harmony", lambda: "id")
    p.feed("<|channel|>final<|message|>Hello wor")
    assert p.text == "Hello wor", "a final message streams before its end"
    p = make_parser("llama3", lambda: "id")
    assert p.feed("The set {1, 2} has") == [TextDelta("The set {1, 2} has")], "braces mid-prose are text"
    p = make_parser("deepseek", lambda: "id")
    assert p.feed("ok <｜tool▁") == [TextDelta("ok")]


# --- thinking ---


def test_thinking_is_separated_where_the_format_has_it():
    p, _ = parse("deepseek", ["plan it</think>done"], starts_in_thinking=True)
    assert (p.thinking, p.text) == ("plan it", "done"), (
        "DeepSeek-V3.1 thinking mode opens <think> in the prompt"
    )
    turn = render_turn(FAMILIES["gpt-oss"], [("bash", {"command": "ls"})], thinking="I should list.")
    p, _ = parse("harmony", [turn])
    assert outcome(p) == ("", "I should list.", [("bash", {"command": "ls"})]), turn
    p, _ = parse(
        "harmony",
        [
            "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>c<|return|>"
        ],
    )
    assert (p.thinking, p.text) == ("a\n\nb", "c")
    p, _ = parse("glm", ["\n<think></think>\nJust text."])
    assert (p.thinking, p.text) == ("", "Just text."), "GLM's empty think block is no thinking"


# --- typing by the tool's schema (Qwen3-Coder, GLM) ---


def test_parameter_values_are_typed_by_the_tools_schema():
    body = (
        "<tool_call>\n<function=bash>\n<parameter=command>\n007\n</parameter>\n<parameter=timeout>\n12\n</parameter>\n"
        "<parameter=env>\n{'A': 'b'}\n</parameter>\n<parameter=verbose>\nTrue\n</parameter>\n"
        "<parameter=extra>\n[1]\n</parameter>\n</function>\n</tool_call>"
    )
    p, _ = parse("qwen3-coder", [body])
    assert json.loads(p.tool_calls[0].arguments) == {
        "command": "007",
        "timeout": 12,
        "env": {"A": "b"},
        "verbose": True,
        "extra": "[1]",
    }, "string stays text, integer/object/boolean are read, an undeclared parameter stays text (Qwen's rule)"
    p, _ = parse(
        "glm",
        [
            "<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>42</arg_value>\n<arg_key>timeout</arg_key>\n<arg_value>x</arg_value>\n<arg_key>extra</arg_key>\n<arg_value>[1]</arg_value>\n</tool_call>"
        ],
    )
    assert json.loads(p.tool_calls[0].arguments) == {"command": "42", "timeout": "x", "extra": [1]}, (
        "GLM: a string parameter stays text, a value that is not its type stays text, undeclared JSON is read"
    )


# --- malformed output is text, never an exception ---

MALFORMED = {
    "qwen": ['<tool_call>{"name": "bash", "arguments": {oops}}</tool_call>', '<tool_call>{"name": "bash"'],
    "qwen3-coder": [
        "<tool_call>\n<parameter=command>\nls\n</parameter>\n</tool_call>",
        "<tool_call>\n<function=bash>\nstray text\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>",
        "<tool_call>\n<function=bash>\n<parameter=command>\nls",
    ],
    "llama3": [
        '{"name": "bash", "parameters": [1]}',
        '{"name": "bash", "parameters": {"command": "l',
        '<|python_tag|>{"oops"}',
    ],
    "glm": [
        "<tool_call>\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n</tool_call>",
        "<tool_call>bash\n<arg_key>command</arg_key>\nls\n</tool_call>",
    ],
    "deepseek": [
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{not json}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>bash{}<｜tool▁call▁end｜>",
    ],
    "harmony": [
        "<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{oops}<|call|>",
        "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{}<|call|>",
        "Plain text, no harmony at all.",
    ],
}


@pytest.mark.parametrize("fmt", MALFORMED)
def test_malformed_calls_are_kept_as_text_and_give_no_call(fmt):
    for text in MALFORMED[fmt]:
        p, events = parse(fmt, [text])
        assert p.tool_calls == [], f"{fmt}: no call from {text!r}"
        assert not any(isinstance(e, ToolCallDone) for e in events)
        core = (
            text.replace("<|call|>", "")
            .replace("<｜tool▁calls▁begin｜>", "")
            .replace("<｜tool▁calls▁end｜>", "")
        )
        assert p.text == core.strip(), f"{fmt}: the model's text is kept: {p.text!r}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_call_is_parsed_when_the_request_has_no_tools(fmt):
    text = STREAMED[next(n for n, f in FAMILIES.items() if f.format == fmt)]
    p, _ = parse(fmt, [text], parse_tool_calls=False)
    assert p.tool_calls == [], fmt


# --- choosing a format ---


def test_a_local_folder_gets_the_format_its_template_teaches(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "chat_template.jinja").write_text((TEMPLATES / "qwen3-coder.jinja").read_text())
    assert policy_spec(tmp_path).tool_call_format == "qwen3-coder"
    assert policy_spec("tiny-qwen3").tool_call_format == "qwen"


def test_unknown_formats_are_refused_by_name():
    with pytest.raises(InvalidArgument, match="qwen3-coder"):
        make_parser("qwen4", lambda: "id")
    with pytest.raises(ValidationError, match="unknown tool-call format"):
        ProxyConfig(tool_call_format="qwen4")
    assert ProxyConfig(tool_call_format="glm").tool_call_format == "glm"
