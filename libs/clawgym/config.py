"""The one configuration model: `ClawgymConfig`, assembled from the section each package owns.

Sections live beside the code they configure (`clawgym.store.config`, `clawgym.proxy.config`, …)
on `clawgym.section.Section`; this module only puts them together and loads them. Nothing below
it imports it: a service receives its own section (and the few it is a client of).

Precedence, highest first (`load_config`):
    command-line flag  >  CLAWGYM_* environment  >  YAML file  >  the field's default
Environment variables name a field by its path, sections joined by `__`:
`CLAWGYM_STORE__URL=postgresql+psycopg://…`, `CLAWGYM_TRAINER__ALGORITHM__LR=1e-5`; a whole
section or a list/dict field takes JSON (`CLAWGYM_ORCHESTRATOR__SANDBOX_IMAGES='{"codex": "…"}'`).
"""

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator
from pydantic_settings import EnvSettingsSource

from clawgym.errors import InvalidArgument
from clawgym.evaluation.config import EvaluationConfig
from clawgym.inference.config import InferenceConfig
from clawgym.orchestrator.config import OrchestratorConfig
from clawgym.proxy.config import ProxyConfig
from clawgym.rpc import RpcConfig
from clawgym.sandbox.config import SandboxConfig
from clawgym.section import Section
from clawgym.store.config import StoreConfig
from clawgym.tracking.config import TrackingConfig
from clawgym.trainer.config import TrainerConfig

ENV_PREFIX = "CLAWGYM_"


class ClawgymConfig(Section):
    """Everything a clawgym process can be told (see `load_config` for where values come from)."""

    store: StoreConfig = Field(default_factory=StoreConfig, description="trajectory store and event bus")
    inference: InferenceConfig = Field(default_factory=InferenceConfig, description="policy serving engine")
    proxy: ProxyConfig = Field(default_factory=ProxyConfig, description="capturing serving proxy")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig, description="where rollouts run: local or kubernetes")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="the RL run and the trainer service")
    orchestrator: OrchestratorConfig = Field(
        default_factory=OrchestratorConfig, description="rollout orchestrator: limits, retries, proxy URL"
    )
    evaluation: EvaluationConfig = Field(
        default_factory=EvaluationConfig, description="held-out evaluation: tasks, Pass@k, how often, harnesses"
    )
    rpc: RpcConfig = Field(default_factory=RpcConfig, description="the secret gRPC calls between services carry")
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig, description="experiment trackers: TensorBoard, Weights & Biases"
    )

    @model_validator(mode="after")
    def _trainer_sees_the_sampling_temperature(self) -> "ClawgymConfig":
        """The trainer scores each call's tokens at the temperature recorded with the call; its own
        temperature is for calls recorded without one (an older proxy). A temperature the proxy
        forces on every call is that fallback too, unless the trainer's is set explicitly."""
        forced = self.proxy.temperature
        if not forced:  # None: each harness's own; 0: greedy, whose logprobs are at T = 1
            return self
        algo = self.trainer.algorithm
        if "temperature" not in algo.model_fields_set:
            algo.temperature = forced
            algo.model_fields_set.discard("temperature")  # still derived: a later dump reloads the same
        return self


def env_values(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The CLAWGYM_* variables of `environ` (default: this process's) as nested config values."""
    env = dict(os.environ if environ is None else environ)
    # pydantic-settings' own parser: it knows from the model which fields take JSON
    source = EnvSettingsSource(
        ClawgymConfig, case_sensitive=False, env_prefix=ENV_PREFIX, env_nested_delimiter="__"
    )
    source.env_vars = {k.lower(): v for k, v in env.items() if k.upper().startswith(ENV_PREFIX)}
    return source()


def merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, recursively for mappings (a list or scalar in `top` replaces)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def load_config(
    path: str | Path | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> ClawgymConfig:
    """The config of a process: defaults < YAML `path` < CLAWGYM_* env < `flags` (nested dicts, as the
    command line gives them) < keyword `overrides` (whole sections, from code). Errors name the field."""
    data: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise InvalidArgument(f"{path}: a config file must be a YAML mapping")
        data = merge(data, loaded)
    data = merge(data, env_values(environ))
    data = merge(data, flags or {})
    data.update(overrides)
    try:
        return ClawgymConfig(**data)
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'config'}: {err['msg']}" for err in e.errors())
        raise InvalidArgument(f"invalid config{f' {path}' if path else ''}: {fields}") from e
