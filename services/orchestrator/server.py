"""The orchestrator service: `create_server(cfg)` serves an `Orchestrator` over gRPC (asyncio), with /metrics.

A thin shell: each handler decodes the request (`clawgym.orchestrator.convert`), calls one
orchestrator method and encodes the reply. Typed errors become their gRPC status
(`ClawgymError.grpc_code`); anything else is INTERNAL, with the traceback in this service's log.
A client that cancels its RunRollouts stream cancels the handler, which closes the orchestrator's
status iterator and so cancels the batch's rollouts that are still queued or running.
"""

import logging
from collections.abc import AsyncIterator

import grpc
from prometheus_client import start_http_server

from clawgym.config import ClawgymConfig
from clawgym.errors import ClawgymError
from clawgym.generated.v1 import orchestrator_pb2 as pb
from clawgym.generated.v1 import orchestrator_pb2_grpc
from clawgym.orchestrator import convert
from clawgym.orchestrator.runner import Orchestrator
from clawgym.rpc import Health

log = logging.getLogger(__name__)


async def _abort(context: grpc.aio.ServicerContext, name: str, e: Exception) -> None:
    if isinstance(e, ClawgymError):
        await context.abort(grpc.StatusCode[e.grpc_code], str(e))
    log.exception("orchestrator %s failed", name, exc_info=e)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"orchestrator {name} failed: {type(e).__name__}; see its log"
    )


class OrchestratorServicer(orchestrator_pb2_grpc.OrchestratorServicer):
    def __init__(self, orchestrator: Orchestrator) -> None:
        self.orchestrator = orchestrator

    async def RunRollouts(
        self, request: pb.RunRolloutsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RolloutStatus]:
        statuses = None
        try:
            statuses = self.orchestrator.run_rollouts(convert.batch_from_proto(request))
            async for status in statuses:
                yield convert.status_to_proto(status)
        except Exception as e:
            await _abort(context, "RunRollouts", e)
        finally:
            if statuses is not None:
                await statuses.aclose()  # cancels what is still running when the client went away

    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext) -> pb.CancelResponse:
        try:
            n = await self.orchestrator.cancel(request.batch_id, request.rollout_id)
        except Exception as e:
            await _abort(context, "Cancel", e)
        return pb.CancelResponse(cancelled=n)


class OrchestratorServer:
    """A started-on-demand gRPC server (and /metrics endpoint) around one orchestrator."""

    def __init__(self, cfg: ClawgymConfig, orchestrator: Orchestrator | None = None) -> None:
        self.cfg = cfg.orchestrator
        self.orchestrator = orchestrator or Orchestrator.from_config(cfg)
        self.port = 0
        self.metrics_port = 0
        self._server: grpc.aio.Server | None = None
        self._http = None

    async def start(self) -> int:
        """Reaps a predecessor's sandboxes, binds host:port (0 = any free port), serves; returns the port."""
        await self.orchestrator.start()
        self._server = grpc.aio.server()
        orchestrator_pb2_grpc.add_OrchestratorServicer_to_server(
            OrchestratorServicer(self.orchestrator), self._server
        )
        self.health = Health(self._server, "clawgym.v1.Orchestrator")
        await self.health.aserving()
        address = f"{self.cfg.host}:{self.cfg.port}"
        self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"orchestrator service cannot listen on {address}")
        await self._server.start()
        if self.cfg.metrics_port:
            self._http, _ = start_http_server(
                self.cfg.metrics_port, addr=self.cfg.host, registry=self.orchestrator.metrics.registry
            )
            self.metrics_port = self._http.server_port
        return self.port

    async def stop(self, grace: float = 5.0) -> None:
        """Stops serving, cancels the running batches (their sandboxes are destroyed)."""
        if self._server is not None:
            await self.health.ashutting_down()
            await self._server.stop(grace)
        await self.orchestrator.close()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()


def create_server(cfg: ClawgymConfig, orchestrator: Orchestrator | None = None) -> OrchestratorServer:
    """An orchestrator server (not started) for `cfg`, around `orchestrator` or the one `cfg` describes."""
    return OrchestratorServer(cfg, orchestrator)
