"""A killed orchestrator's leftovers: a restarted one (same owner) reaps its sandboxes, and only those,
and fails its rollouts left running so their group completes, never rewarded; with several
orchestrator replicas, a live peer does the same once the dead one's lease has run out."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from clawgym.orchestrator.grpc_client import OrchestratorClient
from clawgym.orchestrator.interface import Batch, RolloutRequest
from clawgym.sandbox import LocalSandboxConfig, SandboxConfig, SandboxSpec
from clawgym.sandbox.local import LocalBackend
from clawgym.store.sql import SqlStore
from clawgym.trainer.batch import build_batch
from tests.orchestrator.conftest import write_clawgym_task

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def sandboxes_in(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if (p / "meta.json").is_file()]


def start_service(
    port: int, pg_url: str, root: Path, owner: str, secret: str, lease_s: float = 30.0
) -> subprocess.Popen:
    """`python -m clawgym_services.orchestrator` (the `clawgym serve orchestrator` entry point)."""
    env = {
        **os.environ,
        "CLAWGYM_ORCHESTRATOR__LEASE_S": str(lease_s),
        "CLAWGYM_RPC__SECRET": secret,
        "CLAWGYM_SANDBOX__OWNER": owner,
        "CLAWGYM_SANDBOX__LOCAL__ROOT_DIR": str(root),
        "CLAWGYM_SANDBOX__LOCAL__ISOLATION": "bwrap",
    }
    argv = [sys.executable, "-m", "clawgym_services.orchestrator", "--host", "127.0.0.1", "--port", str(port),
            "--metrics-port", "0", "--store.url", pg_url]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        grpc.channel_ready_future(channel).result(timeout=60)
    except grpc.FutureTimeoutError:
        proc.kill()
        pytest.fail(f"the orchestrator service did not start:\n{proc.communicate()[0].decode()[-3000:]}")
    finally:
        channel.close()
    return proc


def kill_while_two_run(proc: subprocess.Popen, port: int, secret: str, run_id: str, suite: Path) -> set[str]:
    """Starts a group of two long rollouts on the service, kills it -9 once both run; their ids."""
    running: set[str] = set()

    async def two_running() -> None:
        client = OrchestratorClient(f"127.0.0.1:{port}", secret=secret)
        batch = Batch(run_id, [RolloutRequest("sleep-long", "oracle", samples=2)], suite=str(suite))
        async for status in client.run_rollouts(batch):
            if status.state == "running":
                running.add(status.rollout_id)
            if len(running) == 2:
                # let the solutions start (a bwrap killed mid-start-up misses its parent's death)
                await asyncio.sleep(1.5)
                os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up
                return

    try:
        asyncio.run(two_running())
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return running


def assert_failed_unrewarded_and_group_complete(store: SqlStore, run_id: str, rollouts: set[str], why: str) -> None:
    """The killed orchestrator's rollouts ended as infrastructure failures, no reward, group complete and
    consumed by the trainer as empty (nothing trained)."""
    ended = [store.get_rollout(r) for r in sorted(rollouts)]
    assert [(r.status, r.reward, r.passed) for r in ended] == [("failed", None, None)] * 2, ended
    assert all(why in r.error for r in ended), [r.error for r in ended]
    [group_id] = {r.group_id for r in ended}
    assert store.list_unconsumed_groups(run_id) == [group_id], "the group must complete"
    batch = build_batch([store.get_group(group_id)], version=0, max_policy_lag=1, failed_reward=1.0)
    assert not batch.trees and batch.group_ids == [group_id], "consumed, and nothing of it trained"


def test_a_restarted_orchestrator_reaps_its_killed_predecessors_sandboxes_and_fails_its_rollouts(
    pg_url, sandbox_root, suite, free_port, make_orchestrator, rpc_secret
):
    """Kill -9 the service while two rollouts run: their sandboxes stay on disk and the rollouts stay
    'running'. A new orchestrator with the same owner, at start, fails both (infrastructure, no
    reward: their group completes) and deletes both sandboxes; another owner's sandbox survives."""
    owner = "restart-test"
    store = SqlStore(pg_url)
    run = store.create_run("restart")
    proc = start_service(free_port, pg_url, sandbox_root, owner, rpc_secret)
    running = kill_while_two_run(proc, free_port, rpc_secret, run.id, suite)
    assert len(running) == 2 and {store.get_rollout(r).status for r in running} == {"running"}, (
        "test setup: the killed orchestrator left two rollouts running"
    )
    assert store.list_unconsumed_groups(run.id) == [], "test setup: their group is not complete"
    left = sandboxes_in(sandbox_root)
    assert len(left) == 2, f"the killed orchestrator left its two sandboxes behind: {left}"

    stranger = LocalBackend(
        SandboxConfig(owner="someone-else", local=LocalSandboxConfig(root_dir=str(sandbox_root)))
    )
    theirs = asyncio.run(stranger.create(SandboxSpec()))
    sandbox = {"owner": owner, "local": {"root_dir": str(sandbox_root), "isolation": "bwrap"}}
    started = time.monotonic()
    served = make_orchestrator(sandbox=sandbox)
    assert served.orchestrator.reaped == 2, f"reaped {served.orchestrator.reaped} of the predecessor's 2"
    assert set(served.orchestrator.orphans_failed) == running, (
        f"the new orchestrator must fail its predecessor's running rollouts at start: {served.orchestrator.orphans_failed}"
    )
    assert_failed_unrewarded_and_group_complete(store, run.id, running, "(restarted)")
    remaining = sandboxes_in(sandbox_root)
    assert [p.name for p in remaining] == [theirs.id], (
        f"only the other owner's sandbox is left, found {[p.name for p in remaining]}"
    )
    assert time.monotonic() - started < 60, "reaping does not wait for the orphans' 120 s commands"
    store.close()


