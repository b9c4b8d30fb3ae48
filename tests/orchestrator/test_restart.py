"""A restarted orchestrator reaps the sandboxes its killed predecessor left, and only those."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from clawgym.orchestrator.grpc_client import OrchestratorClient
from clawgym.orchestrator.interface import Batch, RolloutRequest
from clawgym.sandbox import LocalSandboxConfig, SandboxConfig, SandboxSpec
from clawgym.sandbox.local import LocalBackend
from clawgym.store.sql import SqlStore

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def sandboxes_in(root: Path) -> list[Path]:
    return [p for p in root.iterdir() if (p / "meta.json").is_file()]


def start_service(port: int, pg_url: str, root: Path, owner: str, secret: str) -> subprocess.Popen:
    """`python -m clawgym_services.orchestrator` (the `clawgym serve orchestrator` entry point)."""
    env = {
        **os.environ,
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


def test_a_restarted_orchestrator_reaps_the_sandboxes_its_killed_predecessor_left(
    pg_url, sandbox_root, suite, free_port, make_orchestrator, rpc_secret
):
    """Kill -9 the service while two rollouts run: their sandboxes stay on disk. A new orchestrator
    with the same owner deletes both at start; a sandbox of another owner in the same root survives."""
    owner = "restart-test"
    store = SqlStore(pg_url)
    run = store.create_run("restart")
    proc = start_service(free_port, pg_url, sandbox_root, owner, rpc_secret)
    try:

        async def two_running() -> None:
            client = OrchestratorClient(f"127.0.0.1:{free_port}", secret=rpc_secret)
            batch = Batch(run.id, [RolloutRequest("sleep-long", "oracle", samples=2)], suite=str(suite))
            running = 0
            async for status in client.run_rollouts(batch):
                running += status.state == "running"
                if running == 2:
                    # let the solutions start (a bwrap killed mid-start-up misses its parent's death)
                    await asyncio.sleep(1.5)
                    os.kill(proc.pid, signal.SIGKILL)  # no chance to clean up
                    return

        asyncio.run(two_running())
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
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
    remaining = sandboxes_in(sandbox_root)
    assert [p.name for p in remaining] == [theirs.id], (
        f"only the other owner's sandbox is left, found {[p.name for p in remaining]}"
    )
    assert time.monotonic() - started < 60, "reaping does not wait for the orphans' 120 s commands"
    store.close()
