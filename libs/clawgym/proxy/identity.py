"""Who is calling: the API key is the rollout token, resolved through the store and cached.

Owns token → rollout resolution and the refusal of unknown or ended rollouts (401 in the
caller's protocol). Tokens are cached under their sha256 only, never in clear. It does not
authenticate anything else: every other header is recorded, not trusted.
"""

import hashlib
from collections.abc import Mapping

from clawgym.errors import NotFound, Unauthenticated
from clawgym.proxy.live import LiveState
from clawgym.proxy.pools import WorkerPools
from clawgym.records import ENDED_ROLLOUT_STATES, Rollout
from clawgym.store.interface import TrajectoryStore


def api_key(headers: Mapping[str, str]) -> str:
    """The key as harnesses send it: `x-api-key` (Anthropic SDKs) or `Authorization: Bearer` (the rest)."""
    key = headers.get("x-api-key", "").strip()
    if key:
        return key
    auth = headers.get("authorization", "").strip()
    scheme, _, value = auth.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


class RolloutResolver:
    """Resolves rollout tokens through the store, with a short-lived cache in the live state."""

    def __init__(self, store: TrajectoryStore, live: LiveState, ttl_s: float, pools: WorkerPools) -> None:
        self._store = store
        self._pools = pools
        self._live = live
        self._ttl_s = ttl_s

    async def resolve(self, token: str) -> Rollout:
        """The running rollout this token belongs to; Unauthenticated if unknown or ended."""
        if not token:
            raise Unauthenticated("no API key: send the rollout token as x-api-key or Authorization: Bearer")
        token_hash = hashlib.sha256(token.encode()).hexdigest()
        rollout = await self._live.get_rollout(token_hash)
        if rollout is None:
            try:
                rollout = await self._pools.store(self._store.resolve_token, token)
            except (NotFound, Unauthenticated):
                raise Unauthenticated("unknown API key: not the token of any rollout") from None
            await self._live.put_rollout(token_hash, rollout, self._ttl_s)
        if rollout.status in ENDED_ROLLOUT_STATES:
            raise Unauthenticated(
                f"rollout {rollout.id} has ended ({rollout.status}); it takes no more calls"
            )
        return rollout
