"""The chart installed on k8s-local as a whole system, for tests/deploy/test_cluster_run.py and bench/cluster.py.

`ClusterRelease.install()` runs `helm install` of helm/clawgym with values-k8s-local.yaml (the chart's
PostgreSQL and Redis, 2 inference and 2 proxy replicas, the orchestrator and the trainer's GRPO run),
on free host ports (every pod shares the host network there), in a fresh namespace. Everything the
checks read comes from the release's own services, reached on 127.0.0.1: PostgreSQL (the store's
tables), each inference replica's gRPC `Status`, the proxy's HTTP API.

`ReplicaWatch` polls every inference replica's served version in a thread (the versions each one
reported; `ClusterRelease.loads` reads a replica's whole record of loads from its log); `Witness`
is a harness of our own calling the proxy through the run (every answer it got must be in
PostgreSQL afterwards).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

from clawgym_app.runtime.services import free_port
from deploy.k8s_local_image import k8s_local_dir

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "helm" / "clawgym"
RELEASE = "cg"
PREFIX = f"{RELEASE}-clawgym"
LOADED = re.compile(r"policy version (\d+) loaded")  # the inference service's log line of a load


def _unix_time(stamp: str) -> float:
    """time.time() of a `kubectl logs --timestamps` stamp (RFC 3339, nanoseconds, UTC)."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    at = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
    return at + float(f"0.{fraction or 0}")


