"""The rollout browser over HTTP: `create_browse_app(store)` → a FastAPI app serving the page
(`clawgym.browse.static`, no build step) and its JSON reads (`clawgym.browse.pages`).

    GET /                      the page (runs → a run's steps, groups, rollouts → a rollout's tree)
    GET /static/{file}         its script and style sheet
    GET /api/runs              every run, the newest first (an eval run names the run it evaluated)
    GET /api/runs/{run_id}     the run's train steps, evaluation runs, checkpoints and groups with
                               their rollouts
    GET /api/rollouts/{id}     the rollout (its verifier output and harness stderr included) and its
                               prefix-tree view (`clawgym.trajectory.view`)

Read-only and unauthenticated: it shows every captured call, so `clawgym browse` binds to
loopback and the store service serves it only on `store.browse_port` when that is set. It answers
only the Host names it is served by (`host_check`: a DNS-rebinding page gets 403). Typed
errors become their HTTP status with `{"detail": …}`. A Content-Security-Policy allowing only the
page's own script is a second line behind the page writing agent text as text only.
"""

import threading
import time
from collections.abc import Collection

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from clawgym.browse import pages
from clawgym.browse.host_check import AllowedHosts, HostCheck
from clawgym.errors import ClawgymError, Unavailable
from clawgym.store.interface import TrajectoryStore

HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; object-src 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
MEDIA = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
}


def create_browse_app(
    store: TrajectoryStore,
    decoder_for: pages.DecoderFor | None = None,
    *,
    host: str = "127.0.0.1",
    allow_hosts: Collection[str] = (),
) -> FastAPI:
    """The app of a server bound to `host`; it answers the Host names of `AllowedHosts(host, allow_hosts)`."""
    app = FastAPI(title="clawgym rollout browser", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(HostCheck, allowed=AllowedHosts(host, allow_hosts), headers=HEADERS)

    @app.exception_handler(ClawgymError)
    async def typed_error(_request: Request, e: ClawgymError) -> JSONResponse:
        return JSONResponse({"detail": str(e)}, e.http_status, headers=HEADERS)

    def static(name: str) -> Response:
        path = pages.static_file(name)
        return FileResponse(str(path), media_type=MEDIA[name.rsplit(".", 1)[1]], headers=HEADERS)

    @app.get("/")
    def index() -> Response:
        return static("index.html")

    @app.get("/static/{name}")
    def static_route(name: str) -> Response:
        return static(name)

    @app.get("/api/runs")
    def runs() -> JSONResponse:
        return JSONResponse(pages.runs_page(store), headers=HEADERS)

    @app.get("/api/runs/{run_id}")
    def run(run_id: str) -> JSONResponse:
        return JSONResponse(pages.run_page(store, run_id), headers=HEADERS)

    @app.get("/api/rollouts/{rollout_id}")
    def rollout(rollout_id: str) -> JSONResponse:
        return JSONResponse(pages.rollout_page(store, rollout_id, decoder_for), headers=HEADERS)

    return app


class BrowseServer:
    """uvicorn serving the browser app on host:port (0: a free one) in a daemon thread, until `stop()`."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="clawgym-browse", daemon=True)
        self.host = host
        self.port = 0

    def start(self, timeout_s: float = 30.0) -> int:
        """Starts serving; returns the bound port (Unavailable if it did not start)."""
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise Unavailable(f"the rollout browser did not start on {self.host}")
            time.sleep(0.02)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self.port

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
