"""One call in flight: engine tokens → streamed events → a recorded call, before the last event.

Owns the generation loop of a single call. A producer task (independent of the HTTP request, so
a client that goes away cannot cancel the recording) pulls token chunks from the engine,
detokenizes them incrementally, cuts at stop strings, parses text / thinking / tool calls and
queues events for the protocol to stream. When the turn ends it records the call durably in the
store and keeps the generated turn for splicing, and only then queues `Finished`, so a harness
never sees the end of an answer that is not recorded. `abort()` (client gone) closes the engine
iterator, which aborts the request there, and records the call with finish_reason "abort". A
client that leaves before the first token (a long prefill, a full engine) is noticed while
waiting for it: the engine request is aborted and the call recorded as aborted with no output
(the store's model of a call the harness made but did not see through), then `ClientGone`.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clawgym.arrays import IDS, LOGPROBS
from clawgym.errors import ClawgymError, Unavailable
from clawgym.inference.interface import Engine, SamplingParams, TokenChunk
from clawgym.protocols.conversation import (
    Completion,
    Conversation,
    Failed,
    Finished,
    GenerationOptions,
    OutputEvent,
    StreamItem,
    Usage,
)
from clawgym.protocols.wire import Reply
from clawgym.proxy.held import HeldTurns
from clawgym.proxy.live import LiveState, turn_of
from clawgym.proxy.metrics import ProxyMetrics
from clawgym.proxy.pools import WorkerPools
from clawgym.records import TEACHER_KEY, Call, Rollout
from clawgym.rendering.detokenize import IncrementalDetokenizer
from clawgym.rendering.splice import BuiltPrompt, GeneratedTurn, HeldTurn, turn_key
from clawgym.rendering.tool_formats import DEFAULT_FORMAT, make_parser
from clawgym.store.interface import TrajectoryStore

log = logging.getLogger(__name__)
# One INFO line per call the store acknowledged, before the harness sees the call's end: what a
# crash test checks against the database. Silence it with this logger's level.
acks = logging.getLogger("clawgym.proxy.acks")

DISCONNECT_POLL_S = 0.5  # how often a waiting call asks whether its client is still there
Disconnected = Callable[[], Awaitable[bool]]


class ClientGone(ClawgymError):
    """The client closed its connection before its answer began; nobody reads the reply."""

    grpc_code = "CANCELLED"
    http_status = 499  # nginx's "client closed request"


@dataclass
class CallSetup:
    """Everything decided before the engine is asked: who, what was sent, the prompt, the sampler."""

    rollout: Rollout
    protocol: str
    request: dict[str, Any]
    headers: dict[str, str]
    conversation: Conversation
    options: GenerationOptions
    prompt: BuiltPrompt
    sampling: SamplingParams
    reply: Reply  # the protocol's answer builder: its response JSON is recorded with the call
    starts_in_thinking: bool = False
    tool_format: str = DEFAULT_FORMAT  # how the policy writes tool calls (`clawgym.rendering.tool_formats`)
    policy_version: int = 0  # the engine's version when the call started (used if no token is generated)
    teacher: str = ""  # the teacher that answers instead of the engine (`proxy/teacher.py`); "" = the policy
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)  # pre-engine stages, seconds


class CallRun:
    """A started call. `events()` streams it; `completion()` waits for it; `abort()` cancels it."""

    def __init__(
        self,
        setup: CallSetup,
        engine: Engine,
        detokenizer: IncrementalDetokenizer,
        store: TrajectoryStore,
        live: LiveState,
        metrics: ProxyMetrics,
        stop_token_ids: tuple[int, ...],
        background: set[asyncio.Task],
        pools: WorkerPools,
        instance: str = "",
        held: HeldTurns | None = None,
    ) -> None:
        self.setup = setup
        self._held = held
        self._instance = instance
        self._engine = engine
        self._detok = detokenizer
        self._store = store
        self._live = live
        self._metrics = metrics
        self._labels = (setup.protocol, setup.rollout.harness or "unknown")
        self._stop_ids = set(stop_token_ids)
        self._background = background
        self._pools = pools
        self._parser = make_parser(
            setup.tool_format,
            setup.reply.new_tool_id,
            parse_tool_calls=setup.options.parse_tool_calls,
            starts_in_thinking=setup.starts_in_thinking,
            tools=setup.conversation.tools,
        )
        self._stops = tuple(s for s in setup.options.stop if s)
        self._stop_hold = max((len(s) for s in self._stops), default=1) - 1
        self._raw, self._fed, self._stop_hit = "", 0, None
        self._ids: list[int] = []
        self._logprobs: list[float] = []
        self._versions: list[int] = []
        self._queue: asyncio.Queue[StreamItem] = asyncio.Queue()
        self._engine_wait = 0.0
        self._ttft = 0.0
        self._it: AsyncIterator[TokenChunk] | None = None
        self._task: asyncio.Task | None = None
        self._record_task: asyncio.Task | None = None
        self.seq = -1

    # --- starting ---

    async def start(self, disconnected: Disconnected | None = None) -> None:
        """Asks the engine and waits for its first chunk, so a refusal (bad prompt, engine down)
        becomes an error response; nothing is recorded and no seq is spent for a refused call.
        A client that leaves meanwhile aborts the request: recorded as aborted, then ClientGone."""
        s = self.setup
        t0 = time.perf_counter()
        try:
            self._it = aiter(
                self._engine.generate(s.prompt.array, s.sampling, f"{s.rollout.id}:{id(self):x}")
            )
            first = await self._first_chunk(disconnected)
            self._engine_wait += time.perf_counter() - t0
            self._ttft = time.perf_counter() - s.started
            self.seq = await self._live.next_seq(s.rollout.id, self._seq_floor)
        except BaseException:
            await self._close_engine()
            raise
        if first is None:
            await self._finish_aborted()
            raise ClientGone("the client closed the connection before the first token")
        self._metrics.ttft.labels(*self._labels).observe(self._ttft)
        self._task = asyncio.create_task(self._produce(first))
        self._background.add(self._task)
        self._task.add_done_callback(self._background.discard)

    async def _first_chunk(self, disconnected: Disconnected | None) -> TokenChunk | None:
        """The engine's first chunk, or None when the client left before it (engine request aborted)."""
        pending = asyncio.ensure_future(anext(self._it, TokenChunk([], [], [], "stop")))
        try:
            while True:
                done, _ = await asyncio.wait({pending}, timeout=DISCONNECT_POLL_S)
                # asked once more when the chunk is there: a client gone since the last poll never saw it
                if disconnected is not None and await disconnected():
                    return None
                if done:
                    return pending.result()
        finally:
            if not pending.done():
                pending.cancel()  # cancels the engine wait, which aborts the request there
                with contextlib.suppress(BaseException):
                    await pending

    async def _seq_floor(self) -> int:
        calls = await self._pools.store(self._store.list_calls, self.setup.rollout.id)
        return max((c.seq for c in calls), default=-1) + 1

    # --- consuming ---

    async def events(self) -> AsyncIterator[StreamItem]:
        """Output events as they are decided, ending with Finished (call recorded) or Failed."""
        while True:
            item = await self._queue.get()
            yield item
            if isinstance(item, Finished | Failed):
                return

    async def completion(self) -> Completion:
        """Waits for the whole turn (non-streaming responses); raises what generation failed with."""
        async for item in self.events():
            if isinstance(item, Finished):
                return item.completion
            if isinstance(item, Failed):
                raise item.error
        raise Unavailable("generation ended without a result")

    def more_waiting(self) -> bool:
        """Events are queued that `events()` has not handed out yet."""
        return not self._queue.empty()

    def abort(self) -> None:
        """The client is gone: stop generating, record what was generated as aborted. Idempotent."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    # --- the producer ---

    async def _produce(self, chunk: TokenChunk | None) -> None:
        finish = "stop"
        try:
            while chunk is not None:
                if self._consume(chunk):
                    break
                if chunk.finish_reason is not None:
                    finish = chunk.finish_reason
                    break
                t0 = time.perf_counter()
                chunk = await anext(self._it, None)  # type: ignore[arg-type]
                self._engine_wait += time.perf_counter() - t0
            await self._close_engine()
            self._flush()
            completion = self._complete(finish)
            await self._record(completion)
        except asyncio.CancelledError:
            await self._finish_aborted()
            return
        except ClawgymError as e:  # the engine failed mid-generation
            await self._finish_aborted()
            self._queue.put_nowait(Failed(e))
            return
        except Exception as e:  # a bug: the call is still recorded, the client gets an error event
            log.exception("call %s#%s failed", self.setup.rollout.id, self.seq)
            await self._finish_aborted()
            self._queue.put_nowait(Failed(ClawgymError(f"internal error: {type(e).__name__}")))
            return
        self._queue.put_nowait(Finished(completion))

    def _consume(self, chunk: TokenChunk) -> bool:
        """Takes one engine chunk token by token; True when a stop string ended the turn."""
        for tid, lp, ver in zip(chunk.token_ids, chunk.logprobs, chunk.policy_versions, strict=False):
            self._ids.append(int(tid))
            self._logprobs.append(float(lp))
            self._versions.append(int(ver))
            if tid in self._stop_ids:
                continue
            text = self._detok.push(int(tid))
            if text and self._on_text(text):
                return True
        return False

    def _on_text(self, text: str) -> bool:
        if not self._stops:
            self._emit(self._parser.feed(text))
            return False
        self._raw += text
        hits = [
            (i, s) for s in self._stops if (i := self._raw.find(s, max(0, self._fed - self._stop_hold))) >= 0
        ]
        if hits:
            at, stop = min(hits)
            self._emit(self._parser.feed(self._raw[self._fed : at]))
            self._fed, self._stop_hit = at, stop
            return True
        safe = max(self._fed, len(self._raw) - self._stop_hold)
        self._emit(self._parser.feed(self._raw[self._fed : safe]))
        self._fed = safe
        return False

    def _flush(self) -> None:
        if self._stop_hit is None:
            tail = self._detok.flush()
            if self._stops:
                self._raw += tail
                tail, self._fed = self._raw[self._fed :], len(self._raw)
            self._emit(self._parser.feed(tail))
        self._emit(self._parser.finish())

    def _emit(self, events: list[OutputEvent]) -> None:
        for e in events:
            self._queue.put_nowait(e)

    def _complete(self, finish: str) -> Completion:
        s = self.setup
        return Completion(
            text=self._parser.text,
            thinking=self._parser.thinking,
            tool_calls=tuple(self._parser.tool_calls),
            finish_reason="stop" if self._stop_hit is not None else finish,  # type: ignore[arg-type]
            usage=Usage(len(s.prompt), len(self._ids), s.prompt.segment_start),
            stop_sequence=self._stop_hit,
        )

    async def _close_engine(self) -> None:
        it, self._it = self._it, None
        close = getattr(it, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:  # an engine that fails while aborting has nothing more to give
                log.debug("closing the engine stream failed", exc_info=True)

    async def _finish_aborted(self) -> None:
        await self._close_engine()
        self._parser.finish()
        try:
            await self._record(self._complete("abort"))
        except Exception:  # nobody is left to tell; the log says what was lost
            log.exception("could not record aborted call %s#%s", self.setup.rollout.id, self.seq)

    # --- recording ---

    def _call_of(self, completion: Completion, response: dict[str, Any], latency: float) -> Call:
        s = self.setup
        return Call(
            rollout_id=s.rollout.id,
            seq=self.seq,
            protocol=s.protocol,
            request=s.request,
            response=response,
            prompt_ids=s.prompt.array,
            output_ids=np.asarray(self._ids, dtype=IDS),
            output_logprobs=np.asarray(self._logprobs, dtype=LOGPROBS),
            output_versions=np.asarray(self._versions, dtype=IDS),
            policy_version=self._versions[0] if self._versions else s.policy_version,
            finish_reason=completion.finish_reason,
            latency_s=latency,
            headers=s.headers,
            temperature=s.sampling.temperature,  # what the engine sampled at (forced or the harness's)
        )

    def _turn_of(self, completion: Completion) -> GeneratedTurn | None:
        """The generated turn to keep for splicing; None for an aborted call."""
        if completion.finish_reason == "abort":
            return None
        s = self.setup
        key = turn_key(s.prompt.prompt_key, completion.as_message())
        return turn_of(key, s.prompt.parent, s.prompt.array[s.prompt.segment_start :], self._ids)

    def _store_sync(
        self, completion: Completion, response: dict[str, Any], latency: float
    ) -> GeneratedTurn | None:
        """In a store thread (the producer is done, nothing mutates the outputs): records the call
        durably, then builds the turn to keep (and holds it whole, from the record's arrays)."""
        call = self._call_of(completion, response, latency)
        self._store.record_call(call)
        turn = self._turn_of(completion)
        if turn is not None and self._held is not None:
            last = int(call.output_ids[-1]) if len(call.output_ids) else None
            whole = np.concatenate([call.prompt_ids, call.output_ids])
            self._held.put(self.setup.rollout.id, HeldTurn(turn.key, whole, last))
        return turn

    async def _record(self, completion: Completion) -> None:
        """Records the call once (shielded: a cancel while recording waits for the same write)."""
        if self._record_task is None:
            self._record_task = asyncio.create_task(self._write(completion))
        await asyncio.shield(self._record_task)

    async def _write(self, completion: Completion) -> None:
        s = self.setup
        build_at = time.perf_counter()
        latency = build_at - s.started
        overhead = max(0.0, latency - self._engine_wait)
        response = dict(s.reply.response(completion))
        # clawgym-specific: how the prompt was built and where the time went (not sent to the harness)
        response["_clawgym"] = {
            "proxy": self._instance,  # which replica served it
            **({TEACHER_KEY: s.teacher} if s.teacher else {}),  # not the policy's sample: never RL-trained
            "prefix_extended": s.prompt.extended,
            "rendered_tokens": s.prompt.rendered_tokens,
            "reused_tokens": s.prompt.segment_start,
            "ttft_s": self._ttft,
            "engine_wait_s": self._engine_wait,
            "overhead_s": overhead,  # up to the engine's last token; recording comes after
            **{f"{k}_s": v for k, v in s.timings.items()},
            **{f"build_{k}_s": v for k, v in s.prompt.step_s.items()},
        }
        r0 = time.perf_counter()
        # the arrays and the turn are O(prompt): built in the store thread, not on the event loop
        turn = await self._pools.store(self._store_sync, completion, response, latency)
        r1 = time.perf_counter()
        acks.info("recorded %s#%d %s", s.rollout.id, self.seq, completion.finish_reason)
        if turn is not None:
            # kept before the harness sees the end, so its next request can splice these ids
            await self._live.put_turn(s.rollout.id, turn)
        r2 = time.perf_counter()
        # the metrics include the recording, which the record itself cannot
        latency = time.perf_counter() - s.started
        m, labels = self._metrics, self._labels
        m.calls.labels(*labels, completion.finish_reason).inc()
        m.latency.labels(*labels).observe(latency)
        m.overhead.labels(*labels).observe(max(0.0, latency - self._engine_wait))
        m.tokens_in.labels(*labels).inc(len(s.prompt))
        m.tokens_rendered.labels(*labels).inc(s.prompt.rendered_tokens)
        m.tokens_out.labels(*labels).inc(len(self._ids))
        m.temperature.labels(*labels).observe(s.sampling.temperature)
        if s.prompt.extended:
            m.prefix_extended.labels(*labels).inc()
        stages = {**s.timings, **{f"build_{k}": v for k, v in s.prompt.step_s.items()}}
        stages.update(build_response=r0 - build_at, record=r1 - r0, put_turn=r2 - r1)
        for stage, seconds in stages.items():
            m.stage.labels(stage).observe(seconds)
