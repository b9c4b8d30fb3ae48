"""How the proxy app is served: uvicorn's HTTP/1.1 protocol with a read deadline, the uvicorn config
(`clawgym serve proxy`), and `ServerThread` (the same config on a loopback port in a daemon thread:
the embedded runtime and the tests).

uvicorn (h11) times out only idle keep-alive connections between requests (`timeout_keep_alive`)
and bounds a request head's size (`h11_max_incomplete_event_size`), but a client that sends its
headers or body a byte at a time, or opens a connection and sends nothing, is kept forever
(slowloris): neither setting applies while a request is incomplete. `ReadDeadlineProtocol` gives
each request `read_timeout_s` from its first byte (a new connection: from its opening) until
h11 has its whole head and body; past that the connection is closed, and the app, if it was
reading the body, sees the client as gone. Once the request is complete the deadline is off, so
a long generation streams as long as it needs.
"""

import asyncio
import socket
import threading
import time
from types import TracebackType
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from clawgym.errors import Unavailable
from clawgym.proxy.config import ProxyConfig

INCOMPLETE = (h11.IDLE, h11.SEND_BODY)  # h11's states of a client still sending a request
MAX_HEAD_BYTES = 64 * 1024  # request line + headers (h11's default is 16 KiB; harness headers are small)


class ReadDeadlineProtocol(H11Protocol):
    """H11Protocol that closes a connection whose request does not arrive in time."""

    read_timeout_s = 60.0  # set per server by `read_deadline_protocol`

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._read_deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state in INCOMPLETE:
            self._arm()  # a request (or its body, after an early answer) is arriving
        super().data_received(data)
        if self.conn.their_state not in INCOMPLETE:
            self._disarm()  # complete: the app has it all, however long it takes to answer

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._read_deadline is None:
            self._read_deadline = self.loop.call_later(self.read_timeout_s, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.conn.their_state in INCOMPLETE and not self.transport.is_closing():
            self.logger.info(
                "closing a connection whose request took over %.0f s to arrive", self.read_timeout_s
            )
            self.transport.close()


def read_deadline_protocol(read_timeout_s: float) -> type[ReadDeadlineProtocol]:
    """A `ReadDeadlineProtocol` class with this deadline (uvicorn builds one instance per connection)."""
    return type("ReadDeadlineProtocol", (ReadDeadlineProtocol,), {"read_timeout_s": read_timeout_s})


KEEP_ALIVE_S = 75  # idle keep-alive connections are cheap; incomplete requests keep their deadline


def uvicorn_config(app: Any, cfg: ProxyConfig, **overrides: Any) -> uvicorn.Config:
    """How the proxy app is served: on `cfg.host:cfg.port` (unless overridden), h11 with the read
    deadline of `cfg.read_timeout_s`, a bounded request head."""
    options: dict[str, Any] = {
        "host": cfg.host,
        "port": cfg.port,
        "http": read_deadline_protocol(cfg.read_timeout_s),
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
        # Longer than clients keep a pooled connection idle (httpx 5 s, Node 4-5 s): at uvicorn's own
        # 5 s, a harness reusing a connection just as the server closed it got a ReadError (64 rollouts).
        "timeout_keep_alive": KEEP_ALIVE_S,
    }
    return uvicorn.Config(app, **{**options, **overrides})


def shared_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket bound with SO_REUSEPORT: several proxy processes of one user on one
    host network bind the same port and the kernel spreads new connections between them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class ServerThread:
    """uvicorn serving `app` as `uvicorn_config` says (the read deadline of `cfg`) on host:port
    (port 0: a free one) in a daemon thread, until `stop()`; also a context manager."""

    def __init__(
        self, app: Any, cfg: ProxyConfig | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        config = uvicorn_config(app, cfg or ProxyConfig(), host=host, port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="clawgym-proxy", daemon=True)
        self.host = host
        self.url = ""

    def start(self, timeout_s: float = 60.0) -> str:
        """Starts serving; returns the root URL (http://host:port)."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise Unavailable(f"the proxy did not start on {self.host}")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{port}"
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def __enter__(self) -> "ServerThread":
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
