"""The chart on a real Kubernetes 1.20 (k8s-local): server-side validation, `helm install --wait`, smoke.

Uses the session cluster of the sandbox tests and the clawgym image built from this checkout by
deploy/k8s_local_image.py (Debian rootfs + the venv's packages + the project; cached in
~/.cache/clawgym/images, rebuilt only when the project changes). Components whose service does not
exist yet are left out of the install and named in the test output.
"""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "clawgym"
DATABASE = "clawgym_k8s"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(
    cmd: list[str], env: dict, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def kube_env(k8s_cluster, k8s_tools: Path) -> dict:
    return {**os.environ, "KUBECONFIG": k8s_cluster.kubeconfig, "PATH": f"{k8s_tools}:{os.environ['PATH']}"}


@pytest.fixture(scope="module")
def clawgym_image(k8s_cluster) -> str:
    """localhost/clawgym:<hash of the project>, built (or reused) and imported into the cluster."""
    done = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "k8s_local_image.py")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"building the k8s-local image failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def namespace(kube_env: dict, kubectl_bin: str) -> Iterator[str]:
    """A fresh namespace, labelled for NetworkPolicy selectors (1.20 has no kubernetes.io/metadata.name)."""
    ns = f"cg-deploy-{uuid.uuid4().hex[:6]}"
    done = _run([kubectl_bin, "create", "namespace", ns], kube_env)
    assert done.returncode == 0, done.stderr
    _run([kubectl_bin, "label", "namespace", ns, f"clawgym.dev/namespace={ns}"], kube_env)
    yield ns
    _run(
        [kubectl_bin, "delete", "namespace", ns, f"{ns}-sandboxes", "--wait=false", "--ignore-not-found"],
        kube_env,
    )


