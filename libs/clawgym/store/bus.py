"""The event bus interface: stream names, the `BusEvent` record, the `EventBus` Protocol, `make_bus(url)`.

Owns what every implementation promises; not the implementations (`bus_redis.RedisBus` on Redis
streams for compose/cluster, `bus_memory.MemoryBus` in-process for embedded mode).

Semantics, the same for both (they are Redis streams' own):

- A stream is an append-only log; `publish` returns the new message's id, `"<ms>-<seq>"`, and ids
  increase. `read(stream, after_id)` tails it with no bookkeeping (watchers, e.g. `watch_groups`).
- A consumer group shares a stream among consumers: `read_group` hands each new message to one
  consumer and keeps it *pending* until that consumer `ack`s it. A message whose consumer died
  before acking stays pending; after `min_idle_s` another consumer takes it over with
  `claim_stale` (XAUTOCLAIM). Acked messages are never delivered again.
- `block_s`: 0 returns at once, `None` waits until a message comes, else waits up to that long.

Streams of the store: `rollouts.done` (a rollout ended), `groups.ready` (every rollout of a group
ended: the trainer's cue) and `checkpoints` (a policy version was published). A key prefix
(namespace) keeps tests and runs sharing one Redis apart.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from clawgym.errors import InvalidArgument

ROLLOUTS_DONE = "rollouts.done"
GROUPS_READY = "groups.ready"
CHECKPOINTS = "checkpoints"
STREAMS = (ROLLOUTS_DONE, GROUPS_READY, CHECKPOINTS)
REDIS_SCHEMES = ("redis", "rediss", "unix")  # the URL schemes redis-py connects by


@dataclass(frozen=True)
class BusEvent:
    """One stream entry: its stream (without the namespace prefix), id and string fields."""

    stream: str
    id: str
    fields: dict[str, str]


class EventBus(Protocol):
    def publish(self, stream: str, fields: Mapping[str, str]) -> str:
        """Appends a message; returns its id."""
        ...

    def read(
        self, stream: str, after_id: str = "", count: int = 100, block_s: float | None = 0.0
    ) -> list[BusEvent]:
        """Messages after `after_id` ("" = from the start), oldest first; no consumer bookkeeping."""
        ...

    def ensure_group(self, stream: str, group: str, start_id: str = "0") -> None:
        """Creates the consumer group if missing ("0": it sees the whole stream, "$": only new messages)."""
        ...

    def read_group(
        self, stream: str, group: str, consumer: str, count: int = 10, block_s: float | None = 0.0
    ) -> list[BusEvent]:
        """New messages for this group, now pending on `consumer` until acked."""
        ...

    def ack(self, stream: str, group: str, ids: Sequence[str]) -> int:
        """Marks messages done; returns how many were pending."""
        ...

    def claim_stale(
        self, stream: str, group: str, consumer: str, min_idle_s: float, count: int = 10
    ) -> list[BusEvent]:
        """Takes over messages pending on any consumer for at least `min_idle_s` (a dead consumer's)."""
        ...

    def pending(self, stream: str, group: str) -> int:
        """How many messages of the group are delivered but not acked."""
        ...

    def close(self) -> None: ...


def split_prefix(url: str) -> tuple[str, str]:
    """`redis://h:6379/0?prefix=t1:` → ("redis://h:6379/0", "t1:"): the namespace is ours, not Redis's."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    prefix = "".join(v for k, v in query if k == "prefix")
    rest = urlencode([(k, v) for k, v in query if k != "prefix"])
    return urlunsplit(parts._replace(query=rest)), prefix


def make_bus(url: str, prefix: str = "") -> EventBus:
    """The bus a URL names: `memory://` (in-process, a new one per call) or `redis://…[?prefix=ns:]`."""
    base, url_prefix = split_prefix(url)
    scheme = urlsplit(base).scheme
    if scheme == "memory":
        from clawgym.store.bus_memory import MemoryBus

        return MemoryBus()
    if scheme in REDIS_SCHEMES:
        from clawgym.store.bus_redis import RedisBus

        return RedisBus(base, prefix=prefix + url_prefix)
    raise InvalidArgument(f"unknown event bus URL {url!r}: use memory:// or redis://host:port/db")


def parse_id(message_id: str) -> tuple[int, int]:
    """A stream id as a comparable pair; "" and "0" are the start. Bad ids are InvalidArgument."""
    if message_id in ("", "0"):
        return (0, 0)
    ms, _, seq = message_id.partition("-")
    try:
        return (int(ms), int(seq or 0))
    except ValueError:
        raise InvalidArgument(f"bad stream message id {message_id!r}: expected '<ms>-<seq>'") from None
