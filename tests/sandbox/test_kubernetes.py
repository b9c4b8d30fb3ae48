"""The kubernetes backend against a real cluster: k8s-local's Kubernetes 1.20 with real pods.

The session fixture `k8s_cluster` (conftest) brings the cluster up and down. Sandboxes use the
Debian python3+node image and hostNetwork, which is how a pod reaches a server on the node's
127.0.0.1 here; a plain `python -m http.server` stands in for the proxy.
"""

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config, utils

from clawgym.errors import InvalidArgument, NotFound
from clawgym.sandbox import KubernetesSandboxConfig, Resources, SandboxConfig, SandboxSpec
from clawgym.sandbox.kubernetes import KubernetesBackend
from clawgym_app.runtime.services import free_port

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]


def _backend(cluster, owner: str = "test-k8s", **k8s) -> KubernetesBackend:
    settings = {
        "kubeconfig": cluster.kubeconfig,
        "namespace": cluster.namespace,
        "image": cluster.image,
        "image_pull_policy": "Never",
        "host_network": True,
        "max_threads": 16,
        **k8s,
    }
    return KubernetesBackend(
        SandboxConfig(backend="kubernetes", owner=owner, kubernetes=KubernetesSandboxConfig(**settings))
    )


def _renamespaced(doc, names: dict[str, str]):
    """A manifest with its namespaces (and namespace-selector labels) renamed per `names`."""
    if isinstance(doc, dict):
        return {
            k: names.get(v, v)
            if k in ("namespace", "clawgym.dev/namespace") and isinstance(v, str)
            else _renamespaced(v, names)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [_renamespaced(v, names) for v in doc]
    return doc


def _core(cluster) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=cluster.kubeconfig))


def _pod_gone(core: client.CoreV1Api, name: str, namespace: str = "default", wait_s: float = 30) -> bool:
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            core.read_namespaced_pod(name, namespace)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        time.sleep(0.2)
    return False


@pytest.fixture
def loopback_server(tmp_path: Path) -> Iterator[str]:
    """`python -m http.server` on 127.0.0.1 serving one answer file: the proxy's stand-in."""
    (tmp_path / "answer.txt").write_text("42\n")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def _task(root: Path, url: str) -> Path:
    """A tiny task: the 'harness' fetches the answer over HTTP, the verifier checks it."""
    (root / "app").mkdir(parents=True)
    (root / "app" / "solve.py").write_text(
        "import os, urllib.request\n"
        "answer = urllib.request.urlopen(os.environ['PROXY_URL'] + '/answer.txt', timeout=10).read().decode().strip()\n"
        "open('/app/answer.txt', 'w').write(answer)\n"
    )
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(
        '#!/bin/sh\nif [ "$(cat /app/answer.txt)" = 42 ]; then echo 1.0; else echo 0.0; fi > /logs/verifier/reward.txt\n'
    )
    (root / "tests" / "test.sh").chmod(0o755)
    return root


def test_a_task_runs_end_to_end_in_a_real_pod_against_a_server_on_loopback(
    k8s_cluster, loopback_server, tmp_path
):
    """create -> put task -> harness talks to 127.0.0.1 -> tests copied in after -> verify -> get -> destroy."""
    backend = _backend(k8s_cluster)
    task = _task(tmp_path / "task", loopback_server)

    async def scenario():
        sandbox = await backend.create(
            SandboxSpec(
                workdir="/app", mounts=["/tests", "/logs/verifier"], labels={"clawgym.dev/rollout": "e2e"}
            )
        )
        try:
            await sandbox.put_dir(task / "app", "/app")
            harness = await sandbox.exec(
                ["python3", "solve.py"], env={"PROXY_URL": loopback_server}, timeout_s=60
            )
            await sandbox.put_dir(task / "tests", "/tests")
            verifier = await sandbox.exec(["/tests/test.sh"], timeout_s=60)
            reward = await sandbox.get_file("/logs/verifier/reward.txt")
            workspace = await sandbox.get_tar("/app")
            return sandbox.id, harness, verifier, reward, workspace
        finally:
            await sandbox.destroy()
            await backend.close()

    name, harness, verifier, reward, workspace = asyncio.run(scenario())
    assert harness.ok, f"the harness must reach the server on 127.0.0.1 from the pod: {harness}"
    assert verifier.ok, f"the verifier must run: {verifier}"
    assert reward == b"1.0\n", f"the verifier's reward comes back through get_file: {reward!r}"
    assert b"answer.txt" in workspace and b"solve.py" in workspace, "get_tar returns the workspace"
    assert _pod_gone(_core(k8s_cluster), name), "destroy must delete the pod"


