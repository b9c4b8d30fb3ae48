"""Keeping an instance's lease in the store (`TrajectoryStore.orchestrator_heartbeat`): what an
orchestrator and the trainer's toy rollout source both do, so that a successor fails the rollouts a
lost instance left unended (see `runner`)."""

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


async def keep_lease(renew: Callable[[], Awaitable[None]], lease_s: float, holder: str) -> None:
    """Awaits `renew()` every `lease_s / 3` until cancelled; a failed renewal is logged, not raised
    (the store may be restarting: the next beat tries again)."""
    while True:
        await asyncio.sleep(lease_s / 3)
        try:
            await renew()
        except Exception as e:
            log.warning("%s: renewing the lease failed: %s", holder, e)
