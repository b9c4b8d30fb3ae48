"""Long text runs kept tokenized, each tokenized once even when many calls ask for it at once.

Owns the least-recently-used map from a run's text to its ids, and single flight: the first calls
of a step's rollouts can arrive together with the same ~100 kB system prompt + tools run; one
render thread tokenizes it while the others wait for its ids instead of each spending the same
~20 ms (a 22k-token run on one core) again. Thread-safe: the proxy's render threads share one.
What is kept is bounded in entries and in bytes (the run's text, its tuple and an int object per
id), so a few multi-megabyte runs cannot pin gigabytes; a run over the byte budget, or with more
ids than the caller's context holds (no prompt that fits has it), is tokenized but never kept.
It does not decide which runs are long (`control_tokens`).
"""

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable

Ids = tuple[int, ...]
# an id's int object as pymalloc sizes it (28 bytes, rounded up); ids below 257 are shared, so
# this counts them high, never low
INT_BYTES = 32


class _Flight:
    """One run being tokenized: its waiters block on `done` until `ids` is set (None: it failed)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ids: Ids | None = None


def entry_bytes(run: str, ids: Ids) -> int:
    """What keeping `run` and its ids holds in memory."""
    return sys.getsizeof(run) + sys.getsizeof(ids) + INT_BYTES * len(ids)


class RunCache:
    """At most `size` runs' ids and `max_bytes` of runs and ids, least recently used dropped;
    `encode` tokenizes one run."""

    def __init__(self, encode: Callable[[str], Ids], size: int, max_bytes: int = 2**62) -> None:
        self._encode = encode
        self._size = size
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._ids: OrderedDict[str, Ids] = OrderedDict()  # least recently used first
        self._flights: dict[str, _Flight] = {}
        self.nbytes = 0  # of the kept entries, by `entry_bytes`
        self.hits = self.misses = self.shared = 0  # shared: waited for another thread's tokenizing

    def __len__(self) -> int:
        return len(self._ids)

    def get(self, run: str, keep_max_ids: int | None = None) -> Ids:
        """`run`'s ids: kept, another thread's in flight, or tokenized here (and kept unless it has
        more than `keep_max_ids` ids)."""
        with self._lock:
            ids = self._ids.get(run)
            if ids is not None:
                self._ids.move_to_end(run)
                self.hits += 1
                return ids
            flight = self._flights.get(run)
            leader = flight is None
            if flight is None:
                flight = self._flights[run] = _Flight()
                self.misses += 1
            else:
                self.shared += 1
        if not leader:
            flight.done.wait()
            # the leader failed: tokenize here, so the error (if any) is this call's own
            return flight.ids if flight.ids is not None else self._encode(run)
        try:
            flight.ids = self._encode(run)
        finally:
            with self._lock:
                del self._flights[run]
                if flight.ids is not None and (keep_max_ids is None or len(flight.ids) <= keep_max_ids):
                    self._keep(run, flight.ids)
            flight.done.set()
        return flight.ids

    def _keep(self, run: str, ids: Ids) -> None:
        """Keeps a new entry, dropping the least recently used past either bound (under the lock)."""
        cost = entry_bytes(run, ids)
        if cost > self._max_bytes:
            return  # it alone is over the budget: keeping it would drop everything else for it
        self._ids[run] = ids
        self.nbytes += cost
        while len(self._ids) > self._size or self.nbytes > self._max_bytes:
            old_run, old_ids = self._ids.popitem(last=False)
            self.nbytes -= entry_bytes(old_run, old_ids)
