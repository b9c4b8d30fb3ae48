"""One sandbox cannot exhaust the relaying process's file descriptors (hardening: 1,500 connections
from one sandbox took the orchestrator to EMFILE, other sandboxes' execs failed, and asyncio logged
54 MB of accept errors in 25 s).

Reproduced with real sandboxes (bubblewrap; the docker backend on the real engine) flooding the
proxy's port from two execs at once, against a stand-in proxy in its own process on a loopback
port (so its sockets are not counted as the relay's). This process runs with a soft RLIMIT_NOFILE
of 1024, a common default: the flood asks for more than that. Meanwhile a second sandbox must still
reach the proxy, this process's open descriptors must stay within the cap, and the log must say
how many were refused in a few lines. A relay left at the descriptor limit anyway (by many
sandboxes) logs its failed accepts and dials in a few lines too, and does not spin.
"""

import asyncio
import contextlib
import json
import logging
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from clawgym.sandbox import Resources, SandboxSpec
from clawgym.sandbox.relay import ConnectionCap, ProxyRelay, proxy_address
from tests.sandbox.test_docker_backend import make_backend, standin  # noqa: F401 (fixtures)

FLOOD_PER_EXEC = 300  # two execs: 600 connections, 1,200 descriptors unbounded, beyond 1024
SOFT_NOFILE = 1024

# The proxy in its own process: holds every connection, answers GET with "hello-from-proxy", and
# GET /open with how many connections it holds now.
PROXY = """\
import asyncio
held = 0
async def serve(reader, writer):
    global held
    held += 1
    try:
        while True:
            head = await reader.readuntil(b"\\r\\n\\r\\n")
            body = str(held).encode() if head.split(b" ")[1] == b"/open" else b"hello-from-proxy"
            writer.write(b"HTTP/1.1 200 OK\\r\\ncontent-length: %d\\r\\n\\r\\n%s" % (len(body), body))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        held -= 1
        writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=4096)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""

# In the sandbox: opens argv[2] connections to the proxy's port and holds them; touches argv[3]
# when done opening, waits for argv[4] to appear, then prints how many are still connected (a
# refused one was reset or closed by the relay).
FLOOD = """\
import json, os, socket, sys, time
host, port = sys.argv[1].split("//")[1].split(":")
socks, failed = [], 0
deadline = time.monotonic() + 30
for _ in range(int(sys.argv[2])):
    if time.monotonic() > deadline:
        break
    try:
        socks.append(socket.create_connection((host, int(port)), timeout=2))
    except OSError:
        failed += 1
open(sys.argv[3], "w").close()
while not os.path.exists(sys.argv[4]) and time.monotonic() < deadline + 60:
    time.sleep(0.05)
alive = 0
for s in socks:
    s.setblocking(False)
    try:
        alive += s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        alive += 1
    except OSError:
        pass
print(json.dumps({"opened": len(socks), "failed": failed, "alive": alive}))
"""

# A client in its own process (its own descriptors): on a line on stdin, opens argv[2] connections
# to 127.0.0.1:argv[1], says "opened", and holds them until stdin closes.
HOLD = """\
import socket, sys
sys.stdin.readline()
socks = []
for _ in range(int(sys.argv[2])):
    try:
        socks.append(socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1))
    except OSError:
        pass
