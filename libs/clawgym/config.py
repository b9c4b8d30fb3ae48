"""The one configuration model: `ClawgymConfig`, assembled from the section each package owns.

Sections live beside the code they configure (`clawgym.store.config`, `clawgym.proxy.config`, …)
on `clawgym.section.Section`; this module only puts them together and loads them. Nothing below
it imports it: a service receives its own section (and the few it is a client of).

Precedence, highest first (`load_config`):
    --set KEY=VALUE  >  command-line flag  >  CLAWGYM_* environment  >  YAML file  >  the field's default
Environment variables name a field by its path, sections joined by `__`:
`CLAWGYM_STORE__URL=postgresql+psycopg://…`, `CLAWGYM_TRAINER__ALGORITHM__LR=1e-5`; a whole
section or a list/dict field takes JSON (`CLAWGYM_ORCHESTRATOR__SANDBOX_IMAGES='{"codex": "…"}'`).
`--set trainer.algorithm.lr=1e-5` names it by its dotted path (a YAML scalar, JSON for lists and
dicts). An unknown key from any source is an error naming the nearest valid one (`clawgym.config_keys`).
"""

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, ValidationError, model_validator
from pydantic_settings import EnvSettingsSource, SettingsError

from clawgym.config_keys import annotation_at, unknown_key, unwrap
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
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig, description="where rollouts run: local or kubernetes"
    )
    trainer: TrainerConfig = Field(
        default_factory=TrainerConfig, description="the RL run and the trainer service"
    )
    orchestrator: OrchestratorConfig = Field(
        default_factory=OrchestratorConfig, description="rollout orchestrator: limits, retries, proxy URL"
    )
    evaluation: EvaluationConfig = Field(
        default_factory=EvaluationConfig,
        description="held-out evaluation: tasks, Pass@k, how often, harnesses",
    )
    rpc: RpcConfig = Field(
        default_factory=RpcConfig, description="the secret gRPC calls between services carry"
    )
    tracking: TrackingConfig = Field(
        default_factory=TrackingConfig, description="experiment trackers: TensorBoard, Weights & Biases"
    )

    @model_validator(mode="after")
    def _replies_leave_room_for_the_prompt(self) -> "ClawgymConfig":
        context, reply = self.inference.max_model_len, self.proxy.max_new_tokens
        if context and reply >= context:
            raise ValueError(
                f"proxy.max_new_tokens ({reply}) leaves no room for a prompt in inference.max_model_len "
                f"({context}); a harness's first prompt alone can be 12-18k tokens (Claude Code, Qwen Code: bench/harness_prompts.py)"
            )
        return self

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


@dataclass(frozen=True)
class Layer:
    """What one source gives: `source` names it as `clawgym config show` does (the YAML file's path, a
    CLAWGYM_* variable, "flag", "--set"); `values` are nested as the config is."""

    source: str
    values: dict[str, Any]


def env_name(dotted: str) -> str:
    """The CLAWGYM_* variable of a dotted path: trainer.algorithm.lr → CLAWGYM_TRAINER__ALGORITHM__LR."""
    return ENV_PREFIX + "__".join(dotted.upper().split("."))


def env_layers(environ: Mapping[str, str] | None = None) -> list[Layer]:
    """One layer per config variable of `environ`, whole sections before their fields (the more
    specific wins). A config variable is CLAWGYM_<SECTION> or any CLAWGYM_ name with `__` in it;
    other CLAWGYM_ names (CLAWGYM_DB_PASSWORD of compose, …) are not config and left alone."""
    env = os.environ if environ is None else environ
    names = [k for k in env if k.upper().startswith(ENV_PREFIX) and _is_config_variable(k[len(ENV_PREFIX) :])]
    layers = []
    # pydantic-settings' own parser: it knows from the model which fields take JSON (built once: it
    # reads the whole model; each variable is parsed alone, as its own layer)
    source = EnvSettingsSource(
        ClawgymConfig, case_sensitive=False, env_prefix=ENV_PREFIX, env_nested_delimiter="__"
    )
    for name in sorted(names, key=lambda k: k.count("__")):
        path = name[len(ENV_PREFIX) :].lower().split("__")
        _check_keys(_nested(path, env[name]), name)
        source.env_vars = {name.lower(): env[name]}
        try:
            values = source()
        except SettingsError:  # a list, dict or section that is not JSON
            raise InvalidArgument(
                f"{name}: not JSON, which {'.'.join(path)} takes"
            ) from None  # nor its value: a secret?
        layers.append(Layer(name, _check_keys(values, name)))
    return layers


def _is_config_variable(rest: str) -> bool:
    return "__" in rest or rest.lower() in ClawgymConfig.model_fields


