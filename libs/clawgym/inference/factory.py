"""Building the engine a config asks for: in-process (torch or vLLM) or a client of the inference service.

Owns the mapping InferenceConfig → Engine, so the app, the proxy and the service agree on it.
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
        policy_version=cfg.policy_version,
        max_batch=cfg.max_batch,
        max_batch_tokens=cfg.max_batch_tokens,
        prefill_chunk=cfg.prefill_chunk,
        prefix_cache_tokens=cfg.prefix_cache_tokens,
    )


def connect_engine(cfg: InferenceConfig) -> Engine:
    """A client of the inference service when `cfg.grpc_url` is set, otherwise an in-process engine."""
    if cfg.grpc_url:
        from clawgym.inference.grpc_client import GrpcEngine

        return GrpcEngine(cfg.grpc_url, max_message_mb=cfg.grpc_max_message_mb)
    return create_engine(cfg)
