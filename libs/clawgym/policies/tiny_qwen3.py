"""Builds the tiny-qwen3 policy folder: committed config + tokenizer, weights from a fixed seed.

Owns the build only (called once per cache by `clawgym.policies.resolve`); no network, ~1 s.
The weights are drawn here rather than by transformers' `_init_weights`, so that they do not
change when a transformers release changes its initialisation.
"""

import hashlib
import shutil
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "tiny-qwen3"
FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SEED = 20261129
INIT_STD = 0.02  # Qwen3's initializer_range
BUILD_VERSION = 1  # bump when the build recipe changes, so caches rebuild


def cache_key() -> str:
    """Folder name in the cache: changes whenever the committed assets or the recipe change."""
    digest = hashlib.sha256(f"{BUILD_VERSION}:{SEED}:{INIT_STD}".encode())
    for name in FILES:
        digest.update((ASSETS / name).read_bytes())
    return f"tiny-qwen3-{digest.hexdigest()[:12]}"


def init_weights(model: torch.nn.Module, seed: int = SEED, std: float = INIT_STD) -> None:
    """Norm gains = 1, every other tensor ~ N(0, std²), drawn in parameter-name order from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float32) * std)


def build(dest: Path) -> None:
    """Writes a complete HF folder (config, fp32 safetensors, tokenizer, chat template) into `dest`."""
    config = AutoConfig.from_pretrained(ASSETS)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    init_weights(model)
    model.save_pretrained(dest, safe_serialization=True)
    for name in FILES[1:]:
        shutil.copyfile(ASSETS / name, dest / name)
