"""A sandbox pod that disappears is an infrastructure failure (retried, never rewarded), without a cluster.

The real `kubernetes` client talks to a loopback HTTP server that answers as the API server does
for a pod that was deleted (404 with a `Status` body; a 404 to the exec upgrade) or is being
deleted (`deletionTimestamp` set): the exceptions are the client's own, raised by its own parsing.
What a real cluster adds (the exec's exit code 137 when the kubelet kills the container) is
covered by `check_pod`, which these tests drive directly.
"""

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from kubernetes import client

from clawgym.errors import NotFound
from clawgym.orchestrator import failures
from clawgym.orchestrator.failures import classify
from clawgym.sandbox import KubernetesSandboxConfig, SandboxConfig
from clawgym.sandbox.interface import SandboxFailed
from clawgym.sandbox.kubernetes import KubernetesBackend

NAMESPACE = "sbx"


def _pod(name: str, *, deleting: bool = False, phase: str = "Running") -> dict:
    meta = {"name": name, "namespace": NAMESPACE}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "status": {"phase": phase}}


class _ApiServer(BaseHTTPRequestHandler):
    """GET /api/v1/namespaces/sbx/pods/<name>: the pod in `pods`, else the API server's 404 Status."""

    pods: ClassVar[dict[str, dict]] = {}

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        name = self.path.split("?")[0].rstrip("/").split("/")[-1]
        if "/exec" in self.path:  # the exec upgrade for a pod that does not exist
            name = self.path.split("/pods/")[1].split("/")[0]
        pod = self.pods.get(name) if "/exec" not in self.path else None
        if pod is None:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                    "message": f'pods "{name}" not found', "code": 404}  # fmt: skip
            self._answer(404, body)
        else:
            self._answer(200, pod)

    def do_POST(self) -> None:
        """Creates a pod that is deleted at once: the answer holds it, later reads do not find it."""
        created = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer(201, {**created, "status": {"phase": "Pending"}})

    def do_DELETE(self) -> None:
        self.pods.pop(self.path.split("?")[0].rstrip("/").split("/")[-1], None)
        self._answer(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[KubernetesBackend]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "loop",
        "clusters": [{"name": "loop", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "u", "namespace": NAMESPACE}}],
    }))  # fmt: skip
    cfg = SandboxConfig(
        backend="kubernetes",
        owner="pod-loss-test",
        kubernetes=KubernetesSandboxConfig(kubeconfig=str(kubeconfig), namespace=NAMESPACE),
    )
    _ApiServer.pods = {"alive": _pod("alive"), "deleting": _pod("deleting", deleting=True),
                       "evicted": _pod("evicted", phase="Failed")}  # fmt: skip
    b = KubernetesBackend(cfg)
    try:
        yield b
    finally:
        b.threads.shutdown(wait=False)
        server.shutdown()
        server.server_close()


def _infra(e: BaseException) -> failures.InfraFailure:
    return classify(e, failures.HARNESS_START)


def test_a_deleted_or_dying_pod_is_a_retried_sandbox_failure_and_a_live_one_passes(backend):
    """check_pod (run after an exec killed by a signal): a 404 from the real client, a pod being
    deleted, and an ended phase are each a retried infrastructure failure; a running pod is fine."""

    async def body() -> dict[str, BaseException | None]:
        out: dict[str, BaseException | None] = {}
        for name in ("gone", "deleting", "evicted", "alive"):
            try:
                await backend.check_pod(name)
                out[name] = None
            except Exception as e:
                out[name] = e
        return out

    outcomes = asyncio.run(body())
    assert outcomes["alive"] is None, f"a running pod must pass the check: {outcomes['alive']!r}"
    for name in ("gone", "deleting", "evicted"):
        e = outcomes[name]
        assert isinstance(e, SandboxFailed), f"pod {name}: must be SandboxFailed, got {e!r}"
        failure = _infra(e)
        assert failure.kind == failures.HARNESS_START and failure.retried, (
            f"pod {name}: a vanished pod must be a retried infrastructure failure: {failure}"
        )
    gone = outcomes["gone"]
    assert (
        isinstance(gone.__cause__.__cause__, client.ApiException) and gone.__cause__.__cause__.status == 404
    ), f"the 404 must come from the kubernetes client's own ApiException: {gone.__cause__!r}"
    assert "deleted" in str(gone) and "being deleted" in str(outcomes["deleting"]), (
        f"the error must say the pod went away: {gone} / {outcomes['deleting']}"
    )


def test_exec_into_a_pod_that_is_gone_fails_the_sandbox_not_the_command(backend):
    """The exec upgrade answered 404 (the pod was deleted): the real stream client's error becomes
    SandboxFailed, never an ExecResult the verifier would turn into a reward."""
    started = time.monotonic()
    with pytest.raises(SandboxFailed) as caught:
        backend.execs.run("gone", ["true"], stdin=None, deadline=time.monotonic() + 30, max_output_bytes=1024)
    assert time.monotonic() - started < 20, "an exec into a missing pod must fail at once"
    assert _infra(caught.value).retried, f"must be retried: {caught.value}"


def test_a_pod_deleted_while_it_starts_is_a_retried_sandbox_failure_that_names_it(backend):
    """The pod is created, then deleted before the start loop saw it run (a `kubectl delete` of a
    just-scheduled pod): the failure names the pod and is retried, like a pod lost mid-exec."""
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "clawgym-sbx-vanishing"},
                "spec": {"containers": [{"name": "sandbox", "image": "x"}]}}  # fmt: skip
    with pytest.raises(SandboxFailed) as caught:
        asyncio.run(backend.start_pod(manifest))
    assert "clawgym-sbx-vanishing" in str(caught.value), f"the error must name the pod: {caught.value}"
    failure = classify(caught.value, failures.SANDBOX)
    assert failure.kind == failures.SANDBOX and failure.retried, f"must be a retried sandbox failure: {failure}"
    assert "clawgym-sbx-vanishing" not in backend.held, "a pod that failed to start is no longer held"


def test_a_404_names_the_object_the_api_server_did_not_find(backend):
    """Every NotFound from the API carries the server's own message, which names the pod."""
    with pytest.raises(NotFound, match='pods "nowhere" not found'):
        asyncio.run(backend.call(backend.core.read_namespaced_pod, "nowhere", NAMESPACE))
