"""Sandboxes: where a rollout's harness and verifier run. The interface, and a factory by config.

`make_sandbox_backend(cfg)` returns the backend `cfg.backend` names; see `interface` for the
contract, `local`, `kubernetes` and `docker` for what each backend guarantees.
"""

from clawgym.sandbox.config import (
    DockerSandboxConfig,
    KubernetesSandboxConfig,
    LocalSandboxConfig,
    SandboxConfig,
)
from clawgym.sandbox.interface import (
    ExecResult,
    ImageBuild,
    Resources,
    Sandbox,
    SandboxBackend,
    SandboxFailed,
    SandboxSpec,
)

__all__ = [
    "DockerSandboxConfig",
    "ExecResult",
    "ImageBuild",
    "KubernetesSandboxConfig",
    "LocalSandboxConfig",
    "Resources",
    "Sandbox",
    "SandboxBackend",
    "SandboxConfig",
    "SandboxFailed",
    "SandboxSpec",
    "make_sandbox_backend",
]


def make_sandbox_backend(cfg: SandboxConfig) -> SandboxBackend:
    """The backend `cfg.backend` names, built from its section (kubernetes is imported only if used)."""
    if cfg.backend == "kubernetes":
        from clawgym.sandbox.kubernetes import KubernetesBackend

        return KubernetesBackend(cfg)
    if cfg.backend == "docker":
        from clawgym.sandbox.docker import DockerBackend

        return DockerBackend(cfg)
    from clawgym.sandbox.local import LocalBackend

    return LocalBackend(cfg)
