"""The proxy's worker threads: store I/O and prompt rendering, kept apart so neither starves the other.

Owns two thread pools per app. Store calls are blocking database round trips: many may wait at
once (the database does the work), so that pool is wide. Rendering is CPU (the tokenizer
releases the GIL while it encodes): a few threads use the cores without queueing behind
database writes. One rollout holds at most `render_per_owner` render threads at once (its other
renders wait their turn on the event loop, not in the pool's queue), so a rollout that keeps
several long prompts in flight cannot occupy every thread and queue other rollouts' calls
behind them. The event loop itself only streams.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass
class _Gate:
    slots: asyncio.Semaphore
    users: int = 0  # holding or waiting


class PerOwnerLimit:
    """At most `limit` holders per owner at once; an owner nobody holds or waits for is forgotten
    (so what is kept is bounded by the calls in flight, not by the rollouts ever seen)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._gates: dict[str, _Gate] = {}

    @asynccontextmanager
    async def hold(self, owner: str) -> AsyncIterator[None]:
        gate = self._gates.get(owner)
        if gate is None:
            gate = self._gates[owner] = _Gate(asyncio.Semaphore(self._limit))
        gate.users += 1
        try:
            async with gate.slots:
                yield
        finally:
            gate.users -= 1
            if gate.users == 0:
                del self._gates[owner]


class WorkerPools:
    def __init__(self, store_threads: int = 32, render_threads: int = 4, render_per_owner: int = 0) -> None:
        self._store = ThreadPoolExecutor(store_threads, thread_name_prefix="proxy-store")
        self._render = ThreadPoolExecutor(render_threads, thread_name_prefix="proxy-render")
        self._render_owners = PerOwnerLimit(render_per_owner) if render_per_owner > 0 else None

    async def store(self, fn: Callable[..., T], *args: object) -> T:
        """Runs a blocking store call off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._store, fn, *args)

    async def render(self, fn: Callable[..., T], *args: object, owner: str = "") -> T:
        """Runs rendering + tokenization off the event loop; `owner` (a rollout id) waits here
        while it already holds its share of the render threads."""
        if not owner or self._render_owners is None:
            return await asyncio.get_running_loop().run_in_executor(self._render, fn, *args)
        async with self._render_owners.hold(owner):
            return await asyncio.get_running_loop().run_in_executor(self._render, fn, *args)

    def shutdown(self) -> None:
        self._store.shutdown(wait=True)
        self._render.shutdown(wait=True)
