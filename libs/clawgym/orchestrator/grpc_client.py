"""`OrchestratorClient`: the `RolloutService` of a remote orchestrator (`clawgym serve orchestrator`).

Owns the channel (every call carrying the `rpc` secret) and turning gRPC statuses back into the typed errors the server rendered, so a
trainer cannot tell it from the in-process `Orchestrator`. Leaving the `run_rollouts` iterator
early cancels the call, and the server then cancels the batch's rollouts. The channel is asyncio
(grpc.aio) and belongs to the event loop of the first call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator

import grpc

from clawgym.generated.v1 import orchestrator_pb2 as pb
from clawgym.generated.v1.orchestrator_pb2_grpc import OrchestratorStub
from clawgym.orchestrator import convert
from clawgym.orchestrator.interface import Batch, RolloutStatus
from clawgym.rpc import error_from_rpc, open_aio_channel


class OrchestratorClient:
    """A `RolloutService` backed by the orchestrator service at `target` ("host:port")."""

    def __init__(self, target: str, *, secret: str, cancel_timeout_s: float = 120.0) -> None:
        self.target = target
        self._secret = secret
        self.cancel_timeout_s = cancel_timeout_s
        self._channel: grpc.aio.Channel | None = None
        self._channel_loop: asyncio.AbstractEventLoop | None = None

    def _stub(self) -> OrchestratorStub:
        loop = asyncio.get_running_loop()
        if self._channel is None or self._channel_loop is not loop:
            # A grpc.aio channel is bound to one event loop; a new loop gets a new channel.
            self._channel = open_aio_channel(self.target, self._secret)
            self._channel_loop = loop
        return OrchestratorStub(self._channel)

    async def run_rollouts(self, batch: Batch) -> AsyncIterator[RolloutStatus]:
        if not batch.batch_id:  # named here, so the caller can cancel before the first status
            batch = dataclasses.replace(batch, batch_id=uuid.uuid4().hex)
        call = self._stub().RunRollouts(convert.batch_to_proto(batch))
        try:
            async for msg in call:
                yield convert.status_from_proto(msg)
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc("orchestrator", e) from e
        finally:
            call.cancel()  # a no-op once the stream has ended

    async def cancel(self, batch_id: str, rollout_id: str = "") -> int:
        try:
            reply = await self._stub().Cancel(
                pb.CancelRequest(batch_id=batch_id, rollout_id=rollout_id), timeout=self.cancel_timeout_s
            )
        except grpc.aio.AioRpcError as e:
            raise error_from_rpc("orchestrator", e) from e
        return reply.cancelled

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