def test_a_live_orchestrator_replica_fails_a_dead_peers_rollouts_once_its_lease_runs_out(
    pg_url, sandbox_root, suite, free_port, make_orchestrator, rpc_secret
):
    """Two orchestrator replicas (two owners), lease 1.5 s: kill -9 one while two rollouts run; the
    other, heartbeating every 0.5 s, fails them within a few seconds, and their group completes (that
    a live lease is never taken is the store's test_orchestrator_leases)."""
    store = SqlStore(pg_url)
    run = store.create_run("peers")
    survivor = make_orchestrator(lease_s=1.5)
    proc = start_service(free_port, pg_url, sandbox_root, "peer-that-dies", rpc_secret, lease_s=1.5)
    running = kill_while_two_run(proc, free_port, rpc_secret, run.id, suite)
    killed_at = time.monotonic()
    assert len(running) == 2, "test setup: two rollouts were running"
    deadline = killed_at + 30
    while time.monotonic() < deadline and set(survivor.orchestrator.orphans_failed) != running:
        time.sleep(0.1)
    taken_s = time.monotonic() - killed_at
    assert set(survivor.orchestrator.orphans_failed) == running, (
        f"the survivor must fail the dead peer's rollouts: {survivor.orchestrator.orphans_failed}"
    )
    assert taken_s < 10, f"taken {taken_s:.1f} s after the kill (lease 1.5 s, heartbeat 0.5 s)"
    assert_failed_unrewarded_and_group_complete(store, run.id, running, "sent no heartbeat")
    store.close()


def test_a_second_orchestrator_with_the_default_owner_leaves_the_first_ones_rollout_alone(
    make_orchestrator, sandbox_root, tmp_path
):
    """Two orchestrators on one host with the default owner (the host name): the second's start
    used to reap the first's live sandbox (its harness killed mid-rollout, exit 137) and its lease
    to fail the first's running rollout as a restart's leftover. Each is now its own instance and
    lease: the first's rollout runs to its reward, and the second takes nothing."""
    suite = tmp_path / "suite"
    write_clawgym_task(
        suite, "sleep-then-done", "Sleep, then write done.txt.", "sleep 4\necho ok > done.txt\n"
    )
    default_owner = {"local": {"root_dir": str(sandbox_root), "isolation": "bwrap"}}
    first = make_orchestrator(sandbox=default_owner)
    run = first.store.create_run("two-orchestrators")
    batch = Batch(run.id, [RolloutRequest("sleep-then-done", "oracle")], suite=str(suite))
    running = threading.Event()

    async def statuses() -> list:
        seen = []
        async for status in first.orchestrator.run_rollouts(batch):
            seen.append(status)
            if status.state == "running":
                running.set()
        return seen

    pending = asyncio.run_coroutine_threadsafe(statuses(), first.loop)
    assert running.wait(60), "test setup: the first orchestrator's rollout runs"
    time.sleep(1)  # the solution is sleeping in its sandbox now
    second = make_orchestrator(sandbox=default_owner)
    seen = pending.result(timeout=120)
    assert first.orchestrator.backend.owner == second.orchestrator.backend.owner, "test setup: one owner"
    assert (second.orchestrator.reaped, second.orchestrator.orphans_failed) == (0, []), (
        "the second orchestrator takes nothing of the live first one's"
    )
    assert [(s.state, s.attempt) for s in seen][-1] == ("finished", 1), [(s.state, s.error) for s in seen]
    record = first.store.get_rollout(seen[-1].rollout_id)
    assert (record.status, record.reward) == ("finished", 1.0), f"the rollout ran to its reward: {record}"
