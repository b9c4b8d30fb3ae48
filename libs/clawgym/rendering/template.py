"""The policy's chat template applied to canonical conversations, and what the renderer must know of it.

Owns `ChatTemplate`: canonical `Message`s → the dicts `tokenizer.apply_chat_template` expects →
text → token ids. What a template does is probed once by rendering small placeholder
conversations (does it render `tools=`? assistant `tool_calls`? what closes an assistant turn?),
never by branching on a model name. A template without tool support gets the tools described in
its system prompt in the Hermes/Qwen `<tool_call>` convention, its assistants' tool calls written
out as text and tool results as `<tool_response>` user turns, so the same output parser applies.
Every string from the harness is escaped before the template sees it and the rendered text is
encoded by `ControlTokens`, so control-token strings written in content stay ordinary tokens
(`clawgym.rendering.control_tokens`). Text longer than a token budget could hold (no token is
longer than the vocabulary's longest entry) is refused before it is tokenized: a multi-megabyte
prompt costs its render, not seconds of tokenizing and its ids. It does not splice generated ids;
`clawgym.rendering.splice` does.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from clawgym.errors import InvalidArgument
from clawgym.protocols.conversation import Message, Tool
from clawgym.rendering.control_tokens import RUN_CACHE_BYTES, RUN_CACHE_SIZE, ControlTokens

MARK = "CLAWGYMSPLICEMARK7f3a"  # placeholder text located in rendered probes
_PROBE_TOOL = Tool(
    name="clawgym_probe_fn", description="probe", parameters={"type": "object", "properties": {}}
)

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call>"
)


def tool_schema(tool: Tool) -> dict[str, Any]:
    """The OpenAI-style function schema templates expect in `tools=`."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def tools_system_text(tools: Sequence[Tool]) -> str:
    """Tool descriptions for a system prompt, in the Hermes/Qwen convention."""
    lines = "".join("\n" + json.dumps(tool_schema(t), ensure_ascii=False) for t in tools)
    return TOOLS_PREAMBLE + lines + TOOLS_POSTAMBLE


def longest_token_chars(tokenizer: PreTrainedTokenizerBase) -> int:
    """Characters of the vocabulary's longest entry: no token stands for more characters of text.
    Entries are counted as spelled in the vocabulary (byte-level BPE: one symbol a byte), never
    fewer than the text they decode to."""
    return max((len(t) for t in tokenizer.get_vocab()), default=1)


def tool_call_text(name: str, arguments: Any) -> str:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return (
        f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {args}}}\n</tool_call>'
    )


@dataclass(frozen=True)
class TemplateInfo:
    """What probing the template found."""

    renders_tools: bool  # `tools=` appears in the rendered prompt
    renders_tool_calls: bool  # assistant `tool_calls` appear in the rendered prompt
    arguments_as_text: bool  # the template joins `arguments` as JSON text (DeepSeek-V3.1), not an object
    tools_header_only: bool  # tools change only the prompt's head, not how later turns render
    close_text: str  # what follows an assistant turn's content, e.g. "<|im_end|>\n"
    generation_prompt: str  # what add_generation_prompt appends, e.g. "<|im_start|>assistant\n"
    starts_in_thinking: bool  # the generation prompt opens a <think> block
    stop_token_ids: tuple[int, ...]  # tokens that end a generated turn


