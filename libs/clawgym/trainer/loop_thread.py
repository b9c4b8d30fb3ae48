"""`LoopThread`: one asyncio event loop in a daemon thread, for the trainer's synchronous code.

Owns running coroutines of async clients (engines' `load_weights`, the toy rollout source) from
the trainer's plain-Python loop. One loop for all of them, because a gRPC aio channel belongs to
the loop that made it (a `GrpcEngine` must always be awaited on the same loop).
"""

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running in its own daemon thread until `close()`."""

    def __init__(self, name: str = "clawgym-trainer-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> "Future[T]":
        """Schedules `coro` on the loop; returns a concurrent future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Runs `coro` on the loop and waits for its result (re-raising its exception)."""
        return self.submit(coro).result(timeout_s)

    def close(self) -> None:
        """Cancels what is still running and stops the loop (idempotent)."""
        if self.loop.is_closed():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            self.run(_cancel_all(), timeout_s=30)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
        self.loop.close()
