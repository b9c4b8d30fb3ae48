"""The `kubernetes` sandbox backend: one pod per sandbox, cold or from a warm pool.

Pods are described in `k8s_pods`, commands run through `k8s_exec`. Files travel as tar
streams over exec (stdin in, stdout out), so the image needs `sh`, `head`, `tar` and `cat`.
Blocking client calls run in the backend's own thread pool (`max_threads`), never on the event
loop and never in asyncio's small default executor, which long execs would starve.

Garbage collection: every pod carries `app.kubernetes.io/managed-by=clawgym`,
`clawgym.dev/owner=<owner>` and `clawgym.dev/instance`; each instance renews a Lease while it lives
(`k8s_leases`), and `reap()` deletes the owner's pods this process does not hold whose instance's
Lease ran out (or that are this instance's), and `activeDeadlineSeconds` ends any pod whose sandbox
outlived its lifetime by a minute. A pod whose container the out-of-memory killer ended stopped by
itself (`SandboxDied`); one deleted, evicted or past its deadline failed (`SandboxFailed`). Deletes use
grace period 0 (a graceful delete takes 12-14 s on the 1.20 kubelet and buys nothing here).

Warm pool (`warm_pool` > 0): per pod shape (`k8s_pods.pool_key`: image, layout, resources,
network), that many pods are started ahead. `create` claims one by relabelling it and setting
its deadline, then starts a replacement; a cold pod is made only when none is ready.

Task images (`task_images`): a spec with a `build` runs the image the docker backend builds from
it, by the same content-hash name under `task_image_registry` (`k8s_pods.with_task_image`); the
backend never builds or pushes it.

Differences from `local` a caller may notice: processes started by one exec survive until the
pod goes (there is no per-exec PID namespace), a timeout kills every process in the container
(see `k8s_exec`), `get_*` follows symlinks inside the pod's own filesystem, and `reset_dir` and
`seal_dir` run inside the pod as its one user (kill every process, then empty; clear write bits).
"""

import asyncio
import contextlib
import functools
import json
import logging
import posixpath
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config

from clawgym.errors import FailedPrecondition, InvalidArgument, NotFound
from clawgym.sandbox import archive, file_ends
from clawgym.sandbox.config import KubernetesSandboxConfig, SandboxConfig
from clawgym.sandbox.container_scripts import RESET as _RESET
from clawgym.sandbox.environment import check_env
from clawgym.sandbox.interface import (
    INSTANCE_LABEL,
    MANAGED_BY,
    OWNER_LABEL,
    ExecResult,
    FileEnds,
    SandboxDied,
    SandboxFailed,
    SandboxSpec,
    locate,
    sandbox_path,
    writable_dir,
)
from clawgym.sandbox.k8s_exec import PodExec, wrap
from clawgym.sandbox.k8s_leases import InstanceLeases
from clawgym.sandbox.k8s_pods import (
    FATAL_WAITING,
    POOL_LABEL,
    WARM_POD_MAX_S,
    base_labels,
    claim_labels,
    lifetime_deadline,
    pod_manifest,
    pool_key,
    with_task_image,
)
from clawgym.sandbox.owners import Liveness, Ownership

log = logging.getLogger(__name__)
KILLED_BY_SIGNAL = 128  # shells report a command killed by signal N as exit code 128 + N

# File transfers are not bounded by the sandbox's lifetime: results are read after a timeout.
FILE_OP_TIMEOUT_S = 300.0
_PUT = 'mkdir -p -- "$1" && tar -x -o -f - -C "$1"'
_GET_FILE = 'if [ ! -e "$1" ]; then exit 2; fi; if [ ! -f "$1" ]; then exit 3; fi; exec cat -- "$1"'
_GET_TAR = 'if [ ! -e "$1" ] && [ ! -L "$1" ]; then exit 2; fi; exec tar -c -f - -C "$2" "$3"'


def _load_configuration(k: KubernetesSandboxConfig) -> client.Configuration:
    """kubeconfig (the given file, else $KUBECONFIG or ~/.kube/config), else the in-cluster account."""
    configuration = client.Configuration()
    try:
        config.load_kube_config(
            config_file=k.kubeconfig or None, context=k.context or None, client_configuration=configuration
        )
        return configuration
    except (config.ConfigException, OSError) as e:
        if k.kubeconfig:
            raise SandboxFailed(f"cannot load kubeconfig {k.kubeconfig}: {e}") from e
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException as e:
        raise SandboxFailed("no kubeconfig found and not running inside a cluster") from e
    return configuration


