"""Resolves a model spec to a local HF folder (building it once into a cache) and loads it.

Owns the model cache: `<cache_dir>/<key>/` is built once under a file lock, into a temporary
folder renamed into place, so concurrent processes neither race nor see half a folder. Local
folder specs are used where they are. Never touches the network.
"""

import os
import shutil
import tempfile
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from clawgym.errors import FailedPrecondition
from clawgym.policies import smollm2, tiny_qwen3
from clawgym.policies.specs import SMOLLM2_135M, TINY_QWEN3, PolicySpec, policy_spec

DEFAULT_CACHE_DIR = Path("~/.cache/clawgym/models")
BUILDERS = {TINY_QWEN3: tiny_qwen3, SMOLLM2_135M: smollm2}


def resolve_model(spec: "str | Path | PolicySpec", cache_dir: "str | Path | None" = None) -> Path:
    """The local HF folder for `spec`, building it into `cache_dir` (default ~/.cache/clawgym/models) once."""
    policy = policy_spec(spec)
    if policy.is_local:
        return Path(policy.name)
    builder = BUILDERS[policy.name]
    root = Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser()
    final = root / builder.cache_key()
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f".{final.name}.lock")):
        if (final / "config.json").is_file():  # another process built it while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            builder.build(tmp)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def load_tokenizer(
    spec: "str | Path | PolicySpec", cache_dir: "str | Path | None" = None
) -> PreTrainedTokenizerBase:
    """The policy's HF tokenizer (left padding, pad = <|endoftext|> for the built-in specs)."""
    return AutoTokenizer.from_pretrained(resolve_model(spec, cache_dir))


def load_model(
    spec: "str | Path | PolicySpec",
    dtype: torch.dtype = torch.float32,
    cache_dir: "str | Path | None" = None,
    strict: bool = False,
    device: "str | torch.device" = "cpu",
) -> PreTrainedModel:
    """The policy as an HF causal LM in `dtype`, on `device` (CPU by default), in eval mode. `strict`:
    the folder must hold exactly the model's tensors (FailedPrecondition naming the others), where HF
    would initialise a missing one at random with a warning (what a checkpoint must never silently do)."""
    folder = resolve_model(spec, cache_dir)
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, output_loading_info=True)
    if strict:
        kinds = ("missing_keys", "unexpected_keys", "mismatched_keys")
        wrong = {k: sorted(map(str, info.get(k) or [])) for k in kinds}
        if any(wrong.values()):
            listed = "; ".join(f"{k.replace('_', ' ')}: {', '.join(v[:3])}{'…' if len(v) > 3 else ''}"
                               for k, v in wrong.items() if v)  # fmt: skip
            raise FailedPrecondition(f"{folder} does not hold the model's tensors ({listed})")
    return model.to(device).eval()
