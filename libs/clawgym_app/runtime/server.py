"""`ServerThread`: an ASGI app (the proxy) served by uvicorn on a loopback port, in a daemon thread."""

from __future__ import annotations

import threading
import time

import uvicorn

from clawgym.errors import Unavailable


class ServerThread:
    """uvicorn serving `app` on host:port (port 0 → a free one) until `stop()`."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
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
