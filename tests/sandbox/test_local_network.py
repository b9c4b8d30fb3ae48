"""A local sandbox reaches the proxy and nothing else (issue #16: sandboxes shared the host network).

The attacks ran from inside a rollout: PostgreSQL and Redis on the host's loopback (trust auth, no
password), any other host port, the internet. Each is reproduced here from inside a real bubblewrap
sandbox with network="proxy", against the real services (their fixtures fail if they are down, and
the host itself connects to each, so a refusal inside is the sandbox's doing). The proxy is a real
HTTP server on a host loopback port; a streamed answer must pass through the relay chunk by chunk.
"""

import asyncio
import http.server
import json
import logging
import socket
import threading
from urllib.parse import urlsplit

import pytest
from sqlalchemy.engine import make_url

from clawgym.sandbox import LocalSandboxConfig, SandboxConfig, SandboxFailed, SandboxSpec
from clawgym.sandbox.local import LocalBackend

# The outside world: TEST-NET-1 (RFC 5737) is never routed, so no packet reaches a real host.
OUTSIDE = ("192.0.2.1", 80)

# Run in the sandbox: tries each (host, port) with a 2 s timeout, prints {"host:port": outcome}.
PROBE = """\
import json, socket, sys
outcome = {}
for host, port in json.loads(sys.argv[1]):
    try:
        socket.create_connection((host, port), timeout=2).close()
        outcome[f"{host}:{port}"] = "connected"
    except OSError as e:
        outcome[f"{host}:{port}"] = type(e).__name__
for path in json.loads(sys.argv[2]):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        outcome[path] = "connected"
    except OSError as e:
        outcome[path] = type(e).__name__
print(json.dumps(outcome))
"""

# Run in the sandbox: GET /stream, read its first chunk, then GET /release (through the relay
# too) to let the server send the rest; a relay that buffered the answer would never deliver the
# first chunk, and the server would time out waiting for the release.
STREAM = """\
import http.client, sys, urllib.request
host, port = sys.argv[1].split("//")[1].split(":")
conn = http.client.HTTPConnection(host, int(port), timeout=20)
conn.request("GET", "/stream")
reply = conn.getresponse()
chunks = [reply.read1(100).decode()]
urllib.request.urlopen(sys.argv[1] + "/release", timeout=20).read()
while chunk := reply.read1(100):
    chunks.append(chunk.decode())
print("|".join(chunks))
"""


class FakeProxy(http.server.BaseHTTPRequestHandler):
    """Stands for the proxy: /hello, and /stream, whose later chunks wait for /release."""

    protocol_version = "HTTP/1.1"
    released = threading.Event()

    def do_GET(self):
        if self.path == "/release":
            type(self).released.set()
            self._send(b"released")
        elif self.path == "/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._chunk(b"one;")
            if not type(self).released.wait(timeout=20):
                return  # the first chunk never got through: the answer stays incomplete
            for part in (b"two;", b"three;", b"four;"):
                self._chunk(part)
            self.wfile.write(b"0\r\n\r\n")
        else:
            self._send(b"hello-from-proxy")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def proxy_url():
    FakeProxy.released.clear()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeProxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def host_listener():
    """An arbitrary port the host listens on, on every address (loopback and the host's own)."""
    sock = socket.create_server(("0.0.0.0", 0))
    yield sock.getsockname()[1]
    sock.close()


