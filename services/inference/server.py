"""The inference service: `create_server(cfg)` serves an `Engine` over gRPC (asyncio), with Prometheus metrics.

A thin shell: each handler decodes the request (`clawgym.inference.convert`), calls one engine
method and encodes the reply. Typed errors become their gRPC status (`ClawgymError.grpc_code`);
anything else is INTERNAL, with the traceback in this service's log. A client that cancels its
Generate call cancels the handler, which closes the engine stream and so aborts the request.
Every call needs the `rpc` secret (`clawgym.rpc_server`); LoadWeights reads only checkpoints under
`inference.checkpoint_root` (`checkpoint.within_root`), so a caller cannot swap in arbitrary weights.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc

from clawgym.assemble import open_local_engine
from clawgym.generated.v1 import inference_pb2 as pb
from clawgym.generated.v1 import inference_pb2_grpc
from clawgym.inference import convert
from clawgym.inference.checkpoint import within_root
from clawgym.inference.config import InferenceConfig
from clawgym.inference.interface import Engine
from clawgym.rpc_server import AioGrpcServer, HoldsServer, abort_async
from clawgym_services.inference.metrics import InferenceMetrics

log = logging.getLogger(__name__)

METRICS_REFRESH_S = 1.0


class InferenceServicer(inference_pb2_grpc.InferenceServicer):
    def __init__(self, engine: Engine, metrics: InferenceMetrics, checkpoint_root: str) -> None:
        self.engine = engine
        self.metrics = metrics
        self.checkpoint_root = checkpoint_root

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateChunk]:
        stream = None
        try:
            prompt, params = convert.request_from_proto(request)
            stream = self.engine.generate(prompt, params, request.request_id)
            async for chunk in stream:
                self.metrics.generated_tokens.inc(len(chunk.token_ids))
                if chunk.finish_reason is not None:
                    self.metrics.requests.labels(chunk.finish_reason).inc()
                yield convert.chunk_to_proto(chunk)
        except asyncio.CancelledError:
            self.metrics.requests.labels("abort").inc()
            raise
        except Exception as e:
            await abort_async(context, "inference", "Generate", e)
        finally:
            if stream is not None:
                await stream.aclose()  # frees the engine slot when the client went away

    async def LoadWeights(
        self, request: pb.LoadWeightsRequest, context: grpc.aio.ServicerContext
    ) -> pb.LoadWeightsResponse:
        try:
            uri = within_root(request.uri, self.checkpoint_root)
            seconds = await self.engine.load_weights(request.version, uri)
        except Exception as e:
            await abort_async(context, "inference", "LoadWeights", e)
        self.metrics.reload_seconds.observe(seconds)
        log.info("policy version %d loaded from %s in %.2f s", request.version, uri, seconds)
        return pb.LoadWeightsResponse(version=request.version, reload_s=seconds)

    async def Status(
        self, request: pb.InferenceStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.InferenceStatus:
        try:
            status = await self.engine.status()
        except Exception as e:
            await abort_async(context, "inference", "Status", e)
        self.metrics.refresh(status)
        return convert.status_to_proto(status)


class InferenceServer(HoldsServer):
    """A started-on-demand gRPC server (and /metrics endpoint) around one engine."""

    def __init__(self, cfg: InferenceConfig, engine: Engine | None = None, *, secret: str) -> None:
        self.cfg = cfg
        self.engine = engine
        self.metrics = InferenceMetrics()
        self._rpc = AioGrpcServer(
            "clawgym.v1.Inference",
            cfg.host,
            cfg.port,
            secret=secret,
            metrics_port=cfg.metrics_port,
            registry=self.metrics.registry,
            max_message_mb=cfg.grpc_max_message_mb,
        )
        self._refresher: asyncio.Task | None = None

    async def start(self) -> int:
        """Builds the engine if none was given (in a thread), binds host:port (0 = any free port), serves."""
        if self.engine is None:
            self.engine = await asyncio.to_thread(open_local_engine, self.cfg)
        servicer = InferenceServicer(self.engine, self.metrics, self.cfg.checkpoint_root)
        self._rpc.add(inference_pb2_grpc.add_InferenceServicer_to_server, servicer)
        await self._rpc.start()  # SERVING: the engine is built
        self._refresher = asyncio.create_task(self._refresh_metrics())
        return self.port

    async def _refresh_metrics(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # a status hiccup must not stop the metrics
                self.metrics.refresh(await self.engine.status())
            await asyncio.sleep(METRICS_REFRESH_S)

    async def wait(self) -> None:
        await self._rpc.wait_for_termination()

    async def stop(self, grace: float = 5.0, close_engine: bool = True) -> None:
        """Stops serving; in-flight streams get `grace` seconds. Closes the engine unless told not to."""
        if self._refresher is not None:
            self._refresher.cancel()
        await self._rpc.stop(grace)
        if close_engine:
            await self.engine.aclose()


def create_server(cfg: InferenceConfig, engine: Engine | None = None, *, secret: str) -> InferenceServer:
    """An inference server (not started) for `cfg`, serving `engine` or the one `cfg` describes, to
    callers holding `secret`."""
    return InferenceServer(cfg, engine, secret=secret)