class ChatTemplate:
    """One tokenizer's chat template, with the probing done once at construction."""

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        supports_tools: bool | None = None,
        run_cache: int = RUN_CACHE_SIZE,
        run_cache_bytes: int = RUN_CACHE_BYTES,
        max_chars_per_token: int = 0,
    ) -> None:
        self.tokenizer = tokenizer
        self.control = ControlTokens(tokenizer, run_cache, run_cache_bytes)
        self.info = self._probe(supports_tools)
        # 0: the vocabulary's own bound, which never refuses a prompt that fits
        self.max_chars_per_token = max_chars_per_token or longest_token_chars(tokenizer)

    # --- canonical messages → template dicts ---

    def template_messages(self, messages: Sequence[Message], tools: Sequence[Tool]) -> list[dict[str, Any]]:
        """The message dicts for `apply_chat_template`, tools folded in as text where the template can't.

        Harness strings (content, thinking, tool names, ids, arguments, schemas) are escaped here;
        the tags this method adds itself (`<tool_call>`, `<tool_response>`) are structure."""
        renders_calls = self.info.renders_tool_calls
        as_text = self.info.arguments_as_text
        esc = self.control.escape
        out: list[dict[str, Any]] = []
        for m in messages:
            content = esc(m.content)
            if m.role == "assistant":
                d: dict[str, Any] = {"role": "assistant", "content": content}
                if m.thinking:
                    d["reasoning_content"] = esc(m.thinking)
                if m.tool_calls and renders_calls:
                    d["tool_calls"] = [
                        {
                            "type": "function",
                            "id": esc(c.id),
                            "function": {
                                "name": esc(c.name),
                                "arguments": esc(c.arguments if as_text else c.arguments_value()),
                            },
                        }
                        for c in m.tool_calls
                    ]
                elif m.tool_calls:
                    calls = "\n".join(
                        tool_call_text(esc(c.name), esc(c.arguments_value())) for c in m.tool_calls
                    )
                    d["content"] = f"{content}\n{calls}" if content else calls
                out.append(d)
            elif m.role == "tool" and not renders_calls:
                block = f"<tool_response>\n{content}\n</tool_response>"
                if out and out[-1].get("_tool_group"):
                    out[-1]["content"] += "\n" + block
                else:
                    out.append({"role": "user", "content": block, "_tool_group": True})
            elif m.role == "tool":
                out.append({"role": "tool", "content": content, "tool_call_id": esc(m.tool_call_id)})
            else:
                out.append({"role": m.role, "content": content})
        for d in out:
            d.pop("_tool_group", None)
        if tools and not self.info.renders_tools:
            described = tools_system_text(self._escaped_tools(tools))
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{described}"}
            else:
                out.insert(0, {"role": "system", "content": described})
        return out

    # --- rendering and encoding ---

    def render(
        self, messages: Sequence[Message], tools: Sequence[Tool], add_generation_prompt: bool = True
    ) -> str:
        """Template text of a conversation; InvalidArgument if the template rejects it."""
        dicts = self.template_messages(messages, tools)
        return self._apply(dicts, tools, add_generation_prompt)

    def _escaped_tools(self, tools: Sequence[Tool]) -> list[Tool]:
        esc = self.control.escape
        return [Tool(esc(t.name), esc(t.description), esc(t.parameters), t.namespace) for t in tools]

    def _apply(self, dicts: list[dict[str, Any]], tools: Sequence[Tool], add_generation_prompt: bool) -> str:
        passed = (
            [tool_schema(t) for t in self._escaped_tools(tools)]
            if tools and self.info.renders_tools
            else None
        )
        try:
            text = self.tokenizer.apply_chat_template(
                dicts, tools=passed, add_generation_prompt=add_generation_prompt, tokenize=False
            )
        except Exception as e:  # jinja raises TemplateError, TypeError, … for conversations it rejects
            raise InvalidArgument(f"the policy's chat template rejected the conversation: {e}") from e
        if not isinstance(text, str):
            raise InvalidArgument("the policy's chat template did not render text")
        return text

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """Token ids of text `render` made: control tokens only where the template put them; the
        template already placed any BOS, so none is added. InvalidArgument ("prompt is too long"),
        before any tokenizing, if the text has more characters than `max_tokens` tokens can hold."""
        if max_tokens is not None and len(text) > max(max_tokens, 0) * self.max_chars_per_token:
            raise InvalidArgument(
                f"prompt is too long: {len(text)} characters to tokenize, more than the {max(max_tokens, 0)} "
                f"tokens left of the policy's context can hold (a token is at most "
                f"{self.max_chars_per_token} characters)"
            )
        return self.control.encode(text, max_tokens)

    # --- probing ---

    def _probe(self, supports_tools: bool | None) -> TemplateInfo:
        user = {"role": "user", "content": "ping"}
        as_text = False
        if supports_tools is None:
            renders_tools = self._renders([user], [_PROBE_TOOL], "clawgym_probe_fn")
            call = {"type": "function", "function": {"name": "clawgym_probe_call", "arguments": {}}}
            renders_calls = self._renders(
                [user, {"role": "assistant", "content": "", "tool_calls": [call]}], [], "clawgym_probe_call"
            )
            if not renders_calls:  # a template that concatenates the arguments takes them as text
                text_call = {"type": "function", "function": {**call["function"], "arguments": "{}"}}
                as_text = self._renders(
                    [user, {"role": "assistant", "content": "", "tool_calls": [text_call]}],
                    [],
                    "clawgym_probe_call",
                )
                renders_calls = as_text
        else:
            renders_tools = renders_calls = supports_tools
        closed = self._try([user, {"role": "assistant", "content": MARK}], (), False)
        close_text = closed.split(MARK, 1)[1] if MARK in closed else ""
        bare = self._try([user], (), False)
        prompted = self._try([user], (), True)
        generation_prompt = prompted[len(bare) :] if prompted.startswith(bare) else ""
        tok = self.tokenizer
        stops = []
        # besides eos and the turn's close: the tokens that end a turn on a tool call or hand it
        # back (Llama's <|eom_id|>, gpt-oss's <|call|>, GLM's <|observation|> and <|user|>)
        ends = (
            "<|endoftext|>",
            "<|im_end|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|call|>",
            "<|observation|>",
            "<|user|>",
        )
        for token in (tok.eos_token, close_text.strip()[:32], *ends):
            token_id = tok.convert_tokens_to_ids(token) if token else None
            if isinstance(token_id, int) and token_id != tok.unk_token_id and token in tok.get_vocab():
                stops.append(token_id)
        # tools_header_only: do tools change how a turn after an assistant turn renders?
        header_only = True
        if renders_tools:
            rest = [{"role": "tool", "content": "r"}, {"role": "user", "content": "u"}]
            stub = [user, {"role": "assistant", "content": MARK}, *rest]
            with_tools = self._try(stub, (_PROBE_TOOL,), True, renders_tools)
            without = self._try(stub, (), True, renders_tools)
            header_only = with_tools.split(MARK, 1)[-1] == without.split(MARK, 1)[-1]
        return TemplateInfo(
            renders_tools=renders_tools,
            renders_tool_calls=renders_calls,
            arguments_as_text=as_text,
            tools_header_only=header_only,
            close_text=close_text,
            generation_prompt=generation_prompt,
            starts_in_thinking=generation_prompt.rstrip().endswith("<think>"),
            stop_token_ids=tuple(dict.fromkeys(stops)),
        )

    def _try(
        self, dicts: list[dict[str, Any]], tools: Sequence[Tool], gen: bool, pass_tools: bool = True
    ) -> str:
        try:
            text = self.tokenizer.apply_chat_template(
                dicts,
                tools=[tool_schema(t) for t in tools] if tools and pass_tools else None,
                add_generation_prompt=gen,
                tokenize=False,
            )
        except Exception:  # a template that rejects a probe just lacks that feature
            return ""
        return text if isinstance(text, str) else ""

    def _renders(self, dicts: list[dict[str, Any]], tools: Sequence[Tool], needle: str) -> bool:
        return needle in self._try(dicts, tools, False)
