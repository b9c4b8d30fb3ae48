"""`GrpcEngine`: the `Engine` of a remote inference service (`clawgym serve inference`), over gRPC.

Owns the channel (every call carrying the `rpc` secret) and turning gRPC statuses back into the typed errors the server rendered
(INVALID_ARGUMENT → InvalidArgument, …), so callers cannot tell it from an in-process engine.
Closing a `generate` iterator cancels the call, which aborts the request on the server.
Sampling parameters are checked here as well as on the server: the wire carries them as float32,
where temperature 1e-320 would arrive as 0 (greedy) while the caller records 1e-320.
The channel is asyncio (grpc.aio) and belongs to the event loop of the first call.
"""

import asyncio
from collections.abc import AsyncIterator

import grpc

from clawgym.errors import Unavailable
from clawgym.generated.v1 import inference_pb2
from clawgym.generated.v1.inference_pb2_grpc import InferenceStub
from clawgym.inference import convert
from clawgym.inference.interface import EngineStatus, PromptIds, SamplingParams, TokenChunk
from clawgym.inference.validation import check_sampling
from clawgym.rpc import error_from_rpc, grpc_options, open_aio_channel


class GrpcEngine:
    """An `Engine` backed by the inference service at `target` ("host:port")."""

    def __init__(
        self, target: str, *, secret: str, max_message_mb: int = 64, status_timeout_s: float = 30.0
    ) -> None:
        self.target = target
        self._secret = secret
        self.max_message_mb = max_message_mb
        self.status_timeout_s = status_timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._channel_loop: asyncio.AbstractEventLoop | None = None

    def _stub(self) -> InferenceStub:
        loop = asyncio.get_running_loop()
        if self._channel is None or self._channel_loop is not loop:
            # A grpc.aio channel is bound to one event loop; a new loop gets a new channel.
            self._channel = open_aio_channel(self.target, self._secret, grpc_options(self.max_message_mb))
            self._channel_loop = loop
        return InferenceStub(self._channel)

    async def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        check_sampling(params)
        call = self._stub().Generate(convert.request_to_proto(prompt_ids, params, request_id))
        finished = False
        try:
            async for msg in call:
                chunk = convert.chunk_from_proto(msg)
                finished = chunk.finish_reason is not None
                yield chunk
                if finished:
                    return
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc("inference", e) from e
        finally:
            if not finished:
                call.cancel()
        raise Unavailable(f"inference stream from {self.target} ended without a finish reason")

    async def load_weights(self, version: int, uri: str) -> float:
        request = inference_pb2.LoadWeightsRequest(version=version, uri=uri)
        try:
            reply = await self._stub().LoadWeights(request)
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc("inference", e) from e
        return reply.reload_s

    async def status(self) -> EngineStatus:
        try:
            reply = await self._stub().Status(
                inference_pb2.InferenceStatusRequest(), timeout=self.status_timeout_s
            )
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc("inference", e) from e
        return convert.status_from_proto(reply)

    async def aclose(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
