"""The chart on a real Kubernetes 1.20 (k8s-local): server-side validation, `helm install --wait`, smoke.

Uses the session cluster of the sandbox tests and the clawgym image built from this checkout by
deploy/k8s_local_image.py (Debian rootfs + the venv's packages + the project; cached in
~/.cache/clawgym/images, rebuilt only when the project changes) with the PostgreSQL and Redis
stand-ins. The training run on the same values, with pod-loss chaos: test_cluster_run.py.
"""

import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from clawgym_app.runtime.services import free_port
from deploy.k8s_local_run import ClusterRelease

pytestmark = [pytest.mark.k8s, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "clawgym"


def _run(
    cmd: list[str], env: dict, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def kube_env(k8s_cluster, k8s_tools: Path) -> dict:
    return {**os.environ, "KUBECONFIG": k8s_cluster.kubeconfig, "PATH": f"{k8s_tools}:{os.environ['PATH']}"}


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
    kube_env, kubectl_bin, k8s_local_image, tmp_path
):
    """The whole system of values-k8s-local.yaml without its training run (the trainer off):
    `helm install --wait` (the chart's PostgreSQL and Redis, store, 2 inference replicas, 2 proxies
    sharing a port, the orchestrator), then /healthz and /metrics through `kubectl port-forward`."""
    release = ClusterRelease(kube_env, k8s_local_image, tmp_path / "checkpoints", extra_sets={"trainer.enabled": "false"})
    start = time.monotonic()
    try:
        release.install(wait_s=300)
    except Exception as e:
        report = release.report()
        release.uninstall()
        pytest.fail(f"helm install --wait failed: {e}\n{report}")
    print(f"helm install --wait: {time.monotonic() - start:.1f} s")
    try:
        local = free_port()
        forward = subprocess.Popen(
            [kubectl_bin, "port-forward", "-n", release.namespace, "--address", "127.0.0.1", "svc/cg-clawgym-proxy",
             f"{local}:{release.ports['proxy.port']}"],
            env=kube_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
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
        release.uninstall()