print("opened", flush=True)
sys.stdin.read()
"""

REFUSED = re.compile(r"refused (\d+) connection\(s\) to the proxy")


def _fetch(url: str) -> str:
    return f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"


def _open_fds() -> float:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return float("inf")  # EMFILE: not even the listing's own descriptor could be opened


@pytest.fixture
def proxy_url() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, "-c", PROXY], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
    finally:
        proc.kill()
        proc.wait()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(logging.Formatter().format(record))


@pytest.fixture
def warnings_logged() -> Iterator[list[str]]:
    """Every warning or worse logged meanwhile, formatted with its traceback (what fills a log file)."""
    records, root = _Records(), logging.getLogger()
    level = root.level
    root.addHandler(records)
    root.setLevel(min(level, logging.WARNING))
    try:
        yield records.lines
    finally:
        root.removeHandler(records)
        root.setLevel(level)


@pytest.fixture
def low_nofile() -> Iterator[None]:
    """This process at a soft RLIMIT_NOFILE of 1024 (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, SOFT_NOFILE), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def _wait_for_file(sandbox, path: str, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while True:
        with contextlib.suppress(Exception):
            await sandbox.get_file(path)
            return
        assert time.monotonic() < deadline, f"{path} never appeared in {sandbox.id}"
        await asyncio.sleep(0.2)


def _flood_while_another_sandbox_works(backend, proxy_url: str, spec: Callable[[], SandboxSpec]) -> dict:
    """Sandbox A floods the proxy's port from two execs; while it holds its connections, sandbox B
    is created and fetches through its own relay. Returns what each side saw."""
    inside = backend.sandbox_proxy_url(proxy_url)

    async def sample(peak: list[float], stop: asyncio.Event) -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _open_fds())
            await asyncio.sleep(0.05)

    async def scenario() -> dict:
        a = await backend.create(spec())
        b = None
        try:
            await a.exec(["python3", "-c", _fetch(inside + "/warm")])  # the first exec's one-offs
            baseline = _open_fds()
            peak, stop = [baseline], asyncio.Event()
            sampler = asyncio.ensure_future(sample(peak, stop))
            floods = [
                asyncio.ensure_future(
                    a.exec(
                        ["python3", "-c", FLOOD, inside, str(FLOOD_PER_EXEC), f"/tmp/flooded-{i}", "/tmp/go"],
                        timeout_s=120,
                    )
                )
                for i in range(2)
            ]
            for i in range(2):
                await _wait_for_file(a, f"/tmp/flooded-{i}", within_s=90)
            b = await backend.create(spec())
            other = await b.exec(["python3", "-c", _fetch(inside + "/hello")], timeout_s=60)
            held = await b.exec(["python3", "-c", _fetch(inside + "/open")], timeout_s=60)
            await a.put_file("/tmp/go", b"")
            flooded = [json.loads((await f).stdout.decode().splitlines()[-1]) for f in floods]
            stop.set()
            await sampler
            after = await a.exec(["python3", "-c", _fetch(inside + "/hello")], timeout_s=60)
            return {
                "baseline": baseline,
                "peak": peak[0],
                "flooded": flooded,
                "other": other,
                "proxy_held": held.stdout.strip(),
                "after": after,
            }
        finally:
            await asyncio.gather(a.destroy(), *([b.destroy()] if b is not None else []))

    return asyncio.run(asyncio.wait_for(scenario(), timeout=300))


def _check(seen: dict, cap: int, logged: list[str]) -> None:
    flooded = seen["flooded"]
    assert seen["peak"] <= seen["baseline"] + 2 * cap + 40, (
        f"this process's open descriptors must stay within the cap (2 per relayed connection): "
        f"{seen['baseline']} before the flood, {seen['peak']} at its peak"
    )
    assert seen["other"].stdout.strip() == b"hello-from-proxy", (
        f"another sandbox reaches the proxy while one floods it: {seen['other']}"
    )
    # B's own fetch is one of them: A holds the cap's worth, B its one
    assert seen["proxy_held"] == str(cap + 1).encode(), f"the proxy held {seen['proxy_held']}"
    # (a connect the reset beat to it counts as failed in the sandbox, but was refused all the same)
    assert sum(f["opened"] + f["failed"] for f in flooded) == 2 * FLOOD_PER_EXEC, flooded
    assert sum(f["alive"] for f in flooded) == cap, (
        f"the cap is per sandbox, both execs together: exactly {cap} relayed, the rest refused: {flooded}"
    )
    assert seen["after"].stdout.strip() == b"hello-from-proxy", (
        f"once the flood ends the sandbox reaches the proxy again (its count went back): {seen['after']}"
    )
    text = "\n".join(logged)
    assert len(logged) <= 8 and len(text) < 4000, (
        f"the log stays a few lines: {len(logged)} lines\n{text[:3000]}"
    )
    refused = sum(int(m.group(1)) for m in REFUSED.finditer(text))
    assert refused == 2 * FLOOD_PER_EXEC - cap, f"the log counts every refused connection:\n{text}"