@dataclass
class ClusterRelease:
    """One install of the chart on k8s-local; `kube_env` has KUBECONFIG and helm/kubectl on PATH."""

    kube_env: dict[str, str]
    image: str  # localhost/clawgym:<tag>
    checkpoints_dir: Path
    namespace: str = field(default_factory=lambda: f"cg-run-{uuid.uuid4().hex[:6]}")
    inference_replicas: int = 2
    proxy_replicas: int = 2
    steps: int = 8
    extra_sets: dict[str, str] = field(default_factory=dict)
    db_password: str = field(default_factory=lambda: secrets.token_hex(12))
    rpc_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = {
                "store.port": free_port(),
                "store.metricsPort": free_port(),
                "inference.port": free_port(4),
                "inference.metricsPort": free_port(4),
                "proxy.port": free_port(),
                "orchestrator.port": free_port(),
                "orchestrator.metricsPort": free_port(),
                "trainer.port": free_port(),
                "trainer.metricsPort": free_port(),
                "trainer.rdzvPort": free_port(),
                "postgresql.port": free_port(),
                "redis.port": free_port(),
            }

    # --- helm and kubectl -----------------------------------------------------------------------

    def run(self, *cmd: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(cmd, env=self.kube_env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])} … failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return done

    def sets(self) -> dict[str, str]:
        repo, tag = self.image.rsplit(":", 1)
        values = {
            "image.tag": tag,
            "inference.replicas": str(self.inference_replicas),
            "proxy.replicas": str(self.proxy_replicas),
            "checkpoints.hostPath": str(self.checkpoints_dir),
            "postgresql.password": self.db_password,
            "rpc.secret": self.rpc_secret,
            "trainer.runConfig.trainer.steps": str(self.steps),
            "trainer.runConfig.trainer.run_name": f"k8s-{self.namespace}",
            **{f"{c}.image.repository": repo for c in ("store", "inference", "proxy", "orchestrator", "trainer")},
            **{k: str(v) for k, v in self.ports.items()},
        }
        return {**values, **self.extra_sets}

    def helm(self, verb: str, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess:
        cmd = ["helm", verb, RELEASE, str(CHART), "-n", self.namespace, "-f", str(CHART / "values-k8s-local.yaml")]
        for k, v in self.sets().items():
            cmd += ["--set", f"{k}={v}"]
        return self.run(*cmd, *extra, timeout=timeout)

    def install(self, wait_s: int = 600) -> float:
        """`helm install --wait`; returns its seconds. The checkpoint folder is made fresh."""
        self.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        self.run("kubectl", "create", "namespace", self.namespace)
        self.run("kubectl", "label", "namespace", self.namespace, f"clawgym.dev/namespace={self.namespace}")
        started = time.monotonic()
        self.helm("install", "--wait", "--timeout", f"{wait_s}s", timeout=wait_s + 60)
        return time.monotonic() - started

    def uninstall(self) -> None:
        self.run("helm", "uninstall", RELEASE, "-n", self.namespace, "--timeout", "60s", check=False)
        self.run(
            "kubectl", "delete", "namespace", self.namespace, f"{self.namespace}-sandboxes",
            "--wait=false", "--ignore-not-found", check=False,
        )  # fmt: skip

    def pods(self, component: str = "", namespace: str = "") -> list[dict]:
        selector = ["-l", f"app.kubernetes.io/component={component}"] if component else []
        out = self.run("kubectl", "get", "pods", "-n", namespace or self.namespace, *selector, "-o", "json").stdout
        return json.loads(out)["items"]

    def kill_pod(self, name: str, namespace: str = "", *, at_once: bool = False) -> float:
        """`kubectl delete pod --grace-period=0 --force`: the pod is gone from the API at once (no
        SIGTERM grace; its processes live on until kubelet kills them, a second or two later);
        returns when (time.time()). `at_once`: its containers' processes are SIGKILLed first, on
        the node (what a node's crash does), so nothing of the pod runs after this returns."""
        namespace = namespace or self.namespace
        at = time.time()
        if at_once:
            self.kill_containers(name, namespace)
        # a sandbox pod may end between being listed and being deleted: a deletion that then cuts
        # nothing is counted as missed and made again (`run_with_chaos`), not an error
        self.run(
            "kubectl", "delete", "pod", name, "-n", namespace, "--grace-period=0", "--force", "--ignore-not-found"
        )  # fmt: skip
        return at

    def kill_containers(self, pod: str, namespace: str = "") -> list[str]:
        """SIGKILLs every process of the pod's running containers through k8s-local's containerd
        (`ctr tasks kill --all`: a container's PID 1 included, which a signal from inside it cannot
        kill); returns the containers' ids."""
        statuses = json.loads(
            self.run("kubectl", "get", "pod", pod, "-n", namespace or self.namespace, "-o", "json").stdout
        )["status"].get("containerStatuses", [])
        ids = [c["containerID"].partition("://")[2] for c in statuses if "running" in c.get("state", {})]
        ctr = ("ctr", "-a", str(k8s_local_dir() / "run" / "containerd.sock"), "-n", "k8s.io")
        for cid in ids:
            self.run(*ctr, "tasks", "kill", "--all", "--signal", "SIGKILL", cid)
        return ids

    def loads(self, pod: str) -> list[tuple[float, int]]:
        """(time.time(), version) of each checkpoint inference pod `pod` loaded, from its own log
        (`policy version N loaded`, stamped by the container runtime): the replica's whole record,
        which polling its `Status` can miss where versions follow each other fast."""
        logs = self.run("kubectl", "logs", "-n", self.namespace, pod, "--timestamps").stdout
        loaded = []
        for line in logs.splitlines():
            stamp, _, message = line.partition(" ")
            found = LOADED.search(message)
            if found:
                loaded.append((_unix_time(stamp), int(found.group(1))))
        return loaded

    def report(self) -> str:
        """Pod states and the log tails of every clawgym pod: what a failed check shows."""
        lines = [self.run("kubectl", "get", "pods", "-n", self.namespace, "-o", "wide", check=False).stdout]
        for pod in self.pods():
            name = pod["metadata"]["name"]
            for previous in ("", "--previous"):
                logs = self.run(
                    "kubectl", "logs", "-n", self.namespace, name, "--all-containers", "--tail=30",
                    *([previous] if previous else []), check=False,
                ).stdout  # fmt: skip
                if logs:
                    lines.append(f"--- {name} {previous}:\n{logs[-4000:]}")
        return "\n".join(lines)

    # --- the release's services, from the host ------------------------------------------------------

    @property
    def db_url(self) -> str:
        return f"postgresql+psycopg://clawgym:{self.db_password}@127.0.0.1:{self.ports['postgresql.port']}/clawgym"

    @property
    def proxy_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['proxy.port']}"

    def inference_targets(self) -> list[str]:
        base = self.ports["inference.port"]
        return [f"127.0.0.1:{base + i}" for i in range(self.inference_replicas)]

    def query(self, sql: str, **params: object) -> list[tuple]:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.db_url, pool_pre_ping=True)
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(text(sql), params)]
        finally:
            engine.dispose()

    def training_run_id(self) -> str:
        rows = self.query("SELECT id FROM runs WHERE name = :n", n=f"k8s-{self.namespace}")
        return rows[0][0] if rows else ""

    def versions(self, run_id: str) -> list[int]:
        return [r[0] for r in self.query("SELECT version FROM checkpoints WHERE run_id = :r ORDER BY version", r=run_id)]

    def published(self, run_id: str) -> dict[int, float]:
        """version → when its checkpoint was registered (time.time())."""
        return dict(self.query("SELECT version, created_at FROM checkpoints WHERE run_id = :r", r=run_id))

    def groups_taken_again(self, run_id: str) -> dict[int, tuple[int, int]]:
        """version → (groups it trained, groups naming it as their consumer), where fewer name it
        than it trained: a later step consumed some of them again."""
        short = {}
        for version, metrics in self.query("SELECT version, metrics FROM checkpoints WHERE run_id = :r", r=run_id):
            consumed = self.query(
                "SELECT count(*) FROM groups WHERE run_id = :r AND consumed_version = :v", r=run_id, v=version
            )[0][0]
            if consumed < metrics["groups"]:
                short[version] = (metrics["groups"], consumed)
        return short

    def response_ids(self, rollout_id: str) -> set[str]:
        """The ids of the answers recorded for a rollout's calls."""
        return {resp["id"] for (resp,) in self.query("SELECT response FROM calls WHERE rollout_id = :r", r=rollout_id)}


