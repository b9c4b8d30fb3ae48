"""The deployment on Kubernetes (k8s-local): the in-cluster training run with its chaos, then rollout
throughput with 1 vs 2 inference replicas side by side, sandbox pod start and weight-publish latency.

    .venv/bin/python bench/cluster.py [--steps 8] [--rollouts 8] [--rounds 2] [--no-chaos]

1. `helm install` of values-k8s-local.yaml (the whole system, deploy/k8s_local_run.py) and its GRPO
   run to the end while an inference pod, a proxy pod, the trainer pod and the orchestrator pod are
   deleted (tests/deploy/test_cluster_run.py asserts the same run): steps, the versions every
   replica served, calls a witness harness got answers for but PostgreSQL lacks, groups trained
   twice, the seconds from a checkpoint's registration to every replica serving it, and each
   rollout's sandbox pod start (create to ready for exec, the orchestrator's `sandbox_start_s`).
2. Two more releases without a trainer, one with 1 inference replica and one with 2, installed
   together; the same batch of rollouts (reference harness, mini tasks) alternates between them
   `--rounds` times: rollouts per minute of each and their ratio.
3. The CPU the cluster itself takes (apiserver, etcd, controller-manager, scheduler, kubelet,
   containerd) over the whole bench, in cores.

Needs root, k8s-local (tests/k8s_cluster.sh prepare) and the Docker engine of ../shared/docker-local
for the PostgreSQL/Redis stand-ins. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.k8s_local_run import ClusterRelease, kube_env, run_with_chaos  # noqa: E402

CLUSTER_DAEMONS = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kubelet", "containerd")


def cluster_cpu_seconds() -> float:
    """User + system CPU seconds of the cluster's own daemons (children included), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            if name not in CLUSTER_DAEMONS:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] if xs else float("nan")


def up_cluster() -> tuple[str, Path]:
    """Leases the cluster (tests/k8s_cluster.sh up) for this process; returns kubeconfig, tools dir."""
    done = subprocess.run(
        ["bash", str(REPO / "tests" / "k8s_cluster.sh"), "up", str(os.getpid())],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    tools = Path(os.environ.get("K8S_LOCAL_DIR", Path.home() / ".cache" / "k8s-local")) / "tools"
    return done.stdout.strip().splitlines()[-1], tools


def build_images() -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "k8s_local_image.py"), "--standins"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def chaos_figures(r: ClusterRelease, chaos: bool) -> dict:
    run = run_with_chaos(r, chaos=chaos)
    if not run.finished:
        raise SystemExit(f"the in-cluster run did not finish (pods deleted: {run.killed})\n{r.report()}")
    published = r.published(run.run_id)
    targets = r.inference_targets()
    served_by_all = sorted(set(published).intersection(*(run.watch.versions(t) for t in targets)))
    publish_s = []
    for v, at in published.items():
        firsts = [run.watch.first_at(t, v) for t in targets]
        if all(f is not None and f >= at - 1 for f in firsts):
            publish_s.append(max(firsts) - at)
    twice = sum(trained - consumed for trained, consumed in r.groups_taken_again(run.run_id).values())
    starts = [t.get("sandbox_start_s") for (t,) in r.query("SELECT timings FROM rollouts WHERE timings IS NOT NULL")]
    starts_ms = [1000 * s for s in starts if s is not None]
    return {
        "steps": len(published),
        "chaos": sorted(run.killed),
        "run_s": round(run.seconds, 1),
        "replicas": len(targets),
        "versions_served_by_all": served_by_all,
        "calls_acknowledged": len(run.witness.acknowledged),
        "calls_lost": len(run.calls_lost(r)),
        "groups_trained_twice": twice,
        "checkpoint_to_all_replicas_s_p50": round(statistics.median(publish_s), 2) if publish_s else None,
        "checkpoint_to_all_replicas_s_max": round(max(publish_s), 2) if publish_s else None,
        "pod_start_p50_ms": round(percentile(starts_ms, 0.5)),
        "pod_start_p99_ms": round(percentile(starts_ms, 0.99)),
        "pod_starts": len(starts_ms),
    }


def rollouts_per_min(r: ClusterRelease, tasks: list[str]) -> float:
    """One batch of rollouts (one per task, reference harness) through the release's orchestrator."""
    from clawgym.orchestrator.grpc_client import OrchestratorClient
    from clawgym.orchestrator.interface import Batch, RolloutRequest
    from clawgym.store.sql import SqlStore

    store = SqlStore(r.db_url)
    try:
        run_id = store.create_run(f"bench-throughput-{time.time_ns()}", {"kind": "bench"}).id
    finally:
        store.close()
    client = OrchestratorClient(f"127.0.0.1:{r.ports['orchestrator.port']}", secret=r.rpc_secret)
    batch = Batch(run_id, [RolloutRequest(t, "reference") for t in tasks], proxy_url=r.proxy_url)

    async def run() -> list:
        return [s async for s in client.run_rollouts(batch) if s.state in ("finished", "failed", "cancelled")]

    started = time.monotonic()
    finals = asyncio.run(run())
    seconds = time.monotonic() - started
    ok = sum(1 for s in finals if s.state == "finished")
    return 60 * ok / seconds


def release_without_trainer(kube: dict, image: str, replicas: int) -> ClusterRelease:
    folder = Path(tempfile.mkdtemp(prefix="cg-bench-"))
    return ClusterRelease(kube, image, folder, inference_replicas=replicas, extra_sets={"trainer.enabled": "false"})


def throughput(kube: dict, image: str, n: int, rounds: int) -> dict:
    from clawgym.evaluation.select import eval_tasks

    tasks = [t.id for t in eval_tasks("mini", n, split="train")]
    releases = {k: release_without_trainer(kube, image, k) for k in (1, 2)}
    rates: dict[int, list[float]] = {1: [], 2: []}
    try:
        for r in releases.values():
            r.install()
        for _ in range(rounds):
            for k, r in releases.items():
                rates[k].append(rollouts_per_min(r, tasks))
                print(f"cluster.py: {k} replica(s): {rates[k][-1]:.1f} rollouts/min", file=sys.stderr)
    finally:
        for r in releases.values():
            r.uninstall()
    one, two = statistics.mean(rates[1]), statistics.mean(rates[2])
    return {
        "rollouts_per_min_1": round(one, 2),
        "rollouts_per_min_2": round(two, 2),
        "rollouts_per_min_2_vs_1": round(two / one, 3) if one else None,
        "throughput_rollouts_per_batch": len(tasks),
        "throughput_rounds": rounds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rollouts", type=int, default=8, help="rollouts per throughput batch")
    parser.add_argument("--rounds", type=int, default=2, help="batches per release, alternating")
    parser.add_argument("--no-chaos", action="store_true", help="the training run without deleting pods")
    args = parser.parse_args(argv)
    cpu0, wall0 = cluster_cpu_seconds(), time.monotonic()
    kubeconfig, tools = up_cluster()
    kube = kube_env(kubeconfig, tools)
    image = build_images()
    figures: dict = {}
    r = ClusterRelease(kube, image, Path(tempfile.mkdtemp(prefix="cg-bench-ckpt-")), steps=args.steps)
    try:
        figures["install_s"] = round(r.install(), 1)
        figures |= chaos_figures(r, chaos=not args.no_chaos)
    finally:
        r.uninstall()
    figures |= throughput(kube, image, args.rollouts, args.rounds)
    cpu = cluster_cpu_seconds() - cpu0
    figures["cluster_daemons_cores"] = round(cpu / (time.monotonic() - wall0), 3)
    figures["machine_cores"] = os.cpu_count()
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
