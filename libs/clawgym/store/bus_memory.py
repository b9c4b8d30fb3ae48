"""`MemoryBus`: the in-process event bus of embedded mode, with Redis streams' semantics.

Owns streams, consumer groups, pending lists and claims for one process; not persistence (a
restart forgets everything, as embedded mode does). Thread-safe: one lock guards all state and
a condition wakes blocked readers on publish. See `clawgym.store.bus` for the contract.
"""

import bisect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from clawgym.errors import NotFound
from clawgym.store.bus import BusEvent, parse_id


@dataclass
class _Pending:
    consumer: str
    delivered_at: float  # time.monotonic() of the last delivery or claim


@dataclass
class _Group:
    next_index: int  # first entry not yet delivered
    pending: dict[str, _Pending] = field(default_factory=dict)  # message id → holder


@dataclass
class _Stream:
    keys: list[tuple[int, int]] = field(default_factory=list)  # parsed ids, ascending
    ids: list[str] = field(default_factory=list)
    fields: list[dict[str, str]] = field(default_factory=list)
    groups: dict[str, _Group] = field(default_factory=dict)


class MemoryBus:
    """In-process streams with consumer groups, pending lists and stale-message claims."""

    def __init__(self) -> None:
        self._streams: dict[str, _Stream] = {}
        self._changed = threading.Condition()
        self._last = (0, 0)

    def publish(self, stream: str, fields: Mapping[str, str]) -> str:
        with self._changed:
            s = self._streams.setdefault(stream, _Stream())
            now_ms = int(time.time() * 1000)
            key = (now_ms, 0) if now_ms > self._last[0] else (self._last[0], self._last[1] + 1)
            self._last = key
            message_id = f"{key[0]}-{key[1]}"
            s.keys.append(key)
            s.ids.append(message_id)
            s.fields.append({str(k): str(v) for k, v in fields.items()})
            self._changed.notify_all()
            return message_id

    def read(
        self, stream: str, after_id: str = "", count: int = 100, block_s: float | None = 0.0
    ) -> list[BusEvent]:
        after = parse_id(after_id)
        with self._changed:
            self._wait(lambda: self._after(stream, after) is not None, block_s)
            start = self._after(stream, after)
            if start is None:
                return []
            return self._messages(stream, range(start, min(start + count, len(self._streams[stream].ids))))

    def ensure_group(self, stream: str, group: str, start_id: str = "0") -> None:
        with self._changed:
            s = self._streams.setdefault(stream, _Stream())
            if group not in s.groups:
                start = len(s.ids) if start_id == "$" else bisect.bisect_right(s.keys, parse_id(start_id))
                s.groups[group] = _Group(next_index=start)

    def read_group(
        self, stream: str, group: str, consumer: str, count: int = 10, block_s: float | None = 0.0
    ) -> list[BusEvent]:
        with self._changed:
            g = self._group(stream, group)
            s = self._streams[stream]
            self._wait(lambda: g.next_index < len(s.ids), block_s)
            taken = range(g.next_index, min(g.next_index + count, len(s.ids)))
            now = time.monotonic()
            for i in taken:
                g.pending[s.ids[i]] = _Pending(consumer, now)
            g.next_index = taken.stop if taken else g.next_index
            return self._messages(stream, taken)

    def ack(self, stream: str, group: str, ids: Sequence[str]) -> int:
        with self._changed:
            g = self._group(stream, group)
            return sum(g.pending.pop(i, None) is not None for i in ids)

    def claim_stale(
        self, stream: str, group: str, consumer: str, min_idle_s: float, count: int = 10
    ) -> list[BusEvent]:
        with self._changed:
            g = self._group(stream, group)
            s = self._streams[stream]
            now = time.monotonic()
            stale = sorted(
                (parse_id(i), i) for i, p in g.pending.items() if now - p.delivered_at >= min_idle_s
            )
            claimed = [i for _, i in stale[:count]]
            for i in claimed:
                g.pending[i] = _Pending(consumer, now)
            return self._messages(stream, [bisect.bisect_left(s.keys, parse_id(i)) for i in claimed])

    def pending(self, stream: str, group: str) -> int:
        with self._changed:
            return len(self._group(stream, group).pending)

    def close(self) -> None:
        """Nothing to release; readers blocked in `read` return at their own deadline."""

    # --- internals (callers hold the lock) ---

    def _wait(self, ready: Callable[[], bool], block_s: float | None) -> None:
        if block_s == 0 or ready():
            return
        deadline = None if block_s is None else time.monotonic() + block_s
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            self._changed.wait(left)

    def _after(self, stream: str, after: tuple[int, int]) -> int | None:
        """Index of the first entry with id > after, or None if there is none yet."""
        s = self._streams.get(stream)
        if s is None:
            return None
        i = bisect.bisect_right(s.keys, after)
        return i if i < len(s.keys) else None

    def _group(self, stream: str, group: str) -> _Group:
        s = self._streams.get(stream)
        if s is None or group not in s.groups:
            raise NotFound(f"no consumer group {group!r} on stream {stream!r}; call ensure_group first")
        return s.groups[group]

    def _messages(self, stream: str, indexes: Sequence[int]) -> list[BusEvent]:
        s = self._streams[stream]
        return [BusEvent(stream, s.ids[i], dict(s.fields[i])) for i in indexes]