def test_one_local_sandbox_flooding_the_proxy_port_neither_exhausts_descriptors_nor_starves_others(
    make_local, proxy_url, low_nofile, warnings_logged
):
    backend = make_local()
    cap = backend.cfg.relay_max_connections
    assert cap < 2 * FLOOD_PER_EXEC, "the flood asks for more than the cap"
    seen = _flood_while_another_sandbox_works(
        backend, proxy_url, lambda: SandboxSpec(proxy_url=proxy_url, resources=Resources(open_files=4096))
    )
    _check(seen, cap, warnings_logged)


@pytest.mark.docker
def test_one_docker_sandbox_flooding_the_proxy_port_neither_exhausts_descriptors_nor_starves_others(
    make_backend,  # noqa: F811 (the fixture)
    proxy_url,
    low_nofile,
    warnings_logged,
):
    backend = make_backend()
    cap = backend.cfg.relay_max_connections
    seen = _flood_while_another_sandbox_works(
        backend, proxy_url, lambda: SandboxSpec(workdir="/app", proxy_url=proxy_url)
    )
    _check(seen, cap, warnings_logged)


def test_accept_errors_at_the_descriptor_limit_are_logged_in_a_few_lines_without_spinning(
    proxy_url, warnings_logged
):
    """At this process's descriptor limit (other sandboxes' relays used it up: no cap here), accepts
    and dials fail for each of 300 waiting connections. Each kind is logged in a line or two with
    counts, not one per connection (asyncio's server logged every failed accept with a traceback);
    the relay waits between failed accepts instead of spinning, and serves again once descriptors
    are free."""
    target = proxy_address(proxy_url)

    async def scenario() -> dict:
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        port = listener.getsockname()[1]
        relay = asyncio.ensure_future(
            ProxyRelay(target, ConnectionCap("flooder", 10_000)).serve_listener(listener)
        )
        client = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HOLD, str(port), "300", stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert client.stdin is not None and client.stdout is not None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (int(_open_fds()) + 9, hard))
            client.stdin.write(b"go\n")
            await client.stdin.drain()
            assert await asyncio.wait_for(client.stdout.readline(), 60) == b"opened\n"
            cpu = time.process_time()
            await asyncio.sleep(3)  # the relay keeps failing: at most a few accepts a second
            cpu = time.process_time() - cpu
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        try:
            hello = await asyncio.wait_for(asyncio.to_thread(_get, f"http://127.0.0.1:{port}/hello"), 60)
        finally:
            client.stdin.close()
            await client.wait()
            relay.cancel()
            await asyncio.gather(relay, return_exceptions=True)
        return {"cpu": cpu, "hello": hello}

    seen = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    text = "\n".join(warnings_logged)
    assert "Too many open files" in text, f"the failures are logged, saying why:\n{text}"
    assert len(warnings_logged) <= 6 and len(text) < 3000, (
        f"a few lines with counts, not one per connection: {len(warnings_logged)} lines\n{text[:3000]}"
    )
    assert seen["cpu"] < 0.5, f"the relay spun on its failing listener: {seen['cpu']:.2f} s of CPU in 3 s"
    assert seen["hello"] == "hello-from-proxy", "with descriptors free again, the relay serves again"


def _get(url: str) -> str:
    import urllib.request

    return urllib.request.urlopen(url, timeout=30).read().decode()
