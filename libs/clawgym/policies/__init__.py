"""Policy models: specs (`tiny-qwen3`, `smollm2-135m`, a local HF folder), their cache and loading.

Usage (no network; the first call per cache builds the folder, later ones load in seconds):
>>> tok = load_tokenizer("tiny-qwen3")  # HF tokenizer with the policy's chat template
>>> model = load_model("smollm2-135m")  # HF causal LM, fp32, eval mode
>>> folder = resolve_model("tiny-qwen3", cache_dir=tmp)  # ~/.cache/clawgym/models by default
>>> policy_spec("smollm2-135m").supports_tools  # False: describe tools in the system prompt
"""

from typing import Any

from clawgym.policies.specs import SMOLLM2_135M, TINY_QWEN3, PolicySpec, policy_spec

_LOADERS = ("DEFAULT_CACHE_DIR", "load_model", "load_tokenizer", "resolve_model")


def __getattr__(name: str) -> Any:
    # The loaders import torch and transformers (seconds): only when used, so that checking a spec
    # (`policy_spec`, `clawgym.preflight`) before anything loads stays quick.
    if name in _LOADERS:
        from clawgym.policies import resolve

        return getattr(resolve, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_CACHE_DIR",
    "SMOLLM2_135M",
    "TINY_QWEN3",
    "PolicySpec",
    "load_model",
    "load_tokenizer",
    "policy_spec",
    "resolve_model",
]
