"""The proxy's worker threads: store I/O and prompt rendering, kept apart so neither starves the other.

Owns two thread pools per app. Store calls are blocking database round trips: many may wait at
once (the database does the work), so that pool is wide. Rendering is CPU (the tokenizer
releases the GIL while it encodes): a few threads use the cores without queueing behind
database writes. The event loop itself only streams.
"""

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


class WorkerPools:
    def __init__(self, store_threads: int = 32, render_threads: int = 4) -> None:
        self._store = ThreadPoolExecutor(store_threads, thread_name_prefix="proxy-store")
        self._render = ThreadPoolExecutor(render_threads, thread_name_prefix="proxy-render")

    async def store(self, fn: Callable[..., T], *args: object) -> T:
        """Runs a blocking store call off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._store, fn, *args)

    async def render(self, fn: Callable[..., T], *args: object) -> T:
        """Runs rendering + tokenization off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._render, fn, *args)

    def shutdown(self) -> None:
        self._store.shutdown(wait=True)
        self._render.shutdown(wait=True)
