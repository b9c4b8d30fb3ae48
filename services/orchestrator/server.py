"""The orchestrator service: `create_server(cfg)` serves an `Orchestrator` over gRPC (asyncio), with /metrics.

A thin shell: each handler decodes the request (`clawgym.orchestrator.convert`), calls one
orchestrator method and encodes the reply. Typed errors become their gRPC status
(`ClawgymError.grpc_code`); anything else is INTERNAL, with the traceback in this service's log.
A client that cancels its RunRollouts stream cancels the handler, which closes the orchestrator's
status iterator and so cancels the batch's rollouts that are still queued or running.
Every call needs the `rpc` secret (`clawgym.rpc_server`), and a batch may name no proxy but the
configured one (`orchestrator.proxy_url`): harnesses get each rollout's API key, which must not be
sent to an address a caller chose.
"""

import dataclasses
from collections.abc import AsyncIterator

import grpc

from clawgym.assemble import build_orchestrator, open_store
from clawgym.config import ClawgymConfig
from clawgym.errors import PermissionDenied
from clawgym.generated.v1 import orchestrator_pb2 as pb
from clawgym.generated.v1 import orchestrator_pb2_grpc
from clawgym.orchestrator import convert
from clawgym.orchestrator.interface import Batch
from clawgym.orchestrator.runner import Orchestrator
from clawgym.rpc_server import AioGrpcServer, HoldsServer, abort_async


def only_configured_proxy(batch: Batch, proxy_url: str) -> Batch:
    """`batch` bound to the configured proxy: PermissionDenied if it names another one."""
    if batch.proxy_url and batch.proxy_url.rstrip("/") != proxy_url.rstrip("/"):
        raise PermissionDenied(
            f"RunRollouts: proxy_url {batch.proxy_url!r} is not this orchestrator's proxy "
            f"(orchestrator.proxy_url {proxy_url!r}); rollout keys go to that one only"
        )
    return dataclasses.replace(batch, proxy_url=proxy_url)


class OrchestratorServicer(orchestrator_pb2_grpc.OrchestratorServicer):
    def __init__(self, orchestrator: Orchestrator, proxy_url: str) -> None:
        self.orchestrator = orchestrator
        self.proxy_url = proxy_url

    async def RunRollouts(
        self, request: pb.RunRolloutsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.RolloutStatus]:
        statuses = None
        try:
            batch = only_configured_proxy(convert.batch_from_proto(request), self.proxy_url)
            statuses = self.orchestrator.run_rollouts(batch)
            async for status in statuses:
                yield convert.status_to_proto(status)
        except Exception as e:
            await abort_async(context, "orchestrator", "RunRollouts", e)
        finally:
            if statuses is not None:
                await statuses.aclose()  # cancels what is still running when the client went away

    async def Cancel(self, request: pb.CancelRequest, context: grpc.aio.ServicerContext) -> pb.CancelResponse:
        try:
            n = await self.orchestrator.cancel(request.batch_id, request.rollout_id)
        except Exception as e:
            await abort_async(context, "orchestrator", "Cancel", e)
        return pb.CancelResponse(cancelled=n)


class OrchestratorServer(HoldsServer):
    """A started-on-demand gRPC server (and /metrics endpoint) around one orchestrator."""

    def __init__(self, cfg: ClawgymConfig, orchestrator: Orchestrator | None = None) -> None:
        self.cfg = cfg.orchestrator
        self.orchestrator = orchestrator or build_orchestrator(cfg, open_store(cfg))
        self._rpc = AioGrpcServer(
            "clawgym.v1.Orchestrator",
            self.cfg.host,
            self.cfg.port,
            secret=cfg.rpc.shared_secret(),
            metrics_port=self.cfg.metrics_port,
            registry=self.orchestrator.metrics.registry,
        )
        servicer = OrchestratorServicer(self.orchestrator, self.orchestrator.cfg.proxy_url)
        self._rpc.add(orchestrator_pb2_grpc.add_OrchestratorServicer_to_server, servicer)

    async def start(self) -> int:
        """Reaps a predecessor's sandboxes, binds host:port (0 = any free port), serves; returns the port."""
        await self.orchestrator.start()
        return await self._rpc.start()

    async def stop(self, grace: float = 5.0) -> None:
        """Stops serving, then cancels the running batches (their sandboxes are destroyed)."""
        await self._rpc.stop(grace)
        await self.orchestrator.close()


def create_server(cfg: ClawgymConfig, orchestrator: Orchestrator | None = None) -> OrchestratorServer:
    """An orchestrator server (not started) for `cfg`, around `orchestrator` or the one `cfg` describes."""
    return OrchestratorServer(cfg, orchestrator)