@dataclass
class Background:
    """`_loop` in a daemon thread from `start()` until `stop()` (which waits for it to end)."""

    _stop: threading.Event = field(default_factory=threading.Event, kw_only=True)
    _thread: threading.Thread | None = field(default=None, kw_only=True)

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 60) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        raise NotImplementedError


@dataclass
class ReplicaWatch(Background):
    """Each inference replica's served version, polled every `interval_s` (gRPC `Status`, with the
    release's rpc secret): `seen[target]` = (time.time(), version) of each change it reported."""

    targets: list[str]
    secret: str
    interval_s: float = 0.25
    seen: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    def _loop(self) -> None:
        asyncio.run(self._poll_async())

    async def _poll_async(self) -> None:
        # one poller per replica: a dead one's timeouts must not space out the others' polls
        await asyncio.gather(*(self._poll_one(t) for t in self.targets))

    async def _poll_one(self, target: str) -> None:
        from clawgym.inference.grpc_client import GrpcEngine

        engine = GrpcEngine(target, secret=self.secret, status_timeout_s=2.0)
        while not self._stop.is_set():
            try:
                version = (await engine.status()).policy_version
            except Exception:  # a replica down or restarting: nothing reported
                pass
            else:
                history = self.seen.setdefault(target, [])
                if not history or history[-1][1] != version:
                    history.append((time.time(), version))
            await asyncio.sleep(self.interval_s)

    def versions(self, target: str) -> set[int]:
        return {v for _, v in self.seen.get(target, [])}

    def first_at(self, target: str, version: int) -> float | None:
        return next((t for t, v in self.seen.get(target, []) if v >= version), None)


@dataclass
class Witness(Background):
    """A harness of our own: an Anthropic Messages client calling the proxy in a loop with one
    rollout's key, keeping the id of every answer it got (what "acknowledged" means to a harness)."""

    proxy_url: str
    api_key: str
    acknowledged: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def _loop(self) -> None:
        import httpx

        n = 0
        while not self._stop.is_set():
            n += 1
            body = {
                "model": "policy",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": f"witness call {n}: say ok"}],
            }
            try:
                r = httpx.post(
                    f"{self.proxy_url}/v1/messages",
                    json=body,
                    headers={"x-api-key": self.api_key, "anthropic-version": "2023-06-01"},
                    timeout=60,
                )
                if r.status_code == 200:
                    self.acknowledged.append(r.json()["id"])
                else:
                    self.errors.append(f"{r.status_code} {r.text[:200]}")
            except Exception as e:  # a proxy pod killed mid-call: no answer, nothing acknowledged
                self.errors.append(repr(e)[:200])
            self._stop.wait(0.5)