def test_exec_in_a_pod_honours_stdin_env_cwd_exit_codes_and_binary_files(k8s_cluster):
    backend = _backend(k8s_cluster, max_threads=8)
    blob = os.urandom(300_000)

    async def scenario():
        sandbox = await backend.create(SandboxSpec(mounts=["/app"], env={"A": "spec", "B": "spec"}))
        try:
            piped = await sandbox.exec(["sh", "-c", "tr a-z A-Z"], stdin=b"hello pod")
            envs = await sandbox.exec('echo "$A $B $HOME"; pwd', env={"B": "exec"}, cwd="/app")
            failed = await sandbox.exec("echo oops >&2; exit 7")
            await sandbox.put_file("/app/blob.bin", blob, mode=0o600)
            back = await sandbox.get_file("/app/blob.bin")
            mode = await sandbox.exec("stat -c %a /app/blob.bin")
            with pytest.raises(NotFound):
                await sandbox.get_file("/app/missing")
            with pytest.raises(InvalidArgument):
                await sandbox.get_file("/etc/hostname")  # outside the writable paths, on every backend
            return piped, envs, failed, back, mode
        finally:
            await sandbox.destroy()
            await backend.close()

    piped, envs, failed, back, mode = asyncio.run(scenario())
    assert piped.stdout == b"HELLO POD", f"stdin reaches the command and ends: {piped}"
    assert envs.stdout == b"spec exec /root\n/app\n", f"spec env < exec env; cwd honoured: {envs}"
    assert (failed.exit_code, failed.stderr) == (7, b"oops\n"), f"exit code and stderr: {failed}"
    assert back == blob, "300 kB of random bytes must round-trip through the tar streams unchanged"
    assert mode.stdout == b"600\n", "the file mode survives"


def test_the_timeout_kills_every_process_the_exec_started_in_the_pod(k8s_cluster):
    backend = _backend(k8s_cluster, max_threads=8)
    count = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep 777' || true"

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            run = asyncio.ensure_future(
                sandbox.exec("setsid sh -c 'sleep 777 & sleep 777' & sleep 777", timeout_s=4)
            )
            await asyncio.sleep(2)
            during = await sandbox.exec(count)
            result = await run
            after = await sandbox.exec(count)
            alive = await sandbox.exec("echo still-usable")
            return during, result, after, alive
        finally:
            await sandbox.destroy()
            await backend.close()

    during, result, after, alive = asyncio.run(scenario())
    assert int(during.stdout) == 3, f"the three sleeps must be running first: {during}"
    assert result.timed_out and result.exit_code == 137, f"the exec must report the timeout: {result}"
    assert int(after.stdout) == 0, f"every process it started (the setsid ones too) must be gone: {after}"
    assert alive.stdout == b"still-usable\n", "the pod survives the kill"


def test_pods_are_hardened_labelled_and_reaped_after_their_owner_restarts(k8s_cluster):
    core = _core(k8s_cluster)

    async def scenario():
        crashed = _backend(k8s_cluster, owner="test-reap-a", max_threads=8)
        stranger = _backend(k8s_cluster, owner="test-reap-b", max_threads=8)
        left = await crashed.create(SandboxSpec(harness="nop", resources=Resources(cpus=0.5, memory_mb=256)))
        other = await stranger.create(SandboxSpec())
        pod = core.read_namespaced_pod(left.id, "default")
        restarted = _backend(k8s_cluster, owner="test-reap-a", max_threads=8)
        kept = await restarted.create(SandboxSpec())
        reaped = await restarted.reap()
        survivors = {p.metadata.name for p in core.list_namespaced_pod("default").items}
        for s in (other, kept):
            await s.destroy()
        for b in (crashed, stranger, restarted):
            await b.close()
        return left, other, kept, pod, reaped, survivors

    left, other, kept, pod, reaped, survivors = asyncio.run(scenario())
    assert pod.metadata.labels["app.kubernetes.io/managed-by"] == "clawgym"
    assert (
        pod.metadata.labels["clawgym.dev/owner"] == "test-reap-a"
        and pod.metadata.labels["clawgym.dev/harness"] == "nop"
    )
    assert pod.spec.automount_service_account_token is False and pod.spec.host_network is True
    assert pod.spec.containers[0].resources.limits == {"cpu": "500m", "memory": "256Mi"}
    assert reaped == 1 and _pod_gone(core, left.id), "reap deletes the restarted owner's leftover pod"
    assert other.id in survivors and kept.id in survivors, "reap spares other owners and pods it holds"


