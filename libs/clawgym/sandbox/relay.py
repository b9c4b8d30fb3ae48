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
"""

import asyncio
import contextlib
import logging
import socket
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


class ProxyRelay:
    """Relays every connection made to one exec's listener to the proxy at `target`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._connections: set[asyncio.Task] = set()

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
        try:
            server = await asyncio.start_server(self._accepted, sock=listener, limit=CHUNK)
            try:
                await server.serve_forever()
            finally:
                server.close()
        finally:
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._relay(reader, writer)
        finally:
            self._connections.discard(task)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_writer = None
        try:
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection(*self.target, limit=CHUNK)
            except OSError as e:
                log.warning("sandbox relay: the proxy at %s:%s is unreachable: %s", *self.target, e)
                return  # the sandbox sees its connection closed, as if the proxy refused it
            await asyncio.gather(
                _pipe(reader, upstream_writer, writer),
                _pipe(upstream_reader, writer, upstream_writer),
            )
        finally:
            for w in (writer, upstream_writer):
                if w is not None:
                    w.close()


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
