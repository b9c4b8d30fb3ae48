"""The one way out of a local sandbox's network namespace: a relay to the proxy.

Every bubblewrap exec gets its own, empty network namespace (`--unshare-net`: loopback only).
With network="proxy" its first program is `LISTEN`, run by the system Python in isolated mode:
inside the new namespace it binds the proxy's in-sandbox address (127.0.0.1 and the proxy's port,
`sandbox_url`), hands the listening socket to this process over an inherited unix socket
(SCM_RIGHTS), closes its copy and execs the command. A socket stays in the namespace it was made
in wherever its descriptor goes, so this process accepts the sandbox's connections while it dials
the proxy from its own namespace (`ProxyRelay`): the proxy is the only address the sandbox can
reach, nothing of the relay runs in the sandbox to be tampered with, the listener exists before
the command starts (no race), and it closes with the exec.

The docker backend does the same once per sandbox container (`--network none`: loopback only),
with `SEND_LISTENER` run by a helper container in the sandbox's network namespace.

Every relayed connection costs this process two descriptors, so a sandbox holds at most
`sandbox.relay_max_connections` at once, all its relays together (`ConnectionCap`); one beyond is
reset as soon as it is accepted. Refusals, failed accepts (EMFILE ...) and an unreachable proxy are
logged at most once per LOG_EVERY_S per sandbox and kind, with counts, and a failed accept is
retried after ACCEPT_RETRY_S, not at once. The backends that relay raise this process's soft limit
of open files to its hard one (`allow_open_files`); no cap spans sandboxes, so size the hard limit
for relay_max_connections x 2 x the sandboxes that run at once.
"""

import asyncio
import contextlib
import logging
import math
import resource
import socket
import struct
import time
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

# Runs in the sandbox before the command: argv = [channel fd, port, command...]. Standard library
# only (the system Python, -I -S); 126/127 like a shell when the command cannot be executed.
LISTEN = """\
import os, socket, sys
fd, port, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(256)
c = socket.socket(fileno=fd)
socket.send_fds(c, [b"L"], [s.fileno()])
c.close()
s.close()
try:
    os.execvp(argv[0], argv)
except OSError as e:
    print(f"{argv[0]}: {e.strerror}", file=sys.stderr)
    sys.exit(127 if isinstance(e, FileNotFoundError) else 126)
"""

# The same for a container (the docker backend): run once by a short-lived helper container that
# joins the sandbox container's network namespace, it binds the proxy's port there, sends the
# listening socket over the unix socket at argv[1] (bound by the backend, mounted in) and exits.
SEND_LISTENER = """\
import socket, sys
path, port = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(256)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(path)
socket.send_fds(c, [b"L"], [s.fileno()])
c.close()
"""

CHUNK = 1 << 16  # bytes read per hop: a streamed event is far smaller, a request body may be larger
LOG_EVERY_S = 10.0  # a sandbox can provoke a warning per connection: one line per kind this often at most
ACCEPT_RETRY_S = 1.0  # after a failed accept (EMFILE...): the listener stays ready, retrying at once spins


def proxy_address(url: str) -> tuple[str, int]:
    """(host, port) of the proxy's URL as this process reaches it."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ValueError(f"proxy URL {url!r} names no host")
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


def sandbox_url(url: str) -> str:
    """The proxy's URL as a local sandbox sees it: the relay on 127.0.0.1, same port and path."""
    parts = urlsplit(url)
    _, port = proxy_address(url)
    return urlunsplit((parts.scheme, f"127.0.0.1:{port}", parts.path, parts.query, parts.fragment))


