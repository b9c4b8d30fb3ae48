"""The `inference` config section: which policy is served, by which engine, where, and how batched.

Owns the fields and their defaults; `clawgym.config.ClawgymConfig.inference` holds one. Env
variables map in as `CLAWGYM_INFERENCE__MODEL=tiny-qwen3`, `CLAWGYM_INFERENCE__CACHE_DIR=/models`.
"""

from typing import Literal

from pydantic import Field, model_validator

from clawgym.policies.specs import DEFAULT_POLICY
from clawgym.section import Section


class InferenceConfig(Section):
    """What `clawgym serve inference` serves, and how an in-process engine or a client is built."""

    model: str = Field(
        DEFAULT_POLICY, description="model spec: smollm2-135m, tiny-qwen3, or a local HF folder"
    )
    engine: Literal["torch", "vllm"] = Field(
        "torch", description="torch (in-process, CPU or one CUDA device: `device`) or vllm (GPU)"
    )
    grpc_url: str = Field(
        "",
        description="address of the inference service (host:port); several replicas may be listed "
        "comma-separated (host1:port,host2:port), each rollout then sticks to one; empty = in-process engine",
    )
    host: str = Field(
        "127.0.0.1",
        description="address `clawgym serve inference` and its /metrics listen on; deployments: 0.0.0.0",
    )
    port: int = Field(50052, description="gRPC port `clawgym serve inference` listens on")
    metrics_port: int = Field(
        9102, ge=0, description="Prometheus /metrics HTTP port of the service; 0 = none"
    )
    replica_load_timeout_s: float = Field(
        300.0,
        gt=0,
        description="several replicas: one that has not loaded a published checkpoint within this is taken "
        "out of service (the publish goes on without it; it gets the latest checkpoint when it answers again)",
    )
    replica_probe_interval_s: float = Field(
        5.0,
        ge=0,
        description="several replicas: how often each is probed (Status) for health and version; 0 = only on status()",
    )
    replica_probe_timeout_s: float = Field(
        5.0,
        gt=0,
        description="several replicas: a probe not answered within this takes the replica out of service",
    )
    checkpoint_root: str = Field(
        "",
        description="the only place LoadWeights reads checkpoints from: a local folder (no symlink or `..` "
        "out of it) or a URI prefix (s3://bucket/prefix, https://host/prefix); empty = LoadWeights refused",
    )
    cache_dir: str = Field(
        "~/.cache/clawgym/models",
        description="where built-in policies are built once and cached: by the engine, the tokenizer and the "
        "trainer of this process alike",
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="weights and compute dtype"
    )
    device: str = Field(
        "cpu",
        pattern=r"^(cpu|cuda(:[0-9]+)?)$",
        description="torch engine: where the model, its KV cache and its forwards run (cpu, cuda, cuda:N); "
        "sampling stays on the CPU. vLLM places itself",
    )
    policy_version: int = Field(0, ge=0, description="version number of the weights served at start")
    max_batch: int = Field(32, ge=1, description="requests decoded together at most (torch engine)")
    kv_cache_mb: float = Field(
        1024,
        gt=0,
        description="torch engine: memory for the running batch's keys and values (rows × the longest prompt "
        "+ generation limit among them); a request waits for room rather than grow it, and one that alone "
        "needs more is refused. SmolLM2-135M in float32 takes 45 KB a token: 1024 MB hold 32 rows of 700, "
        "or 2 rows allowed to run to its 8k context (proxy.max_new_tokens bounds the limit)",
    )
    prefill_chunk: int = Field(
        512,
        ge=1,
        description="torch engine: prompt tokens computed per loop step in all, shared between the prompts "
        "being prefilled; bounds how long a long prompt holds back running rows and newcomers",
    )
    prefill_batch: int = Field(
        32,
        ge=1,
        description="torch engine: prompts prefilled together in one forward at most (left-padded; shares "
        "of similar length go together); 1 = one forward per prompt",
    )
    pack_weights: bool | Literal["auto"] = Field(
        "auto",
        description="torch engine on CPU: float32 linear weights packed once for oneDNN (and after each "
        "reload) instead of by MKL on every call; costs a second copy of those weights in memory. auto: "
        "the layer shapes the engine measures faster packed on this CPU at start (~1.5 s for SmolLM2-135M)",
    )
    pack_weights_mb: float = Field(
        0,
        ge=0,
        description="pack_weights auto: the most memory the packed copies may take, filled with the layers "
        "whose packing saves the most time per byte first (on a 2-core AVX-512 EPYC: SmolLM2-135M's LM head, "
        "then its down projections); 0 = every layer that measured faster",
    )
    prefix_cache_tokens: int = Field(
        8192,
        ge=0,
        description="torch engine: prompt KV kept for reuse by prompts with the same prefix; 0 = off",
    )
    shared_prefix_tokens: int = Field(
        256,
        ge=0,
        description="torch engine: running rows whose prompts share at least this many first tokens (a "
        "harness's system prompt and tools) keep one copy of their KV and decode over it; 0 = off",
    )
    grpc_max_message_mb: int = Field(
        64, ge=1, le=2047, description="largest gRPC message (a 64k-token prompt is 256 kB)"
    )
    gpu_memory_utilization: float = Field(
        0.85, gt=0, le=1, description="vLLM: fraction of GPU memory it may use"
    )
    max_model_len: int = Field(0, ge=0, description="vLLM: context length; 0 = the model's")
    tensor_parallel_size: int = Field(
        1, ge=1, le=64, description="vLLM: GPUs one replica's weights are split over (tensor parallel)"
    )
    enforce_eager: bool = Field(
        False, description="vLLM: no CUDA graphs (faster start, slower decoding; for debugging)"
    )
    compile: Literal["default", "off"] = Field(
        "default",
        description="vLLM: default = vLLM's torch.compile of the model; off = none (starts in seconds, "
        "decodes slower)",
    )
    weight_sync: Literal["files", "cuda_ipc", "shared", "copy"] = Field(
        "files",
        description="how new weights reach the engine. files: it reads the checkpoint folder LoadWeights "
        "names (any node). cuda_ipc (vLLM): a trainer on the same GPU hands its tensors over as CUDA IPC "
        "handles (VllmEngine.push_weights, no copy through disk). shared (torch engine in the trainer's "
        "process, same dtype and device, no LoRA): the engine computes with the trainer's own parameters, "
        "one copy in memory, and pauses from the optimizer's step until the new version is committed. "
        "copy (torch engine in the trainer's process): at each commit it copies the trainer's "
        "parameters (LoRA merged) into its own, in its dtype (float32 training, bfloat16 serving), and "
        "decodes on through the optimizer's step. LoadWeights still reads files",
    )
    reload_reset_attempts: int = Field(
        20,
        ge=1,
        description="vLLM: tries at dropping the prefix cache after a weight swap (50 ms apart) before the "
        "reload fails and the engine reports itself dead",
    )

    @model_validator(mode="after")
    def _weight_sync_fits(self) -> "InferenceConfig":
        # CUDA IPC shares memory within one GPU; a tensor-parallel replica's workers sit on several.
        if self.weight_sync == "cuda_ipc" and self.tensor_parallel_size > 1:
            raise ValueError("inference.weight_sync=cuda_ipc needs tensor_parallel_size 1 (use files)")
        if self.weight_sync == "shared" and self.engine != "torch":
            raise ValueError(
                f"inference.weight_sync=shared is for the torch engine, not {self.engine} (use files)"
            )
        return self

    @property
    def grpc_targets(self) -> list[str]:
        """The inference replicas `grpc_url` lists ("host:port" each); [] = in-process engine."""
        return [t.strip() for t in self.grpc_url.split(",") if t.strip()]