class KubernetesBackend:
    """Makes pod sandboxes in one namespace. Construct once per process."""

    name = "kubernetes"

    def __init__(self, cfg: SandboxConfig) -> None:
        self.cfg, self.k = cfg, cfg.kubernetes
        self.task_images = self.k.task_images
        self.ownership = Ownership(cfg.owner)
        self.owner, self.instance = self.ownership.owner, self.ownership.instance
        self.lease_name = self.ownership.lease_name
        configuration = _load_configuration(self.k)
        configuration.connection_pool_maxsize = self.k.max_threads
        api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(api)
        self.leases = InstanceLeases(
            self.call,
            client.CoordinationV1Api(api),
            namespace=self.k.namespace,
            prefix=self.k.name_prefix,
            owner=self.owner,
            instance=self.instance,
            lease_s=self.k.owner_lease_s,
        )
        self.execs = PodExec(configuration, self.k.namespace)
        self.threads = ThreadPoolExecutor(max_workers=self.k.max_threads, thread_name_prefix="clawgym-k8s")
        self.held: set[str] = set()  # pod names this process owns: live, starting, or warm
        self._live: dict[str, KubernetesSandbox] = {}
        self._pools: dict[str, WarmPool] = {}

    # --- API calls, off the loop, errors typed ---

    async def call(self, fn, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self.threads, functools.partial(fn, *args, **kwargs))
        except client.ApiException as e:
            if e.status in (400, 422):
                raise InvalidArgument(f"kubernetes refused the request: {e.reason}: {e.body}") from e
            if e.status == 404:
                raise NotFound(f"kubernetes: {_api_message(e)}") from e
            raise SandboxFailed(f"kubernetes API error {e.status}: {e.reason}") from e
        except urllib3.exceptions.HTTPError as e:
            raise SandboxFailed(f"kubernetes API unreachable: {e}") from e

    def new_pod_name(self) -> str:
        return f"{self.k.name_prefix}-{secrets.token_hex(6)}"

    async def start_pod(self, manifest: dict[str, Any]) -> None:
        """Creates the pod and waits until its container runs; on any failure the pod is deleted."""
        name = manifest["metadata"]["name"]
        self.held.add(name)
        try:
            await self.call(self.core.create_namespaced_pod, self.k.namespace, manifest)
            await self._wait_running(name)
        except BaseException:
            self.held.discard(name)
            with contextlib.suppress(Exception):
                await asyncio.shield(self.delete_pod(name))
            raise

    async def _wait_running(self, name: str) -> None:
        deadline = time.monotonic() + self.k.start_timeout_s
        pause = 0.05
        while True:
            try:
                pod = await self.call(self.core.read_namespaced_pod, name, self.k.namespace)
            except NotFound as e:  # deleted before this loop saw it run: the sandbox failed, retried
                raise SandboxFailed(f"pod {name} was deleted while it started: {e}") from e
            status = pod.status
            if status.phase in ("Failed", "Succeeded"):
                raise SandboxFailed(
                    f"pod {name} ended before it was used: {status.phase} {status.reason or ''}"
                )
            for cs in status.container_statuses or []:
                if cs.state and cs.state.running:
                    return
                waiting = cs.state.waiting if cs.state else None
                if waiting and waiting.reason in FATAL_WAITING:
                    raise SandboxFailed(f"pod {name} cannot start: {waiting.reason}: {waiting.message or ''}")
            if time.monotonic() > deadline:
                raise SandboxFailed(
                    f"pod {name} not running after {self.k.start_timeout_s:.0f}s ({status.phase})"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 0.5)

    async def check_pod(self, name: str) -> None:
        """SandboxFailed if pod `name` is gone, being deleted or ended: what an exec's result says is
        then the pod's end (a container killed by a delete exits 137 or 143), not the command's."""
        try:
            pod = await self.call(self.core.read_namespaced_pod, name, self.k.namespace)
        except NotFound as e:
            raise SandboxFailed(f"pod {name} was deleted while in use") from e
        if (reason := pod_gone_reason(pod)) is not None:
            raise (SandboxDied if out_of_memory(pod) else SandboxFailed)(f"pod {name} {reason}")

    async def delete_pod(self, name: str) -> None:
        body = client.V1DeleteOptions(grace_period_seconds=0, propagation_policy="Background")
        with contextlib.suppress(NotFound):
            await self.call(self.core.delete_namespaced_pod, name, self.k.namespace, body=body)
        self.held.discard(name)

    # --- the SandboxBackend protocol ---

    def sandbox_proxy_url(self, proxy_url: str) -> str:
        return proxy_url  # pods reach the proxy's Service directly; the NetworkPolicy allows only it

    async def create(self, spec: SandboxSpec) -> "KubernetesSandbox":
        spec.validate()
        await self.leases.start()
        if spec.build is not None and self.task_images:
            # hashing the build context reads files: off the loop
            spec = await asyncio.to_thread(with_task_image, spec, self.k)
        if self.k.warm_pool > 0:
            pool = self._pools.setdefault(pool_key(spec, self.k), WarmPool(self, spec))
            name = pool.take()
            pool.refill()
            if name is not None:
                try:
                    return await self._claim(name, spec)
                except (SandboxFailed, NotFound, InvalidArgument) as e:
                    log.warning("warm pod %s could not be claimed (%s); starting a cold one", name, e)
                    await self.delete_pod(name)
        name = self.new_pod_name()
        labels = {**base_labels(self.owner, spec, self.instance), **claim_labels(name, spec)}
        manifest = pod_manifest(
            name=name, spec=spec, cfg=self.k, labels=labels, deadline_s=lifetime_deadline(spec)
        )
        await self.start_pod(manifest)
        return self._adopt(name, spec)

    async def _claim(self, name: str, spec: SandboxSpec) -> "KubernetesSandbox":
        pod = await self.call(self.core.read_namespaced_pod, name, self.k.namespace)
        started = pod.status.start_time or datetime.now(UTC)
        running_s = (datetime.now(UTC) - started).total_seconds()
        if lifetime_deadline(spec, running_s) > WARM_POD_MAX_S:
            raise SandboxFailed(f"warm pod {name} is too old to host a {spec.timeout_s:.0f}s sandbox")
        patch = {
            "metadata": {"labels": claim_labels(name, spec)},
            "spec": {"activeDeadlineSeconds": lifetime_deadline(spec, running_s)},
        }
        await self.call(self.core.patch_namespaced_pod, name, self.k.namespace, patch)
        return self._adopt(name, spec)

    def _adopt(self, name: str, spec: SandboxSpec) -> "KubernetesSandbox":
        sandbox = KubernetesSandbox(self, name, spec)
        self._live[name] = sandbox
        self.held.add(name)
        return sandbox

    def forget(self, name: str) -> None:
        self._live.pop(name, None)
        self.held.discard(name)

    async def reap(self, owner: str | None = None) -> int:
        owner = owner or self.owner
        await self.leases.start()
        selector = f"{MANAGED_BY}=clawgym,{OWNER_LABEL}={owner}"
        pods = await self.call(self.core.list_namespaced_pod, self.k.namespace, label_selector=selector)
        recorded = await self.leases.liveness(owner)
        # A configured owner is one live orchestrator at a time (the chart's pod name): its other
        # instances are predecessors, taken at once, as the store takes their rollouts. Their
        # Leases would tell only once they ran out, and reap runs at start.
        predecessors = self.ownership.pinned and owner == self.owner

        def liveness(instance: str) -> Liveness:
            if predecessors and instance != self.instance:
                return "dead"
            return recorded.get(instance, "unknown")

        instances = {p.metadata.name: (p.metadata.labels or {}).get(INSTANCE_LABEL, "") for p in pods.items}
        victims = [
            name
            for name, instance in instances.items()
            if name not in self.held and self.ownership.reapable(instance, liveness(instance))
        ]
        await asyncio.gather(*(self.delete_pod(name) for name in victims))
        left = {instance for name, instance in instances.items() if name not in victims}
        for instance in recorded:  # a gone instance's Lease, once none of its pods is left
            if liveness(instance) == "dead" and instance not in left:
                await self.leases.forget(instance)
        return len(victims)

    async def close(self) -> None:
        for pool in self._pools.values():
            pool.stop()
        await asyncio.gather(*(s.destroy() for s in list(self._live.values())), return_exceptions=True)
        warm = [name for pool in self._pools.values() for name in pool.ready]
        await asyncio.gather(*(self.delete_pod(name) for name in warm), return_exceptions=True)
        await self.leases.close()
        self.threads.shutdown(wait=False, cancel_futures=True)


