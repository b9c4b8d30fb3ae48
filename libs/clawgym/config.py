"""The one configuration model: `ClawgymConfig`, made of one small section per service.

Each service receives only its own section. Sections live beside the code they configure
(`clawgym.store.config`, …) and are assembled here. Environment variables map into the same
model under one prefix: `CLAWGYM_STORE__URL=postgresql+psycopg://…`.
"""

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from clawgym.errors import InvalidArgument
from clawgym.evaluation.config import EvaluationConfig
from clawgym.inference.config import InferenceConfig
from clawgym.orchestrator.config import OrchestratorConfig
from clawgym.proxy.config import ProxyConfig
from clawgym.sandbox.config import SandboxConfig
from clawgym.trainer.config import TrainerConfig


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, so typos fail at start."""

    model_config = ConfigDict(extra="forbid")


class StoreConfig(Section):
    url: str = Field("sqlite:///clawgym.db", description="SQLAlchemy URL: postgresql+psycopg://… or sqlite:///path")
    bus_url: str = Field("memory://", description="event bus: redis://host:port/db, or memory:// (embedded)")
    grpc_url: str = Field("", description="address of the store service (host:port); empty = in-process store")
    port: int = Field(50051, description="port `clawgym serve store` listens on")
    metrics_port: int = Field(9101, ge=0, description="the store service's Prometheus /metrics port; 0 = none")
    max_call_mb: int = Field(64, ge=1, description="largest call (packed arrays + JSON) the store accepts, in MiB")
    pool_size: int = Field(16, ge=1, description="database connections per store process (one per concurrent writer)")
    grpc_max_message_mb: int = Field(
        1024, ge=1, le=2047, description="largest gRPC message of the store service and client (a whole group), in MiB"
    )


class ClawgymConfig(BaseSettings):
    """Everything a clawgym process can be told. Loaded from YAML, then overridden by CLAWGYM_* env."""

    model_config = SettingsConfigDict(env_prefix="CLAWGYM_", env_nested_delimiter="__", extra="forbid")

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


def load_config(path: str | Path | None = None, **overrides: Any) -> ClawgymConfig:
    """Reads a YAML config (if given), applies env and keyword overrides; errors name the field."""
    data: dict[str, Any] = {}
    if path is not None:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise InvalidArgument(f"{path}: a config file must be a YAML mapping")
        data.update(loaded)
    data.update(overrides)
    try:
        return ClawgymConfig(**data)
    except ValidationError as e:
        fields = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'config'}: {err['msg']}" for err in e.errors())
        raise InvalidArgument(f"invalid config{f' {path}' if path else ''}: {fields}") from e