def test_a_warm_pool_hands_out_started_pods_and_relabels_them(k8s_cluster):
    core = _core(k8s_cluster)

    async def scenario():
        backend = _backend(k8s_cluster, owner="test-warm", warm_pool=2, max_threads=8)
        spec = SandboxSpec(workdir="/app", harness="nop", labels={"clawgym.dev/rollout": "warm-1"})
        first = await backend.create(spec)  # cold; starts the pool
        pool = next(iter(backend._pools.values()))
        for _ in range(300):
            if len(pool.ready) == 2:
                break
            await asyncio.sleep(0.1)
        warm_names = list(pool.ready)
        second = await backend.create(spec)
        pod = core.read_namespaced_pod(second.id, "default")
        ran = await second.exec("pwd")
        await backend.close()
        return first, second, warm_names, pod, ran

    first, second, warm_names, pod, ran = asyncio.run(scenario())
    assert len(warm_names) == 2, f"the pool must fill to warm_pool=2: {warm_names}"
    assert first.id not in warm_names, "the first create had no warm pod to take"
    assert second.id in warm_names, "the second create must take a warm pod"
    assert pod.metadata.labels["clawgym.dev/rollout"] == "warm-1", "a claimed pod gets the rollout's labels"
    assert pod.metadata.labels["clawgym.dev/sandbox"] == second.id
    assert pod.spec.active_deadline_seconds and pod.spec.active_deadline_seconds >= 3600, "and a deadline"
    assert ran.stdout == b"/app\n", f"the claimed pod works: {ran}"
    core_names = {
        p.metadata.name
        for p in core.list_namespaced_pod("default", label_selector="clawgym.dev/owner=test-warm").items
    }
    assert all(_pod_gone(core, n) for n in core_names), "close() deletes live and warm pods"


def test_network_none_pods_stay_off_the_node_network_and_policies_select_them(k8s_cluster, loopback_server):
    """The manifests in deploy/k8s are accepted by a real 1.20 API server; their selectors match our pods.

    k8s-local does not enforce NetworkPolicy (see deploy/k8s/README.md); a network=none pod is
    cut off here because it is not on hostNetwork and the pod bridge routes nowhere.
    """
    api = config.new_client_from_config(config_file=k8s_cluster.kubeconfig)
    core = client.CoreV1Api(api)
    # fresh namespaces, so nothing else using the cluster (the chart's install test) collides
    suffix = os.urandom(3).hex()
    names = {"clawgym": f"cg-ctl-{suffix}", "clawgym-sandboxes": f"cg-sbx-{suffix}"}
    sandboxes = names["clawgym-sandboxes"]
    for ns in names.values():
        core.create_namespace({"metadata": {"name": ns, "labels": {"clawgym.dev/namespace": ns}}})
    for _ in range(100):  # pod admission needs the namespace's default service account to exist
        if core.list_namespaced_service_account(sandboxes).items:
            break
        time.sleep(0.1)
    try:
        for manifest in ("sandbox-networkpolicy.yaml", "orchestrator-rbac.yaml"):
            for doc in yaml.safe_load_all((REPO / "deploy" / "k8s" / manifest).read_text()):
                utils.create_from_dict(api, _renamespaced(doc, names))
        policies = client.NetworkingV1Api(api).list_namespaced_network_policy(sandboxes).items
        selectors = {p.metadata.name: p.spec.pod_selector.match_labels for p in policies}

        async def scenario():
            backend = _backend(k8s_cluster, owner="test-netpol", namespace=sandboxes, max_threads=8)
            online = await backend.create(SandboxSpec(network="proxy"))
            offline = await backend.create(SandboxSpec(network="none"))
            fetch = f"python3 -c 'import urllib.request; urllib.request.urlopen(\"{loopback_server}/answer.txt\", timeout=5)'"
            reached = await online.exec(fetch)
            cut_off = await offline.exec(fetch)
            labels = {
                s.id: core.read_namespaced_pod(s.id, sandboxes).metadata.labels for s in (online, offline)
            }
            await backend.close()
            return online.id, offline.id, reached, cut_off, labels

        online, offline, reached, cut_off, labels = asyncio.run(scenario())
    finally:
        for ns in names.values():
            core.delete_namespace(ns, grace_period_seconds=0)

    def selects(policy: str, pod: str) -> bool:
        return all(labels[pod].get(k) == v for k, v in selectors[policy].items())

    assert set(selectors) == {"clawgym-sandbox-egress", "clawgym-sandbox-no-network"}, selectors
    assert selects("clawgym-sandbox-egress", online) and not selects("clawgym-sandbox-no-network", online)
    assert selects("clawgym-sandbox-no-network", offline) and not selects("clawgym-sandbox-egress", offline)
    assert reached.ok, f"a network=proxy pod (hostNetwork here) reaches 127.0.0.1: {reached}"
    assert not cut_off.ok, f"a network=none pod must not reach the node's loopback: {cut_off}"