def register_witness(db_url: str) -> tuple[str, str]:
    """(rollout id, API key) of an ad-hoc rollout in the release's store (as `clawgym session new`)."""
    from clawgym.records import RolloutSpec
    from clawgym.store.sql import SqlStore

    store = SqlStore(db_url)
    try:
        run = store.create_run("k8s-witness", {"kind": "manual-capture", "harness": "witness"})
        spec = RolloutSpec(group_id=f"witness-{uuid.uuid4().hex[:8]}", task_id="witness", harness="witness")
        registered = store.register_rollouts(run.id, [spec])[0]
        store.start_rollout(registered.rollout_id, sandbox="manual")
        return registered.rollout_id, registered.token
    finally:
        store.close()


@dataclass
class ChaosRun:
    """What `run_with_chaos` saw: the training run, when each pod was deleted, the watchers."""

    run_id: str
    finished: bool
    killed: dict[str, float]  # component -> time.time() of its pod's (latest) deletion
    pods: dict[str, str]  # component -> the pod deleted
    kills: dict[str, int]  # component -> deletions of its pod (the orchestrator's may repeat)
    watch: ReplicaWatch
    witness: Witness
    witness_rollout: str
    seconds: float

    def calls_lost(self, r: ClusterRelease) -> list[str]:
        """Answers the witness got whose call is not in PostgreSQL."""
        stored = r.response_ids(self.witness_rollout)
        return [a for a in self.witness.acknowledged if a not in stored]


def run_with_chaos(r: ClusterRelease, deadline_s: float = 1800, chaos: bool = True) -> ChaosRun:
    """Follows the release's training run to its end (finished and evaluated at its last version),
    deleting an inference, a proxy, the trainer, a sandbox and the orchestrator pod at different
    moments (`_chaos_step`); an inference-replica watch and a witness harness run throughout."""
    started = time.monotonic()
    watch = ReplicaWatch(r.inference_targets(), r.rpc_secret).start()
    witness_rollout, key = register_witness(r.db_url)
    witness = Witness(r.proxy_url, key).start()
    killed: dict[str, float] = {}
    pods: dict[str, str] = {}
    kills: Counter[str] = Counter()
    run_id, finished = "", False
    try:
        while time.monotonic() - started < deadline_s and not finished:
            time.sleep(1)
            run_id = run_id or r.training_run_id()
            if not run_id:
                continue
            v = max(r.versions(run_id), default=0)
            if chaos:
                _chaos_step(r, run_id, v, killed, pods, kills)
            status = r.query("SELECT status FROM runs WHERE id = :r", r=run_id)[0][0]
            final_eval = r.query(
                "SELECT count(*) FROM evals WHERE run_id = :r AND version = :v", r=run_id, v=r.steps
            )[0][0]
            finished = status == "finished" and final_eval > 0
    finally:
        witness.stop()
        watch.stop()
    return ChaosRun(
        run_id, finished, killed, pods, dict(kills), watch, witness, witness_rollout, time.monotonic() - started
    )


KILLS_UNTIL_CUT = 4  # deletions of a sandbox pod, or of the orchestrator's, at most until one cuts a rollout


