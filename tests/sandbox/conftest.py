"""Fixtures for sandbox tests: local backends in throwaway roots, and the real local Kubernetes cluster.

`k8s_cluster` is session-scoped and reusable by any test directory that imports it (the
orchestrator's end-to-end test does): it brings up k8s-local (building its binaries once per
machine, cached outside the repo), yields a `K8sCluster`, and tears the cluster down at the end.
"""

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clawgym.sandbox import LocalSandboxConfig, SandboxConfig
from clawgym.sandbox.local import LocalBackend
from tests.engines import require_engine

REPO = Path(__file__).resolve().parents[2]
K8S_UP = REPO / "tests" / "k8s_cluster.sh"


@pytest.fixture
def sandbox_root() -> Iterator[Path]:
    """A fresh root for sandbox storage, traversable by sandbox uids (like the default /tmp one)."""
    root = Path(tempfile.mkdtemp(prefix="clawgym-sbx-test-"))
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def make_local(sandbox_root: Path) -> Callable[..., LocalBackend]:
    """Builds local backends rooted in `sandbox_root`; bubblewrap is required unless told otherwise."""

    def make(
        isolation: str = "bwrap",
        owner: str = "test-owner",
        ro_paths: list[str] | None = None,
        caps: str = "auto",
        **cfg,
    ) -> LocalBackend:
        local = LocalSandboxConfig(
            root_dir=str(sandbox_root),
            isolation=isolation,
            ro_paths=ro_paths or [],
            caps=caps,
            allow_unisolated=isolation == "none",  # a test asking for none means it
        )
        return LocalBackend(SandboxConfig(owner=owner, local=local, **cfg))

    return make


# --- the local Kubernetes cluster ---


@dataclass(frozen=True)
class K8sCluster:
    kubeconfig: str
    namespace: str
    image: str
    bring_up_s: float


def _k8s_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "k8s-local needs root"
    try:
        os_release = Path("/etc/os-release").read_text()
    except OSError:
        return "no /etc/os-release"
    if "ID=debian" not in os_release:
        return "k8s-local needs Debian"
    return None


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[K8sCluster]:
    """A running single-node Kubernetes 1.20 on 127.0.0.1 with the python3+node image imported.

    Runs `tests/k8s_cluster.sh up <pid>` (install, build once, helm, images --debian, up unless it
    is up already) and `down <pid>` at session end, which stops the cluster only if no other
    process holds a lease on it and a lease holder started it. Skips only where k8s-local cannot
    run at all (not root, not Debian; under CI that fails too: `tests.engines`); any other failure
    is a test error.
    """
    why = _k8s_unavailable()
    if why:
        require_engine(why)
    start = time.monotonic()
    lease = str(os.getpid())
    done = subprocess.run(
        [str(K8S_UP), "up", lease], capture_output=True, text=True, check=False, timeout=3600
    )
    if done.returncode != 0:
        pytest.fail(f"k8s-local bring-up failed (rc {done.returncode}):\n{done.stderr[-4000:]}")
    kubeconfig = done.stdout.strip().splitlines()[-1]
    cluster = K8sCluster(
        kubeconfig=kubeconfig,
        namespace="default",
        image="localhost/python-node:bookworm",
        bring_up_s=time.monotonic() - start,
    )
    try:
        yield cluster
    finally:
        subprocess.run([str(K8S_UP), "down", lease], capture_output=True, check=False, timeout=300)
