"""`ReplicatedEngine`: one `Engine` over several inference replicas, each rollout pinned to one of them.

Owns routing requests (rollout affinity, least-loaded placement), which replicas take traffic
(health and version), fanning a checkpoint out to every replica within a deadline, and merging
their statuses; not the transport (each replica is an `Engine`, usually a `GrpcEngine` of one
`clawgym serve inference`).

Affinity: callers send `request_id = f"{rollout_id}:{anything}"`; the part before the first ':' is
the key. Every call of a rollout resends the rollout's history, so keeping its calls on one replica
lets that replica's prefix cache skip most of the prefill. A new key goes to the ready replica with
the fewest requests in flight, then the fewest rollouts; remaining ties go to the key's
rendezvous-hash favourite (not a rotation), so proxies that see equal replicas place a rollout
alike. Placements are remembered, so a replica joining moves no rollout and one leaving moves only
its own (each then costs one cold prefill of its history on the replica it moves to).

Which replicas take traffic: each is probed (`Status`) every `probe_interval_s` in the background,
and whenever `status()` is asked. One that fails or times out a probe, fails a request with
Unavailable, or misses a publish deadline is out of service until a probe finds it healthy again.
A replica (re)joining is admitted only at the current version: where this engine published one
(the trainer's), a replica behind it first gets `LoadWeights(latest)`; elsewhere (a proxy) it waits
out until it serves the newest version a ready replica serves. Why here and not in the inference
service at start: the service knows no store and no run (a checkpoint root may hold several runs'
checkpoints), while the trainer's engine knows exactly what it published last.
"""

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from clawgym.errors import ClawgymError, Unavailable
from clawgym.inference.grpc_client import GrpcEngine
from clawgym.inference.interface import Engine, EngineStatus, PromptIds, SamplingParams, TokenChunk

log = logging.getLogger(__name__)

MAX_KEYS = 65_536  # rollouts remembered (LRU); a forgotten one is placed afresh, costing one cache miss
LOAD_TIMEOUT_S = 300.0  # a replica that has not loaded a checkpoint by then is taken out of service
PROBE_INTERVAL_S = 5.0
PROBE_TIMEOUT_S = 5.0
LOST = (Unavailable, TimeoutError)  # down or silent: taken out of service (a refusal is not this)


@dataclass
class Replica:
    """One replica and what this engine knows of it."""

    engine: Engine
    name: str
    ready: bool = False  # takes new requests
    version: int | None = None  # the version it last reported or loaded
    answering: bool = True  # answered its last probe (one that did not is left out of publishes)
    reason: str = "not probed yet"  # why it is out of service
    in_flight: int = 0
    keys: int = 0  # affinity keys assigned to it
    excluded: int = 0  # times it was taken out of service


async def _fail(error: BaseException) -> float:
    raise error


def rendezvous(key: str, name: str) -> int:
    """Highest-random-weight score of replica `name` for `key` (stable across processes)."""
    return int.from_bytes(hashlib.blake2b(f"{key}\0{name}".encode(), digest_size=8).digest(), "big")