def _chaos_step(
    r: ClusterRelease, run_id: str, version: int, killed: dict[str, float], pods: dict[str, str], kills: Counter[str]
) -> None:
    """Deletes the next pod whose moment has come (at most one per call): inference replica 1 once
    v1 is published, a proxy pod at v2, the trainer at v3, the sandbox pod of the newest running
    rollout from v4, the orchestrator from v5 while rollouts run, once the rollout that sandbox
    deletion cut has ended (the last two while training runs, so the rollouts they cut are retried
    in their groups).

    A force-deleted pod's process lives on for a second or two (kubelet kills it after the API
    has let the pod go): on a fast machine long enough for a ~1 s rollout to finish uncut, or for
    a deleted orchestrator to finish every rollout it ran. So the orchestrator's processes are
    SIGKILLed on the node first (`at_once`), and a sandbox or orchestrator deletion that cut
    nothing (the rollout in that sandbox finished; the orchestrator's successor is up and failed no
    rollout as cut) is made again while rollouts run, KILLS_UNTIL_CUT times at most; `killed` and
    `pods` keep the latest."""

    def kill(component: str, name: str, namespace: str = "", at_once: bool = False) -> None:
        killed[component], pods[component] = r.kill_pod(name, namespace, at_once=at_once), name
        kills[component] += 1

    def again(component: str, missed: Callable[[], bool]) -> bool:  # missed: of the latest deletion
        return component not in killed or (kills[component] < KILLS_UNTIL_CUT and missed())

    if version >= 1 and "inference" not in killed:
        kill("inference", f"{PREFIX}-inference-1")
    elif version >= 2 and "proxy" not in killed:
        kill("proxy", sorted(p["metadata"]["name"] for p in r.pods("proxy"))[0])
    elif version >= 3 and "trainer" not in killed:
        kill("trainer", f"{PREFIX}-trainer-0")
    elif 4 <= version < r.steps and again("sandbox", lambda: _sandbox_kill_missed(r, run_id, pods["sandbox"])):
        # the pod of the training rollout started last (a warm pool's idle pods run none): it has
        # the most of its sandbox calls still ahead
        newest = r.query(
            "SELECT sandbox FROM rollouts WHERE run_id = :r AND status = 'running' ORDER BY started_at DESC LIMIT 1",
            r=run_id,
        )
        sandboxes = f"{r.namespace}-sandboxes"
        running = {p["metadata"]["name"] for p in r.pods(namespace=sandboxes) if p["status"].get("phase") == "Running"}
        if newest and newest[0][0] in running:
            kill("sandbox", newest[0][0], sandboxes)
    elif (
        5 <= version < r.steps
        and _sandbox_kill_settled(r, run_id, pods["sandbox"])
        and again("orchestrator", lambda: _orchestrator_kill_missed(r, run_id, killed["orchestrator"]))
    ):
        running = r.query("SELECT count(*) FROM rollouts WHERE run_id = :r AND status = 'running'", r=run_id)
        if running[0][0] > 0:  # its process dies at once: the rollouts it runs now are cut
            kill("orchestrator", f"{PREFIX}-orchestrator-0", at_once=True)


def _sandbox_kill_settled(r: ClusterRelease, run_id: str, pod: str) -> bool:
    """The rollouts in `pod` have all ended: an orchestrator deleted before would fail the one its
    deletion cut as the orchestrator's loss, not the pod's."""
    ((unended,),) = r.query(
        "SELECT count(*) FROM rollouts WHERE run_id = :r AND sandbox LIKE :p AND ended_at IS NULL",
        r=run_id,
        p=f"%{pod}%",
    )
    return unended == 0


def _sandbox_kill_missed(r: ClusterRelease, run_id: str, pod: str) -> bool:
    """The rollouts in `pod` have all ended and none failed: its deletion came too late to cut one."""
    ((unended, failed),) = r.query(
        "SELECT count(*) FILTER (WHERE ended_at IS NULL), count(*) FILTER (WHERE status = 'failed')"
        " FROM rollouts WHERE run_id = :r AND sandbox LIKE :p",
        r=run_id,
        p=f"%{pod}%",
    )
    return unended == 0 and failed == 0


def _orchestrator_kill_missed(r: ClusterRelease, run_id: str, at: float) -> bool:
    """The orchestrator's successor (registered after `at`) is up and failed none of the run's
    rollouts as cut by its predecessor's loss."""
    ((successors,),) = r.query("SELECT count(*) FROM orchestrators WHERE started_at > :k", k=at)
    ((cut,),) = r.query(
        "SELECT count(*) FROM rollouts WHERE run_id = :r AND status = 'failed' AND error LIKE '%orchestrator%'",
        r=run_id,
    )
    return successors > 0 and cut == 0


def kube_env(kubeconfig: str, tools: Path) -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": kubeconfig, "PATH": f"{tools}:{os.environ['PATH']}"}