class WarmPool:
    """Started pods of one shape, waiting to be claimed."""

    def __init__(self, backend: KubernetesBackend, spec: SandboxSpec) -> None:
        self.backend = backend
        # only what shapes the pod; env, labels and harness are applied per claim/exec
        self.spec = SandboxSpec(
            workdir=spec.workdir,
            mounts=tuple(spec.mounts),
            home=spec.home,
            resources=spec.resources,
            timeout_s=spec.timeout_s,
            network=spec.network,
            image=spec.image,
        )
        self.key = pool_key(spec, backend.k)
        self.ready: list[str] = []
        self.starting = 0
        self._tasks: set[asyncio.Task] = set()

    def take(self) -> str | None:
        return self.ready.pop(0) if self.ready else None

    def refill(self) -> None:
        while len(self.ready) + self.starting < self.backend.k.warm_pool:
            self.starting += 1
            task = asyncio.ensure_future(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        name = self.backend.new_pod_name()
        labels = {**base_labels(self.backend.owner, self.spec, self.backend.instance), POOL_LABEL: self.key}
        manifest = pod_manifest(
            name=name, spec=self.spec, cfg=self.backend.k, labels=labels, deadline_s=WARM_POD_MAX_S
        )
        try:
            await self.backend.start_pod(manifest)
            self.ready.append(name)
        except Exception as e:  # a failed warm start costs only a cold start later
            log.warning("warm pod %s failed to start: %s", name, e)
        finally:
            self.starting -= 1

    def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def _api_message(e: client.ApiException) -> str:
    """The API server's own message (it names the object, e.g. `pods "x" not found`), else the reason."""
    try:
        return json.loads(e.body).get("message") or e.reason
    except (TypeError, ValueError, AttributeError):
        return e.reason


def out_of_memory(pod: client.V1Pod) -> bool:
    """Whether the out-of-memory killer ended a container of `pod` (its processes' doing), unless
    the pod is being deleted (then the infrastructure ended it)."""
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return False
    statuses = (pod.status.container_statuses if pod.status is not None else None) or []
    ended = [s.state.terminated for s in statuses if s.state is not None and s.state.terminated is not None]
    return any(t.reason == "OOMKilled" for t in ended)


def pod_gone_reason(pod: client.V1Pod) -> str | None:
    """Why `pod` can no longer host a sandbox (being deleted, or its phase ended), else None."""
    if pod.metadata is not None and pod.metadata.deletion_timestamp is not None:
        return f"is being deleted (since {pod.metadata.deletion_timestamp})"
    phase = pod.status.phase if pod.status is not None else None
    if phase in ("Failed", "Succeeded"):
        reason = pod.status.reason or ""
        return f"ended while in use: {phase} {reason}".rstrip()
    return None


class KubernetesSandbox:
    """One pod. Build with `KubernetesBackend.create`."""

    def __init__(self, backend: KubernetesBackend, name: str, spec: SandboxSpec) -> None:
        self.backend, self.id, self.spec = backend, name, spec
        self.deadline = time.monotonic() + spec.timeout_s
        self._stops: set[threading.Event] = set()
        self._destroyed = False

    async def _run(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        stdin: bytes | None,
        deadline: float,
        max_out: int,
    ) -> ExecResult:
        if self._destroyed:
            raise FailedPrecondition(f"sandbox {self.id} is destroyed")
        wrapped = wrap(argv, cwd=cwd, env=env, stdin_len=None if stdin is None else len(stdin))
        stop = threading.Event()
        self._stops.add(stop)
        try:
            result = await self.backend.call(
                self.backend.execs.run,
                self.id,
                wrapped,
                stdin=stdin,
                deadline=deadline,
                max_output_bytes=max_out,
                cancelled=stop.is_set,
            )
        except NotFound as e:  # the pod vanished under the exec: the machinery failed, not the command
            raise SandboxFailed(f"exec in pod {self.id}: the pod is gone: {e}") from e
        except asyncio.CancelledError:
            stop.set()  # the thread notices within half a second and kills the tree
            raise
        finally:
            self._stops.discard(stop)
        if result.exit_code >= KILLED_BY_SIGNAL and not result.timed_out:
            # Killed by a signal: a pod deleted (or evicted) mid-exec looks like this too, and then
            # the exit code is the infrastructure's doing; one GET tells the two apart.
            await self.backend.check_pod(self.id)
        return result

    async def exec(
        self,
        cmd: Sequence[str] | str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if not argv:
            raise InvalidArgument("exec: empty command")
        now = time.monotonic()
        deadline = self.deadline if timeout_s is None else min(now + timeout_s, self.deadline)
        if deadline <= now:
            return ExecResult(137, b"", b"sandbox lifetime exceeded\n", 0.0, timed_out=True)
        check_env(env or {}, "exec env")
        full_env = {"HOME": self.spec.home, "TMPDIR": "/tmp", **self.spec.env, **(env or {})}
        cwd = sandbox_path(cwd or self.spec.workdir, what="cwd")
        return await self._run(
            argv,
            env=full_env,
            cwd=cwd,
            stdin=stdin,
            deadline=deadline,
            max_out=self.backend.cfg.max_output_bytes,
        )

    async def _file_op(self, script: str, *args: str, stdin: bytes | None = None, max_out: int = 1 << 20):
        return await self._run(
            ["sh", "-c", script, "clawgym-files", *args],
            env={},
            cwd="/",
            stdin=stdin,
            deadline=time.monotonic() + FILE_OP_TIMEOUT_S,
            max_out=max_out,
        )

    async def _untar(self, data: bytes, dest: str) -> None:
        result = await self._file_op(_PUT, dest, stdin=data)
        if result.timed_out:
            raise SandboxFailed(f"copying into {dest} in pod {self.id} timed out")
        if result.exit_code != 0:
            raise InvalidArgument(
                f"cannot put files into {dest}: {result.stderr.decode(errors='replace').strip()}"
            )

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        _, parts = locate(self.spec, path)
        if not parts:
            raise InvalidArgument(f"{path} is a sandbox directory, not a file path")
        parent, name = posixpath.split(sandbox_path(path))
        await self._untar(archive.tar_of_file(name, data, mode), parent)

    async def put_dir(self, local_dir: Path, dest: str) -> None:
        locate(self.spec, dest)
        data = await asyncio.to_thread(archive.tar_of_dir, Path(local_dir))
        await self._untar(data, sandbox_path(dest))

    async def get_file(self, path: str) -> bytes:
        locate(self.spec, path)
        limit = self.backend.cfg.max_get_bytes
        result = await self._file_op(_GET_FILE, sandbox_path(path), max_out=limit)
        return self._checked(result, path, limit)

    async def read_ends(self, path: str, head: int, tail: int) -> FileEnds:
        locate(self.spec, path)
        args, limit = file_ends.script_args(path, head, tail), file_ends.output_limit(head, tail)
        result = await self._file_op(file_ends.SCRIPT, *args, max_out=limit)
        return file_ends.from_output(result, path, head, tail)

    async def get_tar(self, path: str) -> bytes:
        locate(self.spec, path)
        norm = sandbox_path(path)
        parent, name = posixpath.split(norm)
        if name.startswith("-"):
            raise InvalidArgument(f"{path}: names starting with '-' cannot be archived")
        limit = self.backend.cfg.max_get_bytes
        result = await self._file_op(_GET_TAR, norm, parent or "/", name or ".", max_out=limit)
        return self._checked(result, path, limit)

    def _checked(self, result: ExecResult, path: str, limit: int) -> bytes:
        file_ends.check_exit(result, path, missing="nothing there in the sandbox")
        if result.truncated:
            raise InvalidArgument(f"{path}: larger than max_get_bytes={limit}")
        return result.stdout

    async def reset_dir(self, path: str) -> None:
        _, nested = writable_dir(self.spec, path)
        # processes outlive their exec here: one left running could refill the directory
        await self.backend.call(self.backend.execs.kill_all, self.id)
        result = await self._file_op(_RESET, sandbox_path(path), *nested)
        if result.timed_out or result.exit_code != 0:
            raise SandboxFailed(
                f"cannot empty {path} in pod {self.id}: {result.stderr.decode(errors='replace').strip()}"
            )

    async def seal_dir(self, path: str) -> None:
        # The pod has one uid, so this only clears write bits that uid could set again: the
        # verifier's check of what /tests holds (`tasks.verify`) is what fails closed here.
        writable_dir(self.spec, path)
        result = await self._file_op('chmod -R a-w -- "$1"', sandbox_path(path))
        if result.timed_out or result.exit_code != 0:
            raise SandboxFailed(
                f"cannot seal {path} in pod {self.id}: {result.stderr.decode(errors='replace').strip()}"
            )

    async def destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        for stop in list(self._stops):
            stop.set()
        try:
            await self.backend.delete_pod(self.id)
        finally:
            self.backend.forget(self.id)
