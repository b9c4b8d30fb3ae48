"""Fixtures of the harness tests: a local sandbox backend, and a real Chat Completions server on loopback
that answers with scripted replies.

It is an HTTP server on a free port that speaks the non-streaming Chat Completions shape; only
the replies are scripted. It records every request (body and headers) for the tests to read.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from clawgym.sandbox import SandboxConfig, make_sandbox_backend


class ScriptedChatServer:
    """Serves `replies` in order (a str is the assistant's text; a dict is the whole message)."""

    def __init__(self) -> None:
        self.replies: list[str | dict] = []
        self.requests: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                """GET /healthz, as the orchestrator probes a proxy before a rollout."""
                self.send_response(200 if self.path.endswith("/healthz") else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    reply = server.replies.pop(0) if server.replies else "DONE"
                if self.path != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                message = {"role": "assistant", "content": reply} if isinstance(reply, str) else reply
                payload = json.dumps(
                    {
                        "id": f"chatcmpl-{len(server.requests)}",
                        "object": "chat.completion",
                        "model": body.get("model", ""),
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def chat_server() -> Iterator[ScriptedChatServer]:
    with ScriptedChatServer() as server:
        yield server


@pytest.fixture
def backend(tmp_path: Path):
    """A local sandbox backend whose sandboxes live in the test's folder."""
    cfg = SandboxConfig()
    cfg.local.root_dir = str(tmp_path / "sandboxes")
    b = make_sandbox_backend(cfg)
    yield b
    asyncio.run(b.close())
