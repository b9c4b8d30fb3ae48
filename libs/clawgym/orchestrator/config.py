"""The `orchestrator` config section (`ClawgymConfig.orchestrator`, env `CLAWGYM_ORCHESTRATOR__…`).

Owns what the orchestrator service is told: where it listens, where harnesses reach the proxy,
concurrency limits, retries, and what the Helm chart sets per harness and sandbox (images, labels,
resources). The sandbox backend itself (which one, its namespace, hostNetwork) is the `sandbox`
section's alone.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from clawgym.errors import InvalidArgument
from clawgym.harnesses.config import HarnessSettings
from clawgym.judge.config import JudgeConfig
from clawgym.sandbox.interface import Resources
from clawgym.section import Section

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)$")
_MEMORY_MB = {"": 1 / 2**20, "k": 1e3 / 2**20, "M": 1e6 / 2**20, "G": 1e9 / 2**20, "T": 1e12 / 2**20,
              "Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0, "Ti": 1024.0**2}  # fmt: skip


class OrchestratorConfig(Section):
    """What `clawgym serve orchestrator` runs and how; the sandbox backend's own knobs are `sandbox`."""

    grpc_url: str = Field(
        "", description="address of the orchestrator service (host:port); empty = in-process"
    )
    host: str = Field(
        "127.0.0.1",
        description="address `clawgym serve orchestrator` and its /metrics listen on; deployments: 0.0.0.0",
    )
    port: int = Field(50053, ge=0, description="gRPC port (0 = any free port)")
    metrics_port: int = Field(9103, ge=0, description="Prometheus /metrics port; 0 = no metrics endpoint")
    proxy_url: str = Field(
        "http://127.0.0.1:8080",
        description="the proxy's root URL as harnesses inside sandboxes see it; a batch may name another",
    )
    model: str = Field(
        "clawgym-policy",
        description="model name harnesses are told to ask for (a name no harness knows, so none "
        "switches to a vendor dialect; the proxy serves whatever name it is asked for)",
    )
    max_concurrent_rollouts: int = Field(8, ge=1, description="rollouts running at once, all harnesses")
    harness_concurrency: dict[str, int] = Field(
        default_factory=dict, description="per-harness cap on rollouts running at once (harness → n)"
    )
    max_attempts: int = Field(
        3,
        ge=1,
        description="registrations per requested rollout: an infrastructure failure is retried "
        "with a fresh rollout until this many attempts have failed",
    )
    retry_backoff_s: float = Field(1.0, ge=0, description="pause before a retry (doubles per attempt)")
    lease_s: float = Field(
        30.0,
        gt=0,
        description="this orchestrator renews its lease in the store every lease_s/3; one silent for lease_s is "
        "lost, and a live one fails its unended rollouts (infrastructure failures) so their groups complete",
    )
    proxy_check_timeout_s: float = Field(
        5.0,
        gt=0,
        description="GET <proxy>/healthz before a model-calling harness starts; longer = unreachable",
    )
    proxy_wait_s: float = Field(
        60.0,
        ge=0,
        description="how long an attempt keeps asking a proxy that is down or not ready (starting, "
        "restarting, its engine reloading) before it fails as a proxy infrastructure failure; "
        "no sandbox exists yet while it waits",
    )
    harness_timeout_s: float = Field(
        0.0, ge=0, description="wall-clock cap per harness run; 0 = the adapter's"
    )
    harness_settings: dict[str, HarnessSettings] = Field(
        default_factory=dict,
        description="per harness name: turn cap, reply length, time cap, mode of the adapters this "
        "orchestrator builds (unset: the adapter's defaults), e.g. {reference: {max_turns: 1, "
        "max_tokens: 40}}; in the run config, so train, eval and rollout drive a harness alike",
    )
    install_harnesses: bool = Field(
        True,
        description="local backend: install a missing harness CLI from its registry on first use "
        "(else that rollout fails with failure kind `install`)",
    )
    harness_cache_dir: str = Field(
        "", description="where harness CLIs are installed; empty = ~/.cache/clawgym/harnesses"
    )
    suites_dir: str = Field(
        "", description="where imported task suites live; empty = ~/.local/share/clawgym/suites"
    )
    # --- per harness and sandbox (set by the Helm chart) ---
    sandbox_images: dict[str, str] = Field(
        default_factory=dict, description="kubernetes: image per harness name (else sandbox.kubernetes.image)"
    )
    sandbox_labels: dict[str, str] = Field(
        default_factory=dict,
        description="labels put on every sandbox (the chart's NetworkPolicy selects them)",
    )
    judge: JudgeConfig = Field(
        default_factory=JudgeConfig,
        description="the LLM judge of hybrid tasks' rubrics (any OpenAI-compatible endpoint); "
        "without a base_url hybrid tasks are scored by their code checks alone",
    )
    sandbox_resources: dict[str, dict[str, str | int | float]] = Field(
        default_factory=dict,
        description="Kubernetes-style {limits: {cpu, memory}, requests: {...}}: limits become each "
        "sandbox's Resources (requests follow sandbox.kubernetes.request_fraction)",
    )

    @field_validator("harness_settings")
    @classmethod
    def _known_harnesses_and_options(cls, settings: dict[str, HarnessSettings]) -> dict[str, HarnessSettings]:
        """Keys become canonical harness names (aliases allowed); a setting the harness cannot take
        (e.g. max_tokens for claude-code) is an error at load, not at the first rollout."""
        from clawgym.harnesses.registry import harness_class

        out: dict[str, HarnessSettings] = {}
        for name, s in settings.items():
            try:
                adapter = harness_class(name)
            except Exception as e:
                raise ValueError(str(e)) from None
            if unknown := sorted(set(s.options()) - set(adapter.options)):
                raise ValueError(f"harness {adapter.name} takes no {', '.join(unknown)}")
            out[adapter.name] = s
        return out

    def resources(self) -> Resources:
        """The per-sandbox limits `sandbox_resources` names (defaults where it names none)."""
        limits = self.sandbox_resources.get("limits", {})
        base = Resources()
        cpus = parse_cpu(limits["cpu"]) if "cpu" in limits else base.cpus
        memory = parse_memory_mb(limits["memory"]) if "memory" in limits else base.memory_mb
        return Resources(cpus=cpus, memory_mb=memory, processes=base.processes, open_files=base.open_files)


def parse_cpu(value: str | int | float) -> float:
    """A Kubernetes CPU quantity ("2", "500m", 1.5) in cores; InvalidArgument otherwise."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in ("", "m"):
        raise InvalidArgument(f"sandbox_resources: {value!r} is not a CPU quantity (e.g. 2, 500m)")
    cores = float(match.group(1)) / (1000 if match.group(2) == "m" else 1)
    if cores <= 0:
        raise InvalidArgument(f"sandbox_resources: cpu {value!r} must be > 0")
    return cores


def parse_memory_mb(value: str | int | float) -> int:
    """A Kubernetes memory quantity ("4Gi", "512Mi", "1G", bytes) in MiB; InvalidArgument otherwise."""
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _MEMORY_MB:
        raise InvalidArgument(f"sandbox_resources: {value!r} is not a memory quantity (e.g. 4Gi, 512Mi)")
    mb = int(float(match.group(1)) * _MEMORY_MB[match.group(2)])
    if mb <= 0:
        raise InvalidArgument(f"sandbox_resources: memory {value!r} is below 1 MiB")
    return mb
