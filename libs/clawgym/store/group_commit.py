"""Group commit: concurrent writes that arrive while a transaction is in flight share the next one.

Owns the queue and who writes it; not SQL (`clawgym.store.sql` supplies `write_batch`).

Leader/follower, no thread of its own: a caller queues its item; if no batch is being written it
becomes the leader (while fewer than `max_inflight` batches are being written), takes everything
queued (up to `max_items` / `max_bytes`), calls
`write_batch` on it, and wakes the others; a caller whose item is still queued when the leader
is done becomes the next leader. So a caller returns only after the transaction that holds its
item committed (durability is the caller's, as with one transaction per item), and no item waits
for more than the batch in flight plus its own. `write_batch` settles every item it is given,
each with its own result or its own error.
"""

import threading
from collections import deque
from collections.abc import Callable
from typing import Any


class Pending:
    """One queued item: what to write, then its outcome (`result`, or `error` to raise in its caller)."""

    __slots__ = ("done", "error", "result", "size", "taken", "value")

    def __init__(self, value: Any, size: int) -> None:
        self.value = value
        self.size = size
        self.taken = False  # in a batch being written
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True


class GroupCommit:
    """Batches concurrent `submit`s into calls of `write_batch(items)`, `max_inflight` batches at a time."""

    def __init__(
        self,
        write_batch: Callable[[list[Pending]], None],
        max_items: int = 64,
        max_bytes: int = 64 * 2**20,
        max_inflight: int = 1,
    ) -> None:
        self._write_batch = write_batch
        self.max_inflight = max_inflight
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._queue: deque[Pending] = deque()
        self._cond = threading.Condition()
        self._inflight = 0  # batches being written now
        self.batches = 0  # batches written, and the items in them: the bench's mean batch size
        self.items = 0

    def submit(self, value: Any, size: int) -> Any:
        """Queues `value` (`size` bytes), waits until the batch holding it is written, and returns
        its result or raises its error."""
        item = Pending(value, size)
        with self._cond:
            self._queue.append(item)
            while not item.done:
                if item.taken or self._inflight >= self.max_inflight:
                    self._cond.wait()
                    continue
                self._inflight += 1
                batch = self._take()
                self._cond.release()
                try:
                    self._write(batch)
                finally:
                    self._cond.acquire()
                    self._inflight -= 1
                    self.batches, self.items = self.batches + 1, self.items + len(batch)
                    self._cond.notify_all()
        if item.error is not None:
            raise item.error
        return item.result

    def _take(self) -> list[Pending]:
        """The oldest queued items, at least one, within the batch limits (the lock is held)."""
        batch = [self._queue.popleft()]
        size = batch[0].size
        while self._queue and len(batch) < self._max_items and size + self._queue[0].size <= self._max_bytes:
            size += self._queue[0].size
            batch.append(self._queue.popleft())
        for item in batch:
            item.taken = True
        return batch

    def _write(self, batch: list[Pending]) -> None:
        try:
            self._write_batch(batch)
        except BaseException as e:  # a bug in write_batch: every caller hears of it, none hangs
            for item in batch:
                if not item.done:
                    item.settle(error=e)
            if not isinstance(e, Exception):
                raise
        for item in batch:
            if not item.done:
                item.settle(error=RuntimeError("write_batch left an item unsettled"))
