"""The proxy's live state: token → rollout cache, each rollout's generated turns, call seq numbers.

Owns what proxy replicas must agree on while rollouts run (ARCHITECTURE.md §4): in Redis for
compose/cluster (`RedisLiveState`), in process for embedded mode (`MemoryLiveState`), same
interface. Seq numbers come from one atomic counter per rollout (Redis INCR / a lock), seeded
once from the store, so concurrent calls of one rollout (sub-agents) and calls landing on
different replicas never collide. It does not decide what to cache; `proxy.gateway` does.
"""

import asyncio
import dataclasses
import json
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Protocol

import numpy as np

from clawgym.arrays import IDS, pack_ids, unpack_ids
from clawgym.records import Rollout
from clawgym.rendering.splice import KEY_BYTES, GeneratedTurn
from clawgym.store.bus import split_prefix

SeqFloor = Callable[[], Awaitable[int]]  # the first free seq according to the store


class LiveState(Protocol):
    async def get_rollout(self, token_hash: str) -> Rollout | None: ...
    async def put_rollout(self, token_hash: str, rollout: Rollout, ttl_s: float) -> None: ...
    async def get_turns(self, rollout_id: str, keys: list[bytes]) -> dict[bytes, GeneratedTurn]: ...
    async def put_turn(self, rollout_id: str, turn: GeneratedTurn) -> None: ...
    async def next_seq(self, rollout_id: str, floor: SeqFloor) -> int: ...
    async def ping(self) -> bool: ...
    async def aclose(self) -> None: ...


# --- encoding (Redis values) ---

_HEADER = struct.Struct(f"<{KEY_BYTES}sI")  # parent key (zeros: none), segment length


def encode_turn(turn: GeneratedTurn) -> bytes:
    parent = turn.parent or bytes(KEY_BYTES)
    return _HEADER.pack(parent, len(turn.segment)) + pack_ids(turn.segment) + pack_ids(turn.output)


def decode_turn(key: bytes, data: bytes) -> GeneratedTurn:
    parent, seg_len = _HEADER.unpack_from(data)
    ids = unpack_ids(data[_HEADER.size :])
    return GeneratedTurn(
        key=key,
        parent=b"" if parent == bytes(KEY_BYTES) else parent,
        segment=ids[:seg_len],
        output=ids[seg_len:],
    )


def encode_rollout(rollout: Rollout) -> bytes:
    return json.dumps(dataclasses.asdict(rollout)).encode()


def decode_rollout(data: bytes) -> Rollout:
    return Rollout(**json.loads(data))


# --- in process (embedded mode) ---


class MemoryLiveState:
    """One process's live state; turns of the least recently used rollouts are dropped past a cap."""

    def __init__(self, max_rollouts: int = 4096, turn_ttl_s: float = 86400.0) -> None:
        self._max_rollouts = max_rollouts
        self._turn_ttl_s = turn_ttl_s
        self._tokens: dict[str, tuple[float, Rollout]] = {}
        self._turns: OrderedDict[str, tuple[float, dict[bytes, GeneratedTurn]]] = OrderedDict()
        self._seq: dict[str, int] = {}
        self._seq_lock = asyncio.Lock()

    async def get_rollout(self, token_hash: str) -> Rollout | None:
        hit = self._tokens.get(token_hash)
        if hit is None or hit[0] < time.monotonic():
            self._tokens.pop(token_hash, None)
            return None
        return hit[1]

    async def put_rollout(self, token_hash: str, rollout: Rollout, ttl_s: float) -> None:
        if ttl_s > 0:
            if len(self._tokens) >= 4 * self._max_rollouts:
                self._tokens.clear()  # a cache: dropping it costs one store lookup per token
            self._tokens[token_hash] = (time.monotonic() + ttl_s, rollout)

    async def get_turns(self, rollout_id: str, keys: list[bytes]) -> dict[bytes, GeneratedTurn]:
        entry = self._turns.get(rollout_id)
        if entry is None or entry[0] < time.monotonic():
            self._turns.pop(rollout_id, None)
            return {}
        self._turns.move_to_end(rollout_id)
        return {k: entry[1][k] for k in keys if k in entry[1]}

    async def put_turn(self, rollout_id: str, turn: GeneratedTurn) -> None:
        _, turns = self._turns.pop(rollout_id, (0.0, {}))
        turns[turn.key] = turn
        self._turns[rollout_id] = (time.monotonic() + self._turn_ttl_s, turns)
        while len(self._turns) > self._max_rollouts:
            self._turns.popitem(last=False)

    async def next_seq(self, rollout_id: str, floor: SeqFloor) -> int:
        async with self._seq_lock:
            if rollout_id not in self._seq:
                self._seq[rollout_id] = await floor() - 1
            self._seq[rollout_id] += 1
            return self._seq[rollout_id]

    async def ping(self) -> bool:
        return True

    async def aclose(self) -> None:
        self._tokens.clear()
        self._turns.clear()