def _own_address() -> str | None:
    """This host's outward address (a UDP connect sends nothing), if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(OUTSIDE)
            return s.getsockname()[0]
        except OSError:
            return None


def test_a_sandbox_reaches_the_proxy_and_nothing_else_on_the_host_or_beyond(
    make_local, proxy_url, host_listener, pg_admin_url, redis_base_url
):
    pg, rd = make_url(pg_admin_url), urlsplit(redis_base_url)
    targets = [
        (pg.host, pg.port or 5432),  # PostgreSQL: trust auth, superuser
        (rd.hostname, rd.port or 6379),  # Redis: no password
        ("127.0.0.1", host_listener),  # anything else on the host's loopback
        OUTSIDE,  # the internet
    ]
    if own := _own_address():
        targets.append((own, host_listener))  # the host by its own address
    # PostgreSQL's unix socket, where the host has one (it lies outside the sandbox's system paths)
    unix = [p for p in ("/var/run/postgresql/.s.PGSQL.5432",) if _connectable(p)]
    for target in targets:
        if target != OUTSIDE:
            socket.create_connection(target, timeout=5).close()  # the host itself can: a fair test
    backend = make_local()
    inside = backend.sandbox_proxy_url(proxy_url)
    probe = ["python3", "-c", PROBE, json.dumps(targets), json.dumps(unix)]

    async def scenario():
        sandbox = await backend.create(SandboxSpec(network="proxy", proxy_url=proxy_url))
        try:
            hello = await sandbox.exec(["python3", "-c", _fetch(inside)])
            probed = await sandbox.exec(probe, timeout_s=60)
            stream = await sandbox.exec(["python3", "-c", STREAM, inside], timeout_s=60)
            again = await sandbox.exec(["python3", "-c", _fetch(inside)])  # a later exec's own relay
            return hello, probed, stream, again
        finally:
            await sandbox.destroy()

    hello, probed, stream, again = asyncio.run(scenario())
    assert hello.stdout.strip() == b"hello-from-proxy", f"the proxy must be reachable: {hello}"
    assert again.stdout.strip() == b"hello-from-proxy", f"and from every exec: {again}"
    assert probed.exit_code == 0, probed
    outcome = json.loads(probed.stdout)
    assert len(outcome) == len(targets) + len(unix)
    reached = {target: how for target, how in outcome.items() if how == "connected"}
    assert not reached, f"a sandbox reached more than the proxy: {outcome}"
    # the outside fails at once (no route), not after the 2 s timeout
    assert outcome[f"{OUTSIDE[0]}:{OUTSIDE[1]}"] != "TimeoutError", outcome
    assert stream.stdout.strip() == b"one;|two;|three;|four;", f"chunks must stream in order: {stream}"


def _connectable(path: str) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


def _fetch(url: str) -> str:
    return f"import urllib.request; print(urllib.request.urlopen({url + '/hello'!r}, timeout=10).read().decode())"


def test_the_proxy_named_by_host_name_is_reached_through_the_sandbox_loopback(make_local, proxy_url):
    """compose names the proxy `proxy:8080`: the name is resolved outside, the harness sees 127.0.0.1."""
    by_name = proxy_url.replace("127.0.0.1", "localhost")
    backend = make_local()
    inside = backend.sandbox_proxy_url(by_name)
    assert inside == proxy_url, "the harness is told the relay's address, on the sandbox's loopback"

    async def scenario():
        sandbox = await backend.create(SandboxSpec(proxy_url=by_name))
        try:
            return await sandbox.exec(["python3", "-c", _fetch(inside)])
        finally:
            await sandbox.destroy()

    result = asyncio.run(scenario())
    assert result.stdout.strip() == b"hello-from-proxy", result


def test_network_none_reaches_nothing_not_even_the_proxy(make_local, proxy_url):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SandboxSpec(network="none", proxy_url=proxy_url))
        try:
            return await sandbox.exec(["python3", "-c", _fetch(backend.sandbox_proxy_url(proxy_url))])
        finally:
            await sandbox.destroy()

    result = asyncio.run(scenario())
    assert result.exit_code != 0 and b"hello" not in result.stdout, (
        f"network=none must reach nothing: {result}"
    )
    assert b"Connection refused" in result.stderr, result


def test_unisolated_sandboxes_are_refused_unless_allowed_and_then_warned_about(sandbox_root, caplog):
    def backend(**local) -> LocalBackend:
        cfg = LocalSandboxConfig(root_dir=str(sandbox_root), isolation="none", **local)
        return LocalBackend(SandboxConfig(local=cfg))

    with pytest.raises(SandboxFailed, match="allow_unisolated"):
        backend()
    with caplog.at_level(logging.WARNING, logger="clawgym.sandbox.local"):
        allowed = backend(allow_unisolated=True)
    assert allowed.isolation == "none"
    assert "share its network" in caplog.text, caplog.text
    # without a namespace of its own, the sandbox sees the proxy where this process does
    assert allowed.sandbox_proxy_url("http://proxy:8080") == "http://proxy:8080"
