"""`RedisBus`: the event bus on Redis streams (XADD, XREAD, XREADGROUP, XACK, XAUTOCLAIM).

Owns the mapping of `clawgym.store.bus.EventBus` onto Redis commands and Redis errors onto
`clawgym.errors`; not the semantics, which are Redis's own (described in `clawgym.store.bus`).
Every key is `prefix + stream`, so tests and runs sharing one Redis stay apart.
"""

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import redis

from clawgym.errors import InvalidArgument, NotFound, Unavailable
from clawgym.store.bus import BusEvent


@contextmanager
def _redis_errors(what: str) -> Iterator[None]:
    """Renders Redis failures as clawgym errors: down → Unavailable, no group → NotFound."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as e:
        raise Unavailable(f"redis unreachable during {what}: {e}") from e
    except redis.ResponseError as e:
        if str(e).startswith("NOGROUP"):
            raise NotFound(f"{what}: {e}") from e
        raise InvalidArgument(f"{what}: {e}") from e


def _block_ms(block_s: float | None) -> int | None:
    """XREAD's BLOCK: absent = return at once, 0 = forever, else milliseconds."""
    if block_s is None:
        return 0
    return max(1, int(block_s * 1000)) if block_s > 0 else None


class RedisBus:
    """Redis streams with consumer groups; thread-safe (redis-py pools connections)."""

    def __init__(self, url: str, prefix: str = "") -> None:
        self.prefix = prefix
        self._redis = redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)

    def publish(self, stream: str, fields: Mapping[str, str]) -> str:
        with _redis_errors(f"publish to {stream}"):
            return self._redis.xadd(self._key(stream), {str(k): str(v) for k, v in fields.items()})

    def read(
        self, stream: str, after_id: str = "", count: int = 100, block_s: float | None = 0.0
    ) -> list[BusEvent]:
        with _redis_errors(f"read of {stream}"):
            reply = self._redis.xread(
                {self._key(stream): after_id or "0-0"}, count=count, block=_block_ms(block_s)
            )
        return self._messages(stream, reply)

    def ensure_group(self, stream: str, group: str, start_id: str = "0") -> None:
        try:
            with _redis_errors(f"creating group {group} on {stream}"):
                self._redis.xgroup_create(self._key(stream), group, id=start_id, mkstream=True)
        except InvalidArgument as e:
            if "BUSYGROUP" not in str(e):  # the group exists already: that is what we wanted
                raise

    def read_group(
        self, stream: str, group: str, consumer: str, count: int = 10, block_s: float | None = 0.0
    ) -> list[BusEvent]:
        with _redis_errors(f"group read of {stream} by {group}/{consumer}"):
            reply = self._redis.xreadgroup(
                group, consumer, {self._key(stream): ">"}, count=count, block=_block_ms(block_s)
            )
        return self._messages(stream, reply)

    def ack(self, stream: str, group: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        with _redis_errors(f"ack on {stream} by {group}"):
            return int(self._redis.xack(self._key(stream), group, *ids))

    def claim_stale(
        self, stream: str, group: str, consumer: str, min_idle_s: float, count: int = 10
    ) -> list[BusEvent]:
        claimed: list[BusEvent] = []
        cursor = "0-0"
        with _redis_errors(f"claim on {stream} by {group}/{consumer}"):
            while len(claimed) < count:
                # Redis ≥ 7 answers [next cursor, claimed entries, ids of entries deleted meanwhile].
                reply = self._redis.xautoclaim(
                    self._key(stream),
                    group,
                    consumer,
                    int(min_idle_s * 1000),
                    start_id=cursor,
                    count=count - len(claimed),
                )
                cursor, entries = reply[0], reply[1]
                claimed += [BusEvent(stream, i, dict(f)) for i, f in entries if f is not None]
                if cursor == "0-0":
                    break
        return claimed

    def pending(self, stream: str, group: str) -> int:
        with _redis_errors(f"pending count of {stream} by {group}"):
            return int(self._redis.xpending(self._key(stream), group)["pending"])

    def close(self) -> None:
        self._redis.close()

    def delete_namespace(self) -> int:
        """Deletes every key under this bus's prefix (tests and throwaway runs); returns how many."""
        if not self.prefix:
            raise InvalidArgument(
                "refusing to delete a bus without a namespace prefix: that is the whole Redis db"
            )
        keys = list(self._redis.scan_iter(match=f"{self.prefix}*", count=500))
        return int(self._redis.delete(*keys)) if keys else 0

    def _key(self, stream: str) -> str:
        return self.prefix + stream

    def _messages(self, stream: str, reply: Any) -> list[BusEvent]:
        """XREAD/XREADGROUP reply ([[key, [(id, fields), …]]]) → messages; deleted entries are skipped."""
        if not reply:
            return []
        entries = reply[0][1]  # one stream asked, one answered (RESP2, redis-py's default)
        return [BusEvent(stream, i, dict(f)) for i, f in entries if f is not None]