# --- Redis (compose / cluster: every replica sees the same state) ---


# A seeded counter's INCR + PEXPIRE in one round trip (atomic, as a script); nil while unseeded.
NEXT_SEQ_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local seq = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return seq
"""


class RedisLiveState:
    """Live state in Redis: `{prefix}:token:{hash}`, `{prefix}:turns:{rollout}` (hash), `{prefix}:seq:{rollout}`.

    A call's seq is one round trip (`NEXT_SEQ_SCRIPT`) once its rollout's counter is seeded."""

    def __init__(self, url: str, prefix: str = "clawgym", turn_ttl_s: float = 86400.0) -> None:
        import redis.asyncio as aioredis

        base, url_prefix = split_prefix(url)  # `?prefix=ns:` namespaces keys, as for the event bus
        self._redis = aioredis.from_url(base)
        self._prefix = url_prefix + prefix
        self._turn_ttl_ms = int(turn_ttl_s * 1000)
        self._next_seq = self._redis.register_script(NEXT_SEQ_SCRIPT)

    def _key(self, kind: str, name: str) -> str:
        return f"{self._prefix}:{kind}:{name}"

    async def get_rollout(self, token_hash: str) -> Rollout | None:
        data = await self._redis.get(self._key("token", token_hash))
        return decode_rollout(data) if data else None

    async def put_rollout(self, token_hash: str, rollout: Rollout, ttl_s: float) -> None:
        if ttl_s > 0:
            await self._redis.set(
                self._key("token", token_hash), encode_rollout(rollout), px=int(ttl_s * 1000)
            )

    async def get_turns(self, rollout_id: str, keys: list[bytes]) -> dict[bytes, GeneratedTurn]:
        if not keys:
            return {}
        values = await self._redis.hmget(self._key("turns", rollout_id), keys)
        return {k: decode_turn(k, v) for k, v in zip(keys, values, strict=True) if v is not None}

    async def put_turn(self, rollout_id: str, turn: GeneratedTurn) -> None:
        key = self._key("turns", rollout_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, turn.key, encode_turn(turn))
            pipe.pexpire(key, self._turn_ttl_ms)
            await pipe.execute()

    async def next_seq(self, rollout_id: str, floor: SeqFloor) -> int:
        key = self._key("seq", rollout_id)
        seq = await self._next_seq(keys=[key], args=[self._turn_ttl_ms])
        if seq is not None:
            return int(seq)
        if not await self._redis.exists(key):
            # SET NX: of replicas seeding at once, one wins; all read the same floor from the store
            await self._redis.set(key, await floor() - 1, nx=True, px=self._turn_ttl_ms)
        seq = await self._redis.incr(key)
        await self._redis.pexpire(key, self._turn_ttl_ms)
        return int(seq)

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except Exception:  # any connection error means "not healthy", reported by /healthz
            return False

    async def aclose(self) -> None:
        await self._redis.aclose()


def make_live_state(redis_url: str, prefix: str, turn_ttl_s: float, max_rollouts: int) -> LiveState:
    """Redis live state when a URL is given, else the in-process twin."""
    if redis_url:
        return RedisLiveState(redis_url, prefix, turn_ttl_s)
    return MemoryLiveState(max_rollouts, turn_ttl_s)


def turn_of(key: bytes, parent: bytes, segment: np.ndarray | list[int], output: list[int]) -> GeneratedTurn:
    return GeneratedTurn(key, parent, np.asarray(segment, dtype=IDS), np.asarray(output, dtype=IDS))
