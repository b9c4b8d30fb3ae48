"""Test helpers for the group commit of calls (`store.group_commit`)."""

import threading

from clawgym.store.group_commit import Pending
from clawgym.store.sql import SqlStore


def hold_first_batch(store: SqlStore) -> tuple[threading.Event, threading.Event]:
    """Makes the store's next batch wait for `release` (after setting `holding`), so the calls that
    arrive meanwhile queue up and are written together in the batch after it."""
    holding, release = threading.Event(), threading.Event()
    write_batch = store.call_batcher._write_batch
    store.call_batcher.max_inflight = 1  # so the calls queue behind the held batch, not beside it

    def held(batch: list[Pending]) -> None:
        if not holding.is_set():
            holding.set()
            assert release.wait(30), "the test never released the first batch"
        write_batch(batch)

    store.call_batcher._write_batch = held
    return holding, release
