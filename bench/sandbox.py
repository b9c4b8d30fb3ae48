"""Sandbox speed, local vs kubernetes: create->ready->destroy latency and nop rollouts per minute.

    .venv/bin/python bench/sandbox.py [--latency-n 30] [--k8s auto|on|off] [--kubeconfig PATH]

Latency: one sandbox at a time, the time from `create` (which returns once the sandbox can run a
command: for a pod, once its container runs) through `destroy`. For kubernetes it is measured
cold (a new pod each time) and from a warm pool of 2 (create claims a started pod).

Throughput: N nop rollouts at concurrency 1, 8 and 32, each what the orchestrator will do with
the nop harness: create, put a small task dir, run a `true`-like harness command, put the tests,
run a trivial Python verifier that writes a reward file, read it back, destroy. rollouts/min =
N / wall time. Kubernetes uses k8s-local (leased through tests/k8s_cluster.sh up/down, so a
cluster others use stays up): hostNetwork pods of localhost/python-node:bookworm.

Prints a table; the LAST line is one JSON object of the figures (null where a backend could not run).
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from clawgym.sandbox import KubernetesSandboxConfig, LocalSandboxConfig, SandboxConfig, SandboxSpec
from clawgym.sandbox import make_sandbox_backend as make_backend

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "tests" / "k8s_cluster.sh"
SPEC = SandboxSpec(workdir="/app", mounts=["/tests", "/logs/verifier"], timeout_s=600, harness="nop")
VERIFIER = (
    "import pathlib\n"
    "ok = pathlib.Path('/app/out.txt').read_text().strip() == 'done'\n"
    "pathlib.Path('/logs/verifier/reward.txt').write_text('1.0' if ok else '0.0')\n"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def make_task(root: Path) -> tuple[Path, Path]:
    app, tests = root / "app", root / "tests"
    app.mkdir(parents=True)
    tests.mkdir()
    (app / "instruction.md").write_text("Write 'done' to /app/out.txt.\n")
    (app / "data.txt").write_text("x" * 4096)
    (tests / "verify.py").write_text(VERIFIER)
    return app, tests


async def latency(backend, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        sandbox = await backend.create(SPEC)
        await sandbox.destroy()
        times.append((time.perf_counter() - start) * 1000)
    return times


async def exec_latency(backend, n: int) -> list[float]:
    """ms per `true` in one live sandbox (a bwrap spawn locally, an exec stream in a pod)."""
    sandbox = await backend.create(SPEC)
    times = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            await sandbox.exec(["true"])
            times.append((time.perf_counter() - start) * 1000)
    finally:
        await sandbox.destroy()
    return times


async def nop_rollout(backend, app: Path, tests: Path) -> float:
    sandbox = await backend.create(SPEC)
    try:
        await sandbox.put_dir(app, "/app")
        harness = await sandbox.exec("test -s instruction.md && echo done > out.txt", timeout_s=120)
        await sandbox.put_dir(tests, "/tests")
        verifier = await sandbox.exec(["python3", "/tests/verify.py"], timeout_s=120)
        reward = float(await sandbox.get_file("/logs/verifier/reward.txt"))
        if not (harness.ok and verifier.ok and reward == 1.0):
            raise RuntimeError(f"nop rollout failed: {harness} {verifier} reward={reward}")
        return reward
    finally:
        await sandbox.destroy()


async def throughput(backend, app: Path, tests: Path, concurrency: int, n: int) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one() -> float:
        async with gate:
            return await nop_rollout(backend, app, tests)

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - start) * 60


async def measure(backend, app: Path, tests: Path, latency_n: int, label: str) -> dict:
    figures: dict = {}
    lat = await latency(backend, latency_n)
    figures["p50_ms"], figures["p99_ms"] = statistics.median(lat), percentile(lat, 99)
    print(
        f"{label:>12} create->destroy  p50 {figures['p50_ms']:8.1f} ms   p99 {figures['p99_ms']:8.1f} ms",
        flush=True,
    )
    figures["exec_p50_ms"] = statistics.median(await exec_latency(backend, latency_n))
    print(f"{label:>12} exec `true`      p50 {figures['exec_p50_ms']:8.1f} ms", flush=True)
    for concurrency in (1, 8, 32):
        n = max(8, 2 * concurrency)
        rate = await throughput(backend, app, tests, concurrency, n)
        figures[f"rollouts_per_min_{concurrency}"] = rate
        print(
            f"{label:>12} {n:3d} nop rollouts at concurrency {concurrency:2d}: {rate:8.1f} /min", flush=True
        )
    return figures


def k8s_up(mode: str) -> tuple[str | None, bool]:
    """(kubeconfig, whether we hold a lease on the cluster); (None, False) where it cannot run."""
    if mode == "off" or os.geteuid() != 0:
        return None, False
    done = subprocess.run([str(K8S), "up", str(os.getpid())], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if mode == "on":
            raise SystemExit(f"k8s-local bring-up failed:\n{done.stderr[-3000:]}")
        print(f"kubernetes skipped: bring-up failed ({done.stderr.strip().splitlines()[-1:]})")
        return None, False
    return done.stdout.strip().splitlines()[-1], True


async def main(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="clawgym-bench-"))
    app, tests = make_task(work)
    out: dict = {}
    local = make_backend(SandboxConfig(owner="bench-local", local=LocalSandboxConfig(isolation="bwrap")))
    loc = await measure(local, app, tests, args.latency_n, "local")
    await local.close()
    out.update(local_p50_ms=loc["p50_ms"], local_p99_ms=loc["p99_ms"], local_exec_p50_ms=loc["exec_p50_ms"])
    out.update({k: v for k, v in loc.items() if k.startswith("rollouts_per_min")})

    kubeconfig, leased = (args.kubeconfig, False) if args.kubeconfig else k8s_up(args.k8s)
    out.update(k8s_p50_ms=None, k8s_p99_ms=None, k8s_warm_p50_ms=None, k8s_exec_p50_ms=None)
    if kubeconfig:
        try:
            # requests at 5% of the 1-CPU limit, so 32 pods fit the node's 2 CPUs at once
            k = {
                "request_fraction": 0.05,
                "kubeconfig": kubeconfig,
                "image": args.image,
                "image_pull_policy": "Never",
                "host_network": True,
            }
            cold = make_backend(
                SandboxConfig(
                    backend="kubernetes", owner="bench-k8s", kubernetes=KubernetesSandboxConfig(**k)
                )
            )
            await cold.reap()
            kf = await measure(cold, app, tests, max(5, args.latency_n // 3), "kubernetes")
            await cold.close()
            warm = make_backend(
                SandboxConfig(
                    backend="kubernetes",
                    owner="bench-k8s",
                    kubernetes=KubernetesSandboxConfig(warm_pool=2, **k),
                )
            )
            await (await warm.create(SPEC)).destroy()  # starts the pool
            await asyncio.sleep(5)
            warm_lat = []
            for _ in range(max(5, args.latency_n // 3)):
                warm_lat += await latency(warm, 1)
                await asyncio.sleep(2)  # let the pool refill, as between rollouts
            await warm.close()
            out.update(
                k8s_p50_ms=kf["p50_ms"],
                k8s_p99_ms=kf["p99_ms"],
                k8s_exec_p50_ms=kf["exec_p50_ms"],
                k8s_warm_p50_ms=statistics.median(warm_lat),
            )
            print(f"{'k8s warm':>12} create->destroy  p50 {out['k8s_warm_p50_ms']:8.1f} ms", flush=True)
            out.update({f"k8s_{key}": v for key, v in kf.items() if key.startswith("rollouts_per_min")})
        finally:
            if leased:
                subprocess.run([str(K8S), "down", str(os.getpid())], capture_output=True, check=False)
    if out["k8s_p50_ms"]:
        out["k8s_over_local_latency"] = out["k8s_p50_ms"] / out["local_p50_ms"]
        out["local_over_k8s_rollouts_32"] = out["rollouts_per_min_32"] / out["k8s_rollouts_per_min_32"]
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--latency-n", type=int, default=30, help="create->destroy cycles for the local latency"
    )
    parser.add_argument("--k8s", choices=["auto", "on", "off"], default="auto", help="kubernetes figures")
    parser.add_argument("--kubeconfig", default="", help="use this cluster instead of bringing up k8s-local")
    parser.add_argument("--image", default="localhost/python-node:bookworm", help="sandbox pod image")
    figures = asyncio.run(main(parser.parse_args()))
    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in figures.items()}))
