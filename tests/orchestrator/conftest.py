"""Fixtures for the orchestrator tests: the real service on a loopback port, real sandboxes, real stores.

- `make_orchestrator(**orchestrator_cfg)` → a `Served` orchestrator: `OrchestratorServer` (the real
  gRPC service) in its own thread and event loop, on a free 127.0.0.1 port, with local bubblewrap
  sandboxes in a throwaway root and a real store (PostgreSQL). `served.client()` is the gRPC
  `OrchestratorClient`; `served.orchestrator` the in-process implementation behind it.
- `beacon`: a TCP server on loopback that counts how many sandboxes hold a connection at once, so
  concurrency is observed from outside the orchestrator, not read from its own counters. It stands
  for the proxy (`orchestrator.proxy_url`): the one address a sandbox can reach.
- `suite`: a task suite written for these tests in the ClawGym format: `hold-beacon` (its solution
  holds a beacon connection for 3 s, then writes done.txt), `sleep-long` (sleeps 120 s) and
  `reach-postgres` (writes done.txt only if it can connect to the host's PostgreSQL port).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clawgym.assemble import build_orchestrator
from clawgym.config import ClawgymConfig
from clawgym.orchestrator.grpc_client import OrchestratorClient
from clawgym.orchestrator.runner import Orchestrator
from clawgym.store.sql import SqlStore
from clawgym_services.orchestrator.server import OrchestratorServer

REWARD_DONE = (
    '#!/usr/bin/env bash\ncd "${1:-.}" || { echo 0.0; exit 0; }\n[ -f done.txt ] && echo 1.0 || echo 0.0\n'
)


def write_clawgym_task(
    root: Path, task_id: str, query: str, solution: str, reward: str = REWARD_DONE
) -> Path:
    """One task folder in the ClawGym format (data_entry.json, reward/reward.sh, solution/solve.sh)."""
    folder = root / task_id
    (folder / "reward").mkdir(parents=True)
    (folder / "solution").mkdir()
    (folder / "data_entry.json").write_text(json.dumps({"id": task_id, "user_query": query}))
    (folder / "reward" / "reward.sh").write_text(reward)
    (folder / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\nset -e\n" + solution)
    return folder


class Beacon:
    """Counts open connections on a loopback port: `peak` is the most that were open at once."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.open = self.peak = self.total = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with self._lock:
            self.open += 1
            self.total += 1
            self.peak = max(self.peak, self.open)
        try:
            while conn.recv(1024):
                pass
        except OSError:
            pass
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def beacon() -> Iterator[Beacon]:
    b = Beacon()
    yield b
    b.close()


@pytest.fixture
def suite(tmp_path: Path, beacon: Beacon) -> Path:
    root = tmp_path / "suite"
    write_clawgym_task(
        root,
        "hold-beacon",
        "Hold the beacon for three seconds.",
        f"exec 3<>/dev/tcp/127.0.0.1/{beacon.port}\nsleep 3\nexec 3>&-\necho ok > done.txt\n",
    )
    write_clawgym_task(root, "sleep-long", "Sleep for two minutes.", "sleep 120\necho ok > done.txt\n")
    write_clawgym_task(
        root,
        "reach-postgres",
        "Connect to the host's PostgreSQL.",
        "if exec 3<>/dev/tcp/127.0.0.1/5432; then echo ok > done.txt; fi\n",
    )
    return root


@pytest.fixture
def sandbox_root() -> Iterator[Path]:
    """Sandbox storage, traversable by sandbox uids (like the default one under /tmp)."""
    root = Path(tempfile.mkdtemp(prefix="clawgym-orch-test-"))
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@dataclass
class Served:
    """An orchestrator service running in a thread of its own."""

    target: str
    orchestrator: Orchestrator
    server: OrchestratorServer
    loop: asyncio.AbstractEventLoop
    store: SqlStore
    cfg: ClawgymConfig

    def client(self) -> OrchestratorClient:
        return OrchestratorClient(self.target, secret=self.cfg.rpc.shared_secret())

    def call(self, coro):
        """Runs a coroutine on the service's own loop (for reading its in-process state)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)


def sandbox_settings(root: Path, owner: str, **local) -> dict:
    return {"owner": owner, "local": {"root_dir": str(root), "isolation": "bwrap", **local}}


@pytest.fixture
def make_orchestrator(
    pg_url: str, sandbox_root: Path, beacon: Beacon, rpc_config: dict
) -> Iterator[Callable[..., Served]]:
    """Starts orchestrator services (each with its own store connection to one PostgreSQL schema),
    the beacon as their proxy unless told otherwise."""
    started: list[tuple[Served, threading.Thread]] = []
    owner = f"orch-test-{uuid.uuid4().hex[:8]}"

    def make(sandbox: dict | None = None, **orchestrator) -> Served:
        cfg = ClawgymConfig(
            store={"url": pg_url},
            rpc=rpc_config,
            sandbox=sandbox or sandbox_settings(sandbox_root, owner),
            orchestrator={
                "host": "127.0.0.1",
                "port": 0,
                "metrics_port": 0,
                "retry_backoff_s": 0.1,
                "proxy_url": f"http://127.0.0.1:{beacon.port}",
                **orchestrator,
            },
        )
        store = SqlStore(pg_url)
        loop = asyncio.new_event_loop()
        ready: dict = {}

        def serve() -> None:
            asyncio.set_event_loop(loop)

            async def boot() -> None:
                server = OrchestratorServer(cfg, build_orchestrator(cfg, store))
                ready["port"] = await server.start()
                ready["server"] = server

            try:
                loop.run_until_complete(boot())
            except Exception as e:  # surfaced to the test below
                ready["error"] = e
                return
            loop.run_forever()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        while not ready:
            thread.join(0.02)
        if "error" in ready:
            raise ready["error"]
        server = ready["server"]
        served = Served(f"127.0.0.1:{ready['port']}", server.orchestrator, server, loop, store, cfg)
        started.append((served, thread))
        return served

    yield make
    for served, thread in reversed(started):
        asyncio.run_coroutine_threadsafe(served.server.stop(grace=1), served.loop).result(timeout=120)
        served.loop.call_soon_threadsafe(served.loop.stop)
        thread.join(timeout=30)
        served.store.close()
