"""`ReplicatedEngine`: one `Engine` over several inference replicas, each rollout pinned to one of them.

Owns routing requests (rollout affinity, least-loaded placement), fanning a checkpoint out to
every replica, and merging their statuses; not the transport (each replica is an `Engine`,
usually a `GrpcEngine` of one `clawgym serve inference`).

Affinity: callers send `request_id = f"{rollout_id}:{anything}"`; the part before the first ':' is
the key. Every call of a rollout resends the rollout's history, so keeping its calls on one replica
lets that replica's prefix cache skip most of the prefill.
"""

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence

from clawgym.errors import ClawgymError, Unavailable
from clawgym.inference.grpc_client import GrpcEngine
from clawgym.inference.interface import Engine, EngineStatus, SamplingParams, TokenChunk

MAX_KEYS = 65_536  # rollouts remembered (LRU); a forgotten one is placed afresh, costing one cache miss


class ReplicatedEngine:
    """An `Engine` spreading rollouts over `engines`; a checkpoint counts as served once all serve it."""

    def __init__(
        self, engines: Sequence[Engine], names: Sequence[str] | None = None, *, max_keys: int = MAX_KEYS
    ) -> None:
        if not engines:
            raise ValueError("a ReplicatedEngine needs at least one replica")
        self.engines = list(engines)
        self.names = list(names) if names is not None else [f"replica {i}" for i in range(len(engines))]
        if len(self.names) != len(self.engines):
            raise ValueError(f"{len(self.engines)} replicas but {len(self.names)} names")
        self.max_keys = max_keys
        self._in_flight = [0] * len(self.engines)
        self._keys = [0] * len(self.engines)  # affinity keys assigned to each replica
        self._affinity: OrderedDict[str, int] = OrderedDict()  # key → replica, least recent first
        self._turn = 0  # rotates ties among replicas for requests without a key

    @classmethod
    def from_targets(cls, targets: list[str], *, secret: str, max_message_mb: int = 64) -> "ReplicatedEngine":
        """Clients of the inference services at `targets` ("host:port" each), named by their targets."""
        engines = [GrpcEngine(t, secret=secret, max_message_mb=max_message_mb) for t in targets]
        return cls(engines, names=targets)

    # --- routing ---

    def _place(self, key: str, exclude: set[int]) -> int:
        """The replica for `key`: the one it sticks to, else the least loaded (then fewest keys)."""
        if key in self._affinity and self._affinity[key] not in exclude:
            self._affinity.move_to_end(key)
            return self._affinity[key]
        n = len(self.engines)
        self._turn = (self._turn + 1) % n
        candidates = [i for i in range(n) if i not in exclude]
        i = min(candidates, key=lambda i: (self._in_flight[i], self._keys[i], (i - self._turn) % n))
        if key:
            if (old := self._affinity.pop(key, None)) is not None:
                self._keys[old] -= 1
            self._affinity[key] = i
            self._keys[i] += 1
            while len(self._affinity) > self.max_keys:
                self._keys[self._affinity.popitem(last=False)[1]] -= 1
        return i

    # --- Engine interface ---

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        key = request_id.partition(":")[0]
        tried: set[int] = set()
        while True:
            i = self._place(key, tried)
            stream = self.engines[i].generate(prompt_ids, params, request_id)
            self._in_flight[i] += 1
            started = False
            try:
                async for chunk in stream:
                    started = True
                    yield chunk
                return
            except Unavailable:
                tried.add(i)
                if started or len(tried) == len(self.engines):
                    raise
                # Nothing was generated, so the request can start over on another replica, and the
                # rollout moves with it: the prefix cache is only a speed-up (every call resends the
                # whole history), and a replica that is down or reloading serves no one meanwhile.
            finally:
                self._in_flight[i] -= 1
                await stream.aclose()  # a consumer that went away aborts the request on the replica

    async def load_weights(self, version: int, uri: str) -> float:
        """Loads `version` on every replica at once; the slowest one's seconds. Any refusal raises,
        naming the replicas that failed and those that now serve `version`."""
        results = await asyncio.gather(
            *(e.load_weights(version, uri) for e in self.engines), return_exceptions=True
        )
        self._raise_failures(results, f"checkpoint {version} from {uri}", "loaded it")
        return max(float(r) for r in results)  # type: ignore[arg-type]

    async def status(self) -> EngineStatus:
        """Merged: a version is served when every replica serves it (the minimum); ready when all are."""
        results = await asyncio.gather(*(e.status() for e in self.engines), return_exceptions=True)
        self._raise_failures(results, "status", "answered")
        statuses: list[EngineStatus] = results  # type: ignore[assignment]
        versions = [s.policy_version for s in statuses]
        return EngineStatus(
            model=statuses[0].model,
            policy_version=min(versions),
            max_context=min(s.max_context for s in statuses),
            vocab_size=min(s.vocab_size for s in statuses),
            running=sum(s.running for s in statuses),
            waiting=sum(s.waiting for s in statuses),
            ready=all(s.ready for s in statuses),
            extra={
                "replicas": float(len(statuses)),
                "ready_replicas": float(sum(s.ready for s in statuses)),
                "min_version": float(min(versions)),
                "max_version": float(max(versions)),
            },
        )

    async def aclose(self) -> None:
        for engine in self.engines:
            if (aclose := getattr(engine, "aclose", None)) is not None:
                await aclose()
            elif (close := getattr(engine, "close", None)) is not None:
                close()

    def _raise_failures(self, results: list, what: str, succeeded: str) -> None:
        """Raises the first failure's typed class, naming every replica that failed and every other."""
        failed = [(n, r) for n, r in zip(self.names, results, strict=True) if isinstance(r, BaseException)]
        if not failed:
            return
        ok = [n for n, r in zip(self.names, results, strict=True) if not isinstance(r, BaseException)]
        first = failed[0][1]
        errors = "; ".join(f"{n}: {type(e).__name__}: {e}" for n, e in failed)
        raise (type(first) if isinstance(first, ClawgymError) else ClawgymError)(
            f"{what} failed on {len(failed)} of {len(results)} replicas ({errors}); "
            f"{succeeded}: {', '.join(ok) or 'none'}"
        ) from first
