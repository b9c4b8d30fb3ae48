"""Tool-call formats of open models: which parser reads a policy's generated text, by name.

Owns the registry (`FORMATS`, `make_parser`) and `detect_format`, which names the format a chat
template teaches, from the template's source text. One module per format family; each parser is
a `StreamParser` (`base`): fed detokenized text in any pieces, it emits text, thinking and tool
calls as soon as they are certain, and keeps malformed calls as text.

| name | models | a call |
| --- | --- | --- |
| `qwen` | Hermes, Qwen2.5, Qwen3 | `<tool_call>{"name": …, "arguments": {…}}</tool_call>` |
| `qwen3-coder` | Qwen3-Coder, Qwen3.5 | `<tool_call><function=f><parameter=p>v</parameter></function></tool_call>` |
| `llama3` | Llama 3.1–3.3 | `{"name": …, "parameters": {…}}` or `<|python_tag|>{…}` |
| `glm` | GLM-4.5, GLM-4.6 | `<tool_call>f<arg_key>p</arg_key><arg_value>v</arg_value></tool_call>` |
| `deepseek` | DeepSeek-V3, V3.1 | `<｜tool▁call▁begin｜>f<｜tool▁sep｜>{…}<｜tool▁call▁end｜>` |
| `harmony` | gpt-oss | `<|channel|>commentary to=functions.f <|constrain|>json<|message|>{…}<|call|>` |
"""

from collections.abc import Sequence

from clawgym.errors import InvalidArgument
from clawgym.protocols.conversation import Tool
from clawgym.rendering.tool_formats.base import NewId, StreamParser
from clawgym.rendering.tool_formats.deepseek import DeepSeekParser
from clawgym.rendering.tool_formats.glm import GlmParser
from clawgym.rendering.tool_formats.harmony import HarmonyParser
from clawgym.rendering.tool_formats.hermes import HermesParser
from clawgym.rendering.tool_formats.llama3 import Llama3Parser
from clawgym.rendering.tool_formats.qwen3_coder import Qwen3CoderParser

DEFAULT_FORMAT = "qwen"  # also how clawgym describes tools to a template that renders none
FORMATS: dict[str, type[StreamParser]] = {
    "qwen": HermesParser,
    "qwen3-coder": Qwen3CoderParser,
    "llama3": Llama3Parser,
    "glm": GlmParser,
    "deepseek": DeepSeekParser,
    "harmony": HarmonyParser,
}

# Marks of each format in a chat template's source, most specific first: Qwen3-Coder's and GLM's
# templates also write `<tool_call>`.
_MARKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("harmony", ("<|channel|>", "<|message|>")),
    ("deepseek", ("<｜tool▁call▁begin｜>",)),
    ("glm", ("<arg_key>",)),
    ("qwen3-coder", ("<function=",)),
    ("qwen", ("<tool_call>",)),
    ("llama3", ("<|python_tag|>",)),
    ("llama3", ("<|start_header_id|>", '"parameters": ')),
)


def detect_format(template: str) -> str | None:
    """The tool-call format a chat template's source teaches, None if it shows none."""
    for name, marks in _MARKS:
        if all(mark in template for mark in marks):
            return name
    return None


def check_format(name: str) -> str:
    """`name` if it is a known format; InvalidArgument naming the known ones otherwise."""
    if name not in FORMATS:
        raise InvalidArgument(f"unknown tool-call format {name!r}: expected one of {sorted(FORMATS)}")
    return name


def make_parser(
    name: str | None,
    new_id: NewId,
    *,
    parse_tool_calls: bool = True,
    starts_in_thinking: bool = False,
    tools: Sequence[Tool] = (),
) -> StreamParser:
    """A fresh parser of one assistant turn in format `name` (None: the default, `qwen`)."""
    parser = FORMATS[check_format(name or DEFAULT_FORMAT)]
    return parser(
        new_id, parse_tool_calls=parse_tool_calls, starts_in_thinking=starts_in_thinking, tools=tools
    )


__all__ = ["DEFAULT_FORMAT", "FORMATS", "StreamParser", "check_format", "detect_format", "make_parser"]