def _check_keys(values: dict[str, Any], source: str) -> dict[str, Any]:
    """`values`, unless a key in them is no config field: then InvalidArgument naming it and the
    nearest valid path, spelt as `source` spells keys."""
    found = unknown_key(ClawgymConfig, values)
    if found is None:
        return values
    key, near = found
    as_env = source.upper().startswith(ENV_PREFIX)
    hint = f": did you mean {near}{f' ({env_name(near)})' if as_env else ''}?" if near else ""
    raise InvalidArgument(
        f"{source}: unknown config key {key}{hint} (`clawgym config schema` lists every key)"
    )


def parse_sets(sets: Sequence[str], source: str = "--set") -> dict[str, Any]:
    """`--set KEY=VALUE` items as nested config values. KEY is a dotted path (`-` may stand for `_`);
    VALUE a YAML scalar or JSON (`trainer.steps=3`, `trainer.harnesses=[{"name": "reference"}]`),
    kept as text where the field takes text (`trainer.run_name=2024`). Secrets are refused: a
    command line shows in the process list."""
    out: dict[str, Any] = {}
    for item in sets:
        key, eq, text = item.partition("=")
        dotted = key.strip().replace("-", "_")
        if not eq or not dotted:
            raise InvalidArgument(f"{source} {item!r}: give KEY=VALUE, e.g. {source} trainer.steps=3")
        parts = dotted.split(".")
        _check_keys(_nested(parts, None), source)
        annotation = annotation_at(ClawgymConfig, parts)
        if unwrap(annotation) is SecretStr:
            raise InvalidArgument(
                f"{source} {dotted}: a secret is not taken on a command line (the process list shows it); "
                f"set {env_name(dotted)}"
            )
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise InvalidArgument(f"{source} {dotted}: {text!r} is not a YAML or JSON value ({e})") from None
        if _takes_text(annotation) and not isinstance(value, str):
            value = text  # `run_name=2024`, `split=no`: the text as typed
        out = merge(out, _check_keys(_nested(parts, value), source))  # keys inside a JSON value too
    return out


def _nested(parts: Sequence[str], value: Any) -> dict[str, Any]:
    """["a", "b"], v → {"a": {"b": v}}."""
    return reduce(lambda inner, key: {key: inner}, reversed(parts), value)


def _takes_text(annotation: Any) -> bool:
    """Whether a field holds text only (str, a Literal of strings): its --set value stays as typed."""
    annotation = unwrap(annotation)
    if getattr(annotation, "__origin__", None) is Literal:
        return all(isinstance(a, str) for a in annotation.__args__)
    return annotation is str


def merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, recursively for mappings (a list or scalar in `top` replaces)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def config_layers(
    path: str | Path | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> list[Layer]:
    """What each source gives, lowest first: the YAML `path`, each CLAWGYM_* variable, `flags` (nested
    dicts, as the command line gives them), `sets` ("a.b=c" items); every key checked."""
    layers = []
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text()) or {}
        except OSError as e:
            raise InvalidArgument(f"{path}: cannot read the config file: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise InvalidArgument(f"{path}: not YAML: {' '.join(str(e).split())}") from None
        if not isinstance(loaded, dict):
            raise InvalidArgument(f"{path}: a config file must be a YAML mapping")
        layers.append(Layer(str(path), _check_keys(loaded, str(path))))
    layers += env_layers(environ)
    if flags:
        layers.append(Layer("flag", _check_keys(dict(flags), "flag")))
    if sets:
        layers.append(Layer("--set", parse_sets(sets)))
    return layers


def load_config(
    path: str | Path | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    sets: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> ClawgymConfig:
    """The config of a process: defaults < YAML `path` < CLAWGYM_* env < `flags` (nested dicts, as the
    command line gives them) < `sets` (`--set a.b=c` items) < keyword `overrides` (whole sections, from
    code). Errors name the field; an unknown key names the nearest valid one."""
    layers = config_layers(path, flags=flags, sets=sets, environ=environ)
    return build_config(layers, path, **overrides)


def build_config(layers: Sequence[Layer], path: str | Path | None = None, **overrides: Any) -> ClawgymConfig:
    """`layers` merged in order (then `overrides`) and validated; `path` names the file in errors."""
    data = reduce(merge, (layer.values for layer in layers), {})
    data.update(overrides)
    try:
        return ClawgymConfig(**data)
    except ValidationError as e:
        fields = "; ".join(
            f"{'.'.join(map(str, err['loc'])) or 'config'}: {err['msg']}" for err in e.errors()
        )
        raise InvalidArgument(f"invalid config{f' {path}' if path else ''}: {fields}") from e


def with_sets(cfg: ClawgymConfig, sets: Sequence[str]) -> ClawgymConfig:
    """`cfg` (built by code, as the quickstart's) with `--set` items over it, validated again."""
    if not sets:
        return cfg
    data = cfg.model_dump(exclude_unset=True)
    if secret := cfg.rpc.secret.get_secret_value():  # excluded from dumps
        data = merge(data, {"rpc": {"secret": secret}})
    return build_config([Layer("config", data), Layer("--set", parse_sets(sets))])
