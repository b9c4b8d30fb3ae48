"""clawgym.policies: the built-in policy specs build once, load offline, and tokenize/render as the proxy needs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from clawgym.errors import InvalidArgument
from clawgym.policies import load_model, load_tokenizer, policy_spec, resolve_model
from clawgym.policies.tiny_qwen3 import ASSETS

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKERS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
TOOLS = [
    {
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
]


@pytest.fixture(scope="module")
def tiny_tok():
    return load_tokenizer("tiny-qwen3")


def test_tiny_qwen3_special_and_tool_tokens_are_single_ids_that_round_trip(tiny_tok):
    """ChatML and tool/think markers must each be one token, and decoding must give the text back."""
    for token in SPECIAL + MARKERS:
        ids = tiny_tok.encode(token, add_special_tokens=False)
        assert len(ids) == 1, (
            f"{token} splits into {ids}: the template and tool parser rely on it being one token"
        )
    text = '<|im_start|>assistant\n<think>\nls first\n</think>\n\n<tool_call>\n{"name": "bash"}\n</tool_call><|im_end|>'
    ids = tiny_tok.encode(text, add_special_tokens=False)
    assert tiny_tok.decode(ids) == text, (
        "decode(encode(text)) changed the text: byte-level BPE must be lossless"
    )
    kept = tiny_tok.decode(ids, skip_special_tokens=True)
    assert "<tool_call>" in kept and "<|im_end|>" not in kept, (
        "tool markers must survive skip_special_tokens (the parser reads them) while ChatML tokens are dropped"
    )


def test_tiny_qwen3_committed_config_fits_its_tokenizer_and_long_prompts(tiny_tok):
    """The committed config must cover every token id and hold a ~20k-token harness prompt."""
    config = json.loads((ASSETS / "config.json").read_text())
    assert config["vocab_size"] == len(tiny_tok), (
        "model vocab and tokenizer disagree: ids would go out of range"
    )
    assert config["eos_token_id"] == tiny_tok.convert_tokens_to_ids("<|im_end|>"), "eos must be <|im_end|>"
    assert config["max_position_embeddings"] >= 32768, "context too short for real harness prompts"
    assert tiny_tok.pad_token == "<|endoftext|>" and tiny_tok.padding_side == "left", "pad/padding side wrong"


def test_tiny_qwen3_template_renders_tools_tool_calls_and_tool_results(tiny_tok):
    """Tools go into the system turn, tool calls render as <tool_call> JSON, results as <tool_response>."""
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "List the files."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
            ],
        },
        {"role": "tool", "content": "a.txt\nb.txt"},
    ]
    text = tiny_tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nBe brief.") and "<tools>" in system, (
        "tools not in system turn"
    )
    assert json.dumps(TOOLS[0]) in system, "the tool schema must appear as one JSON line"
    call = '<|im_start|>assistant\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'
    assert call in text, f"assistant tool call rendered wrongly:\n{text}"
    assert "<|im_start|>user\n<tool_response>\na.txt\nb.txt\n</tool_response><|im_end|>" in text, (
        "a tool result must be a <tool_response> inside a user turn"
    )
    assert text.endswith("<|im_start|>assistant\n"), "add_generation_prompt must open an assistant turn"
    no_tools = tiny_tok.apply_chat_template(messages[:2], tokenize=False)
    assert "<tools>" not in no_tools and no_tools.startswith("<|im_start|>system\nBe brief.<|im_end|>"), (
        "without tools the system turn must be the plain system message"
    )


def test_tiny_qwen3_builds_identical_weights_in_any_cache(tmp_path):
    """The random init is seeded: two fresh builds must produce the same tensors."""
    first = load_file(str(resolve_model("tiny-qwen3", cache_dir=tmp_path / "a") / "model.safetensors"))
    second = load_file(str(resolve_model("tiny-qwen3", cache_dir=tmp_path / "b") / "model.safetensors"))
    assert first.keys() == second.keys(), "two builds saved different tensor names"
    assert all(torch.equal(first[k], second[k]) for k in first), "two builds drew different weights"


def test_concurrent_first_builds_share_one_cache_folder(tmp_path):
    """Two processes resolving the same spec at once must both get the one complete folder."""
    code = "import sys; from clawgym.policies import resolve_model; print(resolve_model('tiny-qwen3', cache_dir=sys.argv[1]))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    paths = {p.communicate(timeout=300)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs), "a concurrent build failed"
    assert len(paths) == 1, f"concurrent builds returned different folders: {paths}"
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == [Path(paths.pop()).name], (
        "a temporary build folder was left behind or a second folder was built"
    )


def test_policy_specs_name_builtins_and_local_folders():
    """Built-in names carry their tool support; a local HF folder is its own spec; anything else is refused."""
    assert policy_spec("tiny-qwen3").supports_tools, "tiny-qwen3's template renders tools"
    assert not policy_spec("smollm2-135m").supports_tools, (
        "SmolLM2's template drops tools: the renderer must know"
    )
    folder = resolve_model("tiny-qwen3")
    local = policy_spec(str(folder))
    assert local.is_local and local.supports_tools and resolve_model(local) == folder, (
        "a local folder spec must resolve to itself and detect the tool template"
    )
    for spec in ("tiny-qwen3", "smollm2-135m", str(folder)):
        built = json.loads((resolve_model(spec) / "config.json").read_text())["num_hidden_layers"]
        assert policy_spec(spec).layers == built, f"{spec}: the spec's layers must be its config's"
    with pytest.raises(InvalidArgument, match="unknown model spec"):
        policy_spec("no-such-model")
    with pytest.raises(InvalidArgument, match=r"looks like a Hugging Face hub id.*--local-dir"):
        policy_spec("Qwen/Qwen3-4B")  # says how to provide weights, instead of downloading them


def test_both_builtin_models_load_with_the_hub_offline():
    """With HF_HUB_OFFLINE=1 both specs load from the cache (built here first if missing)."""
    resolve_model("smollm2-135m")
    code = (
        "from clawgym.policies import load_model, load_tokenizer\n"
        "for spec in ('tiny-qwen3', 'smollm2-135m'):\n"
        "    tok, model = load_tokenizer(spec), load_model(spec)\n"
        "    print(spec, len(tok), model.config.vocab_size)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"offline load failed:\n{out.stderr[-2000:]}"
    assert "tiny-qwen3 4105 4105" in out.stdout and "smollm2-135m 49152 49152" in out.stdout, out.stdout


@pytest.mark.slow
def test_smollm2_answers_simple_arithmetic_greedily():
    """The converted SmolLM2 is a working instruct model: greedy 'What is 2+3?' says 5."""
    tok, model = load_tokenizer("smollm2-135m"), load_model("smollm2-135m")
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, return_dict=False
    )
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)
    answer = tok.decode(out[0, len(ids) :], skip_special_tokens=True)
    assert "5" in answer, f"SmolLM2 answered {answer!r}: the GGUF conversion or the cached weights are broken"