@pytest.fixture(scope="module")
def k8s_database(pg_admin_url: str) -> str:
    """The database the in-cluster store uses on the host's PostgreSQL (values-k8s-local.yaml)."""
    engine = create_engine(pg_admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        if not conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :d"), {"d": DATABASE}).scalar():
            conn.execute(text(f'CREATE DATABASE "{DATABASE}"'))
    engine.dispose()
    return make_url(pg_admin_url).username or "postgres"


def _available_components() -> tuple[list[str], list[str]]:
    """(components whose service exists, those that do not yet) among what values-k8s-local enables."""
    present, missing = [], []
    for name in ("proxy", "store", "inference", "orchestrator"):
        (present if (REPO / "services" / name / "__main__.py").is_file() else missing).append(name)
    return present, missing


def _pod_report(kubectl_bin: str, namespace: str, env: dict) -> str:
    """Pod states and the last log lines of every pod that is not ready: what a failed install shows."""
    pods = json.loads(_run([kubectl_bin, "get", "pods", "-n", namespace, "-o", "json"], env).stdout)["items"]
    lines = [_run([kubectl_bin, "get", "pods", "-n", namespace, "-o", "wide"], env).stdout]
    for pod in pods:
        statuses = pod["status"].get("containerStatuses", [])
        if statuses and all(c.get("ready") for c in statuses):
            continue
        name = pod["metadata"]["name"]
        logs = _run([kubectl_bin, "logs", "-n", namespace, name, "--tail=25"], env)
        previous = _run([kubectl_bin, "logs", "-n", namespace, name, "--previous", "--tail=25"], env)
        lines.append(f"--- {name}:\n{logs.stdout[-3000:]}{previous.stdout[-3000:]}")
    return "\n".join(lines)


def _crash_looping(kubectl_bin: str, namespace: str, env: dict) -> bool:
    out = _run([kubectl_bin, "get", "pods", "-n", namespace, "-o", "json"], env)
    for pod in json.loads(out.stdout or '{"items": []}')["items"]:
        for c in pod["status"].get("containerStatuses", []):
            reason = (c.get("state", {}).get("waiting") or {}).get("reason", "")
            if c.get("restartCount", 0) >= 2 or reason in (
                "CrashLoopBackOff",
                "ErrImageNeverPull",
                "CreateContainerConfigError",
            ):
                return True
    return False


def _install_and_wait(cmd: list[str], env: dict, kubectl_bin: str, namespace: str) -> None:
    """`helm install --wait`, failing early (with the pods' logs) once a pod crash-loops."""
    helm = subprocess.Popen(
        [*cmd, "--wait", "--timeout", "5m"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 330
    while helm.poll() is None and time.monotonic() < deadline:
        time.sleep(5)
        if _crash_looping(kubectl_bin, namespace, env):
            helm.kill()
            pytest.fail(
                f"a pod crash-loops during helm install --wait:\n{_pod_report(kubectl_bin, namespace, env)}"
            )
    if helm.poll() is None:
        helm.kill()
    _, err = helm.communicate()
    if helm.returncode != 0:
        pytest.fail(f"helm install --wait failed:\n{err}\n{_pod_report(kubectl_bin, namespace, env)}")


def test_rendered_manifests_are_accepted_by_the_kubernetes_1_20_api_server(
    kube_env, helm_bin, kubectl_bin, namespace
):
    """`kubectl apply --dry-run=server` of the chart with each values file, as the 1.20 server renders it."""
    for values in ((), ("values-production.yaml",), ("values-k8s-local.yaml",)):
        cmd = [helm_bin, "template", "cg", str(CHART), "-n", namespace, "--kube-version", "1.20.2"]
        cmd += [a for v in values for a in ("-f", str(CHART / v))]
        # the sandbox namespace would only exist after a real install: point sandboxes at this one
        cmd += ["--set", f"orchestrator.sandbox.namespace={namespace}", "--set", "trainer.enabled=true"]
        rendered = _run(cmd, kube_env)
        assert rendered.returncode == 0, rendered.stderr
        applied = _run(
            [kubectl_bin, "apply", "--dry-run=server", "-n", namespace, "-f", "-"],
            kube_env,
            stdin=rendered.stdout,
        )
        assert applied.returncode == 0, (
            f"the 1.20 API server rejects the chart with {values or 'defaults'}:\n{applied.stderr}"
        )


def test_helm_install_waits_for_ready_pods_and_the_proxy_answers_healthz_through_a_port_forward(
    kube_env, helm_bin, kubectl_bin, namespace, clawgym_image, k8s_database
):
    present, missing = _available_components()
    if "proxy" not in present:
        pytest.skip("the proxy service (clawgym_services.proxy) does not exist yet")
    repo, tag = clawgym_image.rsplit(":", 1)
    ports = {
        "proxy.port": _free_port(),
        "store.port": _free_port(),
        "store.metricsPort": _free_port(),
        "inference.port": _free_port(),
        "inference.metricsPort": _free_port(),
        "orchestrator.port": _free_port(),
        "orchestrator.metricsPort": _free_port(),
    }
    sets = {
        "image.tag": tag,
        "externalDatabase.username": k8s_database,
        **{k: str(v) for k, v in ports.items()},
    }
    for name in ("proxy", "store", "inference", "orchestrator"):
        sets[f"{name}.image.repository"] = repo
    for name in missing:
        sets[f"{name}.enabled"] = "false"
    print(f"installing {present}; not yet written, left out: {missing}")
    cmd = [helm_bin, "install", "cg", str(CHART), "-n", namespace, "-f", str(CHART / "values-k8s-local.yaml")]
    cmd += [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]
    start = time.monotonic()
    _install_and_wait(cmd, kube_env, kubectl_bin, namespace)
    print(f"helm install --wait: {time.monotonic() - start:.1f} s")
    try:
        local = _free_port()
        forward = subprocess.Popen(
            [
                kubectl_bin,
                "port-forward",
                "-n",
                namespace,
                "--address",
                "127.0.0.1",
                "svc/cg-clawgym-proxy",
                f"{local}:{ports['proxy.port']}",
            ],
            env=kube_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            line = forward.stdout.readline()
            assert "Forwarding from 127.0.0.1" in line, f"kubectl port-forward did not start: {line}"
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/healthz", timeout=30) as r:
                assert r.status == 200, f"/healthz through the port-forward answered {r.status}"
            with urllib.request.urlopen(f"http://127.0.0.1:{local}/metrics", timeout=30) as r:
                body = r.read().decode()
            assert "clawgym_proxy_requests" in body, "the proxy's /metrics lacks its request counter"
        finally:
            forward.terminate()
            forward.wait(timeout=10)
    finally:
        _run([helm_bin, "uninstall", "cg", "-n", namespace, "--wait", "--timeout", "60s"], kube_env)
