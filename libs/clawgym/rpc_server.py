"""The serving side of every clawgym gRPC service: server lifecycle, health, and errors as statuses.

`GrpcServer` (sync, a thread pool) and `AioGrpcServer` (asyncio) own what each service would
otherwise repeat: message limits, the standard health service, the shared-secret check, binding
host:port, a Prometheus /metrics endpoint (on the same host), SERVING once started, and on stop
NOT_SERVING, a graceful stop and /metrics closed. Every call but the health service's must carry
the `rpc` secret (`clawgym.rpc.open_channel` attaches it); one without it, or with another, is
answered UNAUTHENTICATED before any handler runs. `status_of` is the one rendering of a handler's exception as a gRPC status. What a service
does (its servicer, its counting, its own lifecycle) stays in the service; `clawgym.rpc` holds what
clients share.
"""

import asyncio
import hmac
import logging
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

import grpc
from grpc_health.v1 import health, health_pb2_grpc
from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.rpc import (
    HEALTH_METHOD_PREFIX,
    NOT_SERVING,
    SECRET_METADATA_KEY,
    SERVING,
    grpc_options,
    secret_metadata,
)

log = logging.getLogger(__name__)

# --- errors -------------------------------------------------------------------------------------


def status_of(service: str, method: str, e: Exception) -> tuple[grpc.StatusCode, str]:
    """The status `service`'s handler `method` answers `e` with: a typed error its own code and message;
    anything else INTERNAL, with the traceback in this service's log (the client sees only its type)."""
    if isinstance(e, ClawgymError):
        return grpc.StatusCode[e.grpc_code], str(e)
    log.error("%s %s failed", service, method, exc_info=e)
    message = f"{service} {method} failed: {type(e).__name__}; see the {service} service's log"
    return grpc.StatusCode.INTERNAL, message


async def abort_async(context: grpc.aio.ServicerContext, service: str, method: str, e: Exception) -> NoReturn:
    """Ends an asyncio handler's RPC with the status of `e` (a sync handler: `context.abort(*status_of(…))`)."""
    await context.abort(*status_of(service, method, e))  # raises


# --- credentials --------------------------------------------------------------------------------

REFUSED = "this call carries no valid rpc secret (the `authorization` metadata the clawgym clients send)"


class SecretCheck:
    """The one check of the shared secret, in front of every handler but the health service's.

    `allows` compares in constant time; `sync()` and `aio()` are the interceptor that a sync and an
    asyncio server take (gRPC has a base class for each). A refused call gets UNAUTHENTICATED, and
    the log names its method and peer, never a secret.
    """

    def __init__(self, secret: str) -> None:
        if not secret:
            raise InvalidArgument("a clawgym gRPC server needs the shared rpc secret (rpc.secret)")
        self._expected = secret_metadata(secret)[1].encode()

    def allows(self, details: grpc.HandlerCallDetails) -> bool:
        if details.method.startswith(HEALTH_METHOD_PREFIX):
            return True
        given = [v for k, v in details.invocation_metadata or () if k == SECRET_METADATA_KEY]
        value = given[0] if len(given) == 1 else ""
        return hmac.compare_digest(value.encode() if isinstance(value, str) else value, self._expected)

    def sync(self) -> grpc.ServerInterceptor:
        return _SyncSecretInterceptor(self)

    def aio(self) -> grpc.aio.ServerInterceptor:
        return _AioSecretInterceptor(self)