class ReplicatedEngine:
    """An `Engine` spreading rollouts over `engines`; a version is served once every ready replica serves it."""

    def __init__(
        self,
        engines: Sequence[Engine],
        names: Sequence[str] | None = None,
        *,
        max_keys: int = MAX_KEYS,
        load_timeout_s: float = LOAD_TIMEOUT_S,
        probe_interval_s: float = PROBE_INTERVAL_S,
        probe_timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        if not engines:
            raise ValueError("a ReplicatedEngine needs at least one replica")
        self.engines = list(engines)
        self.names = list(names) if names is not None else [f"replica {i}" for i in range(len(engines))]
        if len(self.names) != len(self.engines):
            raise ValueError(f"{len(self.engines)} replicas but {len(self.names)} names")
        self.replicas = [Replica(e, n) for e, n in zip(self.engines, self.names, strict=True)]
        self.max_keys = max_keys
        self.load_timeout_s, self.probe_interval_s, self.probe_timeout_s = (
            load_timeout_s, probe_interval_s, probe_timeout_s,
        )  # fmt: skip
        self.published: tuple[int, str] | None = None  # the last checkpoint load_weights published
        self._affinity: OrderedDict[str, int] = OrderedDict()  # key → replica, least recent first
        self._turn = 0  # rotates ties among replicas for requests without a key
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None  # one probe round or publish at a time
        self._watch: asyncio.Task | None = None
        self._probed = False

    @classmethod
    def from_targets(
        cls, targets: list[str], *, secret: str, max_message_mb: int = 64, **kwargs: float
    ) -> "ReplicatedEngine":
        """Clients of the inference services at `targets` ("host:port" each), named by their targets."""
        engines = [GrpcEngine(t, secret=secret, max_message_mb=max_message_mb) for t in targets]
        return cls(engines, names=targets, **kwargs)  # type: ignore[arg-type]

    # --- which replicas take traffic ---

    def _bind(self) -> asyncio.Lock:
        """Binds to the running loop (the clients' channels are per loop) and starts the watch there."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._lock is None:
            self._loop, self._lock, self._probed = loop, asyncio.Lock(), False
            if self.probe_interval_s > 0:
                self._watch = loop.create_task(self._watch_replicas())
        return self._lock

    async def _started(self) -> asyncio.Lock:
        """`_bind`, and one probe round first, so that no request goes to a replica not known to be current."""
        lock = self._bind()
        if not self._probed:
            async with lock:
                if not self._probed:  # another request may have probed meanwhile
                    await self._refresh()
        return lock

    async def _watch_replicas(self) -> None:
        while True:
            await asyncio.sleep(self.probe_interval_s)
            try:
                await self.refresh()
            except Exception:  # a probe round must never end the watch
                log.exception("probing the inference replicas failed")

    def _exclude(self, r: Replica, reason: str) -> None:
        r.reason = reason
        if r.ready:
            r.ready = False
            r.excluded += 1
            log.warning("inference replica %s out of service: %s", r.name, reason)

    def _admit(self, r: Replica) -> None:
        if not r.ready:
            r.ready, r.reason = True, ""
            log.info("inference replica %s takes traffic (version %s)", r.name, r.version)

    async def refresh(self) -> list[EngineStatus | BaseException]:
        """Probes every replica; admits the healthy ones at the current version, loading it first
        on one that is behind where this engine published it. Returns each replica's status or error."""
        async with self._bind():
            return await self._refresh()

    async def _refresh(self) -> list[EngineStatus | BaseException]:
        statuses: list[EngineStatus | BaseException] = await asyncio.gather(
            *(asyncio.wait_for(r.engine.status(), self.probe_timeout_s) for r in self.replicas),
            return_exceptions=True,
        )
        self._probed = True
        newest = max(
            (s.policy_version for s in statuses if isinstance(s, EngineStatus) and s.ready), default=0
        )
        behind: list[Replica] = []
        for r, s in zip(self.replicas, statuses, strict=True):
            r.answering = not isinstance(s, BaseException)
            if isinstance(s, BaseException):
                self._exclude(r, f"status: {type(s).__name__}: {s}")
                continue
            r.version = s.policy_version
            if not s.ready:
                self._exclude(r, "reports not ready")
            elif self.published is not None and r.version < self.published[0]:
                behind.append(r)
            elif self.published is None and r.version < newest and not r.ready:
                # joining behind the others: the trainer's engine will load the latest on it
                r.reason = f"serves version {r.version}, behind version {newest}"
            else:
                self._admit(r)  # (a ready replica behind `newest` is mid-publish and stays)
        if behind and self.published is not None:
            await asyncio.gather(*(self._catch_up(r, *self.published) for r in behind))
        return statuses

    async def _catch_up(self, r: Replica, version: int, uri: str) -> None:
        """Loads the published checkpoint on a replica behind it, then lets it take traffic."""
        self._exclude(r, f"serves version {r.version}, behind the published {version}")
        log.info(
            "inference replica %s serves version %s: loading the published %d", r.name, r.version, version
        )
        try:
            await asyncio.wait_for(r.engine.load_weights(version, uri), self.load_timeout_s)
        except Exception as e:
            level = logging.WARNING if isinstance(e, LOST) else logging.ERROR
            log.log(level, "inference replica %s could not load checkpoint %d: %s", r.name, version, e)
            r.reason = f"loading checkpoint {version}: {type(e).__name__}: {e}"
            return
        r.version = version
        self._admit(r)

    # --- routing ---

    def _place(self, key: str, exclude: set[int]) -> int:
        """The replica for `key`: the one it sticks to, else the least loaded ready one (then fewest keys)."""
        if key in self._affinity:
            i = self._affinity[key]
            if i not in exclude and self.replicas[i].ready:
                self._affinity.move_to_end(key)
                return i
        n = len(self.replicas)
        self._turn = (self._turn + 1) % n
        open_ = [i for i in range(n) if i not in exclude]
        # none ready: try one anyway (an answer beats a refusal, and a probe may simply be stale)
        candidates = [i for i in open_ if self.replicas[i].ready] or open_

        def rank(i: int) -> tuple[int, int, int]:
            r = self.replicas[i]
            tie = -rendezvous(key, r.name) if key else (i - self._turn) % n
            return r.in_flight, r.keys, tie

        i = min(candidates, key=rank)
        if key:
            if (old := self._affinity.pop(key, None)) is not None:
                self.replicas[old].keys -= 1
            self._affinity[key] = i
            self.replicas[i].keys += 1
            while len(self._affinity) > self.max_keys:
                self.replicas[self._affinity.popitem(last=False)[1]].keys -= 1
        return i

    # --- Engine interface ---

    async def generate(
        self, prompt_ids: PromptIds, params: SamplingParams, request_id: str = ""
    ) -> AsyncIterator[TokenChunk]:
        await self._started()
        key = request_id.partition(":")[0]
        tried: set[int] = set()
        while True:
            i = self._place(key, tried)
            r = self.replicas[i]
            stream = r.engine.generate(prompt_ids, params, request_id)
            r.in_flight += 1
            started = False
            try:
                async for chunk in stream:
                    started = True
                    yield chunk
                return
            except Unavailable as e:
                tried.add(i)
                self._exclude(r, f"generate: {e}")  # until a probe finds it healthy again
                if started or len(tried) == len(self.replicas):
                    raise
                # Nothing was generated, so the request can start over on another replica, and the
                # rollout moves with it: the prefix cache is only a speed-up (every call resends the
                # whole history), so the cost is one cold prefill of the rollout's history there.
            finally:
                r.in_flight -= 1
                await stream.aclose()  # a consumer that went away aborts the request on the replica

    async def load_weights(self, version: int, uri: str) -> float:
        """Loads `version` on every replica at once; the slowest loaded one's seconds. A replica down
        or not done within `load_timeout_s` is taken out of service (logged; the watch loads the
        latest on it when it answers again), so a dead replica never holds the publish. A refusal
        raises, naming the replicas that failed and those that loaded it, as does reaching none."""
        lock = await self._started()
        async with lock:
            # A replica that did not answer its last probe is left out (else a frozen one would cost
            # every publish the whole deadline); the watch loads the latest on it once it answers.
            skipped = [r for r in self.replicas if not r.ready and not r.answering]
            if len(skipped) == len(self.replicas):
                skipped = []  # none answered: try them all rather than publish to nobody
            for r in skipped:
                log.warning("inference replica %s skipped by checkpoint %d: %s", r.name, version, r.reason)
            lost = Unavailable("out of service, not answering probes")
            results = await asyncio.gather(
                *(
                    asyncio.wait_for(r.engine.load_weights(version, uri), self.load_timeout_s)
                    if r not in skipped
                    else _fail(lost)
                    for r in self.replicas
                ),
                return_exceptions=True,
            )
            what = f"checkpoint {version} from {uri}"
            loaded = [
                (r, res)
                for r, res in zip(self.replicas, results, strict=True)
                if not isinstance(res, BaseException)
            ]
            for r, res in zip(self.replicas, results, strict=True):
                if isinstance(res, LOST) and r not in skipped:
                    self._exclude(
                        r,
                        f"did not load {what} within {self.load_timeout_s:.0f}s: {type(res).__name__}: {res}",
                    )
            for r, _ in loaded:
                r.version = version
                self._admit(r)
            refused = [res for res in results if isinstance(res, BaseException) and not isinstance(res, LOST)]
            if refused or not loaded:
                self._raise_failures(results, what, "loaded it")
            self.published = (version, uri)
            return max(float(s) for _, s in loaded)  # type: ignore[arg-type]

    async def status(self) -> EngineStatus:
        """Merged over the ready replicas (probed now): a version is served when every one of them
        serves it (the minimum); ready when one is. Unavailable when none is."""
        statuses = await self.refresh()
        live = [
            (r, s)
            for r, s in zip(self.replicas, statuses, strict=True)
            if r.ready and isinstance(s, EngineStatus)
        ]
        answered = [s for s in statuses if isinstance(s, EngineStatus)]
        if not live:
            reasons = "; ".join(f"{r.name}: {r.reason}" for r in self.replicas)
            raise Unavailable(f"no inference replica is ready ({reasons})")
        versions = [r.version for r, _ in live]
        return EngineStatus(
            model=live[0][1].model,
            policy_version=min(v for v in versions if v is not None),
            max_context=min(s.max_context for _, s in live),
            vocab_size=min(s.vocab_size for _, s in live),
            running=sum(s.running for s in answered),
            waiting=sum(s.waiting for s in answered),
            ready=True,
            extra={
                "replicas": float(len(self.replicas)),
                "ready_replicas": float(len(live)),
                "min_version": float(min(s.policy_version for s in answered)),
                "max_version": float(max(s.policy_version for s in answered)),
                "excluded_total": float(sum(r.excluded for r in self.replicas)),
            },
        )

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
            self._watch = None
        self._loop = None
        for engine in self.engines:
            await engine.aclose()

    def _raise_failures(self, results: list, what: str, succeeded: str) -> None:
        """Raises the first refusal's typed class (else Unavailable), naming every replica that failed and every other."""
        failed = [(n, r) for n, r in zip(self.names, results, strict=True) if isinstance(r, BaseException)]
        ok = [n for n, r in zip(self.names, results, strict=True) if not isinstance(r, BaseException)]
        refusals = [e for _, e in failed if not isinstance(e, LOST)]
        first = refusals[0] if refusals else failed[0][1]
        errors = "; ".join(f"{n}: {type(e).__name__}: {e}" for n, e in failed)
        cls = (
            type(first)
            if isinstance(first, ClawgymError)
            else Unavailable
            if isinstance(first, LOST)
            else ClawgymError
        )
        raise cls(
            f"{what} failed on {len(failed)} of {len(results)} replicas ({errors}); "
            f"{succeeded}: {', '.join(ok) or 'none'}"
        ) from first
