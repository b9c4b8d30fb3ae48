"""Building the in-process engine a config asks for: torch (CPU or one CUDA device) or vLLM (GPU).

What the inference service serves, and what `clawgym.assemble.open_engine` opens when no inference
service is named; clients of the service (one replica or several) are `open_engine`'s choice.
"""

from pathlib import Path

from clawgym.inference.config import InferenceConfig
from clawgym.inference.interface import Engine


def create_engine(cfg: InferenceConfig) -> Engine:
    """The in-process engine `cfg.engine` names, serving `cfg.model` (loads the model; may take seconds)."""
    if cfg.engine == "vllm":
        from clawgym.inference.vllm_engine import VllmEngine  # lazy: vLLM exists only on GPU machines

        return VllmEngine.from_config(cfg)
    import torch

    from clawgym.inference.torch_engine import TorchEngine

    return TorchEngine.from_spec(
        cfg.model,
        dtype=getattr(torch, cfg.dtype),
        cache_dir=Path(cfg.cache_dir).expanduser(),
        device=cfg.device,
        policy_version=cfg.policy_version,
        max_batch=cfg.max_batch,
        kv_cache_mb=cfg.kv_cache_mb,
        prefill_chunk=cfg.prefill_chunk,
        prefix_cache_tokens=cfg.prefix_cache_tokens,
        shared_prefix_tokens=cfg.shared_prefix_tokens,
        prefill_batch=cfg.prefill_batch,
        pack_weights=cfg.pack_weights,
        pack_weights_mb=cfg.pack_weights_mb,
        weight_sync=cfg.weight_sync if cfg.weight_sync in ("shared", "copy") else "files",
    )