def _refusing(handler: grpc.RpcMethodHandler, method: str, aio: bool) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s kind that answers UNAUTHENTICATED."""

    def deny(_request: Any, context: grpc.ServicerContext) -> None:
        log.warning("refused %s from %s: no valid rpc secret", method, context.peer())
        context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)

    async def adeny(_request: Any, context: grpc.aio.ServicerContext) -> None:
        log.warning("refused %s from %s: no valid rpc secret", method, context.peer())
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)

    kind = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return kind(adeny if aio else deny)


class _SyncSecretInterceptor(grpc.ServerInterceptor):
    def __init__(self, check: SecretCheck) -> None:
        self._check = check

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or self._check.allows(details):
            return handler
        return _refusing(handler, details.method, aio=False)


class _AioSecretInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, check: SecretCheck) -> None:
        self._check = check

    async def intercept_service(self, continuation, details):
        handler = await continuation(details)
        if handler is None or self._check.allows(details):
            return handler
        return _refusing(handler, details.method, aio=True)


# --- health -------------------------------------------------------------------------------------


class Health:
    """The health service of one gRPC server, sync or asyncio, for "" and the service's own name.

    A sync server starts NOT_SERVING until `serving()`; an asyncio one is told `await aserving()`
    (its servicer's setters are coroutines).
    """

    def __init__(self, server: grpc.Server | grpc.aio.Server, service_name: str) -> None:
        self._aio = isinstance(server, grpc.aio.Server)
        self._servicer = health.aio.HealthServicer() if self._aio else health.HealthServicer()
        self._names = ("", service_name)
        health_pb2_grpc.add_HealthServicer_to_server(self._servicer, server)
        if not self._aio:
            self.serving(False)

    def serving(self, ok: bool = True) -> None:
        """SERVING (or NOT_SERVING) for "" and the service name (sync servers)."""
        assert not self._aio, "use aserving() on an asyncio server"
        for name in self._names:
            self._servicer.set(name, SERVING if ok else NOT_SERVING)

    async def aserving(self, ok: bool = True) -> None:
        """SERVING (or NOT_SERVING) for "" and the service name, telling watchers (asyncio servers)."""
        for name in self._names:
            await self._servicer.set(name, SERVING if ok else NOT_SERVING)

    def shutting_down(self) -> None:
        """NOT_SERVING from now on; later changes are ignored (sync servers)."""
        assert not self._aio, "use ashutting_down() on an asyncio server"
        self._servicer.enter_graceful_shutdown()

    async def ashutting_down(self) -> None:
        await self._servicer.enter_graceful_shutdown()


# --- servers ------------------------------------------------------------------------------------


class HoldsServer:
    """A service shell holding its gRPC server in `_rpc`: its bound ports, as the server reports them."""

    _rpc: "_Server"

    @property
    def port(self) -> int:
        return self._rpc.port

    @property
    def metrics_port(self) -> int:
        return self._rpc.metrics_port


class _Server:
    """What both flavours share: the settings, the servicers to add, binding, and /metrics.

    The gRPC server itself is built by `start()`: an asyncio one must be made on the loop it runs on.
    """

    def __init__(
        self,
        service: str,
        host: str,
        port: int,
        *,
        secret: str,
        metrics_port: int = 0,
        registry: CollectorRegistry | None = None,
        max_message_mb: int | None = None,
    ) -> None:
        self.service = service  # the full name, e.g. "clawgym.v1.Store"
        self.address = f"{host}:{port}"  # port 0: any free port
        self.host = host
        self.port = 0  # the bound port, once started
        self.metrics_port = 0  # the bound /metrics port, once started (0: none)
        self.health: Health | None = None
        self._secret_check = SecretCheck(secret)  # refuses to build a server without a secret
        self._metrics_wanted = metrics_port
        self._registry = registry if registry is not None else REGISTRY
        self._options = grpc_options(max_message_mb) if max_message_mb else None
        self._servicers: list[tuple[Callable[[Any, Any], None], Any]] = []
        self._http = None

    def add(self, add_fn: Callable[[Any, Any], None], servicer: Any) -> None:
        """Serves `servicer` (through its generated `add_XServicer_to_server`) once started."""
        self._servicers.append((add_fn, servicer))

    def _bind(self, server: grpc.Server | grpc.aio.Server) -> None:
        for add_fn, servicer in self._servicers:
            add_fn(servicer, server)
        self.health = Health(server, self.service)
        try:  # a port grpc cannot bind: 0 from older grpcio, RuntimeError from newer
            self.port = server.add_insecure_port(self.address)
        except RuntimeError:
            self.port = 0
        if self.port == 0:
            raise OSError(f"{self.service} cannot listen on {self.address}")

    def _start_metrics(self) -> None:
        if self._metrics_wanted:
            self._http, _ = start_http_server(self._metrics_wanted, addr=self.host, registry=self._registry)
            self.metrics_port = self._http.server_port

    def _close_metrics(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


class GrpcServer(_Server):
    """A sync gRPC server on a thread pool of `max_workers` (each streaming RPC holds one)."""

    def __init__(self, service: str, host: str, port: int, *, max_workers: int = 8, **kw: Any) -> None:
        super().__init__(service, host, port, **kw)
        self._max_workers = max_workers
        self._server: grpc.Server | None = None

    def start(self) -> int:
        """Binds (OSError if it cannot), serves, starts /metrics, then SERVING; returns the gRPC port."""
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=self._max_workers),
            options=self._options,
            interceptors=[self._secret_check.sync()],
        )
        self._bind(self._server)  # health starts NOT_SERVING
        self._server.start()
        self._start_metrics()
        self.serving()
        return self.port

    def serving(self, ok: bool = True) -> None:
        self.health.serving(ok)

    def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        return self._server.wait_for_termination(timeout_s)

    def stop(self, grace: float | None = 5.0) -> None:
        """NOT_SERVING at once, then stops (in-flight RPCs get `grace` seconds), then closes /metrics."""
        if self._server is not None:
            self.health.shutting_down()
            self._server.stop(grace).wait()
        self._close_metrics()


class AioGrpcServer(_Server):
    """An asyncio gRPC server; `start()` on the loop that serves it."""

    def __init__(self, service: str, host: str, port: int, **kw: Any) -> None:
        super().__init__(service, host, port, **kw)
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        """Binds (OSError if it cannot), serves, starts /metrics, then SERVING; returns the gRPC port."""
        self._server = grpc.aio.server(options=self._options, interceptors=[self._secret_check.aio()])
        self._bind(self._server)
        await self.serving(False)
        await self._server.start()
        self._start_metrics()
        await self.serving()
        return self.port

    async def serving(self, ok: bool = True) -> None:
        await self.health.aserving(ok)

    async def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        return await self._server.wait_for_termination(timeout_s)

    async def stop(self, grace: float | None = 5.0) -> None:
        """NOT_SERVING at once, then stops (in-flight RPCs get `grace` seconds), then closes /metrics."""
        if self._server is not None:
            await self.health.ashutting_down()
            await self._server.stop(grace)
        self._close_metrics()


async def serve_until_signal(server: Any, on_started: Callable[[int], None]) -> None:
    """Starts an asyncio service (`start()` → port), calls `on_started(port)`, serves until SIGTERM or
    SIGINT, then `stop()`s it: the run loop of `clawgym serve inference|orchestrator`."""
    port = await server.start()
    on_started(port)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()