async def receive_listener(channel: socket.socket) -> socket.socket | None:
    """The listening socket `LISTEN` sends over `channel`; None if it ended without sending one."""
    loop = asyncio.get_running_loop()
    channel.setblocking(False)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(channel, 1, 1)
            break
        except BlockingIOError:
            readable = loop.create_future()
            loop.add_reader(channel.fileno(), _wake, readable)
            try:
                await readable
            finally:
                loop.remove_reader(channel.fileno())
    if not fds:
        return None
    listener = socket.socket(fileno=fds[0])
    kind = (listener.family, listener.type, listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
    if kind != (socket.AF_INET, socket.SOCK_STREAM, 1):
        listener.close()
        raise ValueError(f"the sandbox sent something else than a listening TCP socket: {kind}")
    return listener


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class _Throttle:
    """Counts one kind of warning; the first is logged at once, the next at most once per
    LOG_EVERY_S, each line saying how many occurred since the last and the last one's detail."""

    def __init__(self) -> None:
        self.pending, self.last_logged, self.detail = 0, -math.inf, ""

    def due(self, detail: str = "") -> int:
        """Counts one; how many to log now (0: not yet)."""
        self.pending, self.detail = self.pending + 1, detail
        now = time.monotonic()
        if now - self.last_logged < LOG_EVERY_S:
            return 0
        self.last_logged = now
        return self.take()

    def take(self) -> int:
        """How many are counted but not logged yet (and forgets them)."""
        n, self.pending = self.pending, 0
        return n


def allow_open_files() -> None:
    """Raises this process's soft limit of open files to its hard limit (relayed connections cost two
    descriptors each, and the common soft default of 1024 is the hard one's fraction)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


class ConnectionCap:
    """The proxy connections one sandbox holds open through this process, all its relays (execs)
    together. Each costs two descriptors here: uncapped, one sandbox took the orchestrator to
    EMFILE and failed every other sandbox's exec. Beyond `limit`, a new connection is reset at once."""

    def __init__(self, sandbox_id: str, limit: int) -> None:
        self.sandbox_id, self.limit = sandbox_id, limit
        self.active = 0
        self._refused, self._accept_errors, self._unreachable = _Throttle(), _Throttle(), _Throttle()

    def take(self) -> bool:
        """Whether one more connection may be relayed (then `release` it when it ends)."""
        if self.active < self.limit:
            self.active += 1
            return True
        self._log_refused(self._refused.due())
        return False

    def release(self) -> None:
        self.active -= 1

    def accept_failed(self, error: OSError) -> None:
        self._log_accept_errors(self._accept_errors.due(str(error)))

    def unreachable(self, target: tuple[str, int], error: OSError) -> None:
        self._log_unreachable(self._unreachable.due(str(error)), target)

    def flush(self, target: tuple[str, int]) -> None:
        """Logs what was counted but not logged yet (a relay ends)."""
        self._log_refused(self._refused.take())
        self._log_accept_errors(self._accept_errors.take())
        self._log_unreachable(self._unreachable.take(), target)

    def _log_refused(self, n: int) -> None:
        if n:
            log.warning(
                "sandbox %s: refused %d connection(s) to the proxy since the last such line: it holds "
                "sandbox.relay_max_connections=%d already",
                *(self.sandbox_id, n, self.limit),
            )

    def _log_accept_errors(self, n: int) -> None:
        if n:
            log.warning(
                "sandbox %s: accepting its connections to the proxy failed %d time(s) (last: %s); "
                "retried every %.0f s",
                *(self.sandbox_id, n, self._accept_errors.detail, ACCEPT_RETRY_S),
            )

    def _log_unreachable(self, n: int, target: tuple[str, int]) -> None:
        if n:
            log.warning(
                "sandbox %s: the proxy at %s:%s was unreachable %d time(s) (last: %s)",
                *(self.sandbox_id, *target, n, self._unreachable.detail),
            )


class ProxyRelay:
    """Relays every connection made to one listener of a sandbox to the proxy at `target`, as many
    at once as `cap` (shared by the sandbox's relays) allows."""

    def __init__(self, target: tuple[str, int], cap: ConnectionCap) -> None:
        self.target, self.cap = target, cap
        # a connection's task -> its socket until the task takes it over (None from then on)
        self._connections: dict[asyncio.Task, socket.socket | None] = {}

    async def serve(self, channel: socket.socket) -> None:
        """Serves the listener that arrives on `channel` until cancelled (when the exec ends);
        closes `channel`."""
        with channel:
            listener = await receive_listener(channel)
        if listener is None:
            return  # the exec never got as far as its command
        await self.serve_listener(listener)

    async def serve_listener(self, listener: socket.socket) -> None:
        """Relays every connection `listener` accepts until cancelled; closes it."""
        # Its own accept loop, not asyncio's server: that one logs every accept error with a
        # traceback, and accepts whatever comes.
        loop = asyncio.get_running_loop()
        try:
            listener.setblocking(False)
            while True:
                try:
                    conn, _ = await loop.sock_accept(listener)
                except OSError as e:  # EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED
                    self.cap.accept_failed(e)
                    await asyncio.sleep(ACCEPT_RETRY_S)
                    continue
                if not self.cap.take():
                    _reset(conn)
                    continue
                task = asyncio.ensure_future(self._relay(conn))
                self._connections[task] = conn
                task.add_done_callback(self._ended)
        finally:
            listener.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            self.cap.flush(self.target)

    def _ended(self, task: asyncio.Task) -> None:
        conn = self._connections.pop(task)
        self.cap.release()
        if conn is not None:  # cancelled before it began: nothing else closes it
            conn.close()

    async def _relay(self, conn: socket.socket) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = None  # the streams own it from here
        writers: list[asyncio.StreamWriter] = []
        try:
            try:
                reader, writer = await asyncio.open_connection(sock=conn, limit=CHUNK)
            except OSError:
                return  # the sandbox's end broke first: nothing to relay, nothing to say
            writers.append(writer)
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.target, limit=CHUNK)
            except OSError as e:
                self.cap.unreachable(self.target, e)
                return  # the sandbox sees its connection closed, as if the proxy refused it
            writers.append(upstream_writer)
            await asyncio.gather(
                _pipe(reader, upstream_writer, writer),
                _pipe(upstream_reader, writer, upstream_writer),
            )
        finally:
            if not writers:
                conn.close()
            for w in writers:
                w.close()


def _reset(conn: socket.socket) -> None:
    """Closes an accepted connection with a reset: the sandbox's client sees it refused at once."""
    with contextlib.suppress(OSError):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, back: asyncio.StreamWriter) -> None:
    """Copies src to dst with backpressure (drain), passes EOF on as a half-close; on a reset,
    aborts both connections so the other direction ends too."""
    try:
        while chunk := await src.read(CHUNK):
            dst.write(chunk)
            await dst.drain()
        if dst.can_write_eof():
            with contextlib.suppress(OSError):
                dst.write_eof()
    except OSError:
        dst.transport.abort()
        back.transport.abort()
