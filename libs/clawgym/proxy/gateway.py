"""The proxy's core: one harness request → a rollout's recorded call → the protocol's reply.

Owns the order of a call (ARCHITECTURE.md §5): resolve the API key to a rollout, parse the body
into a canonical conversation, build the prompt (splicing the rollout's generated turns),
clamp the generation budget to what fits, start the engine, and hand back either JSON or an
SSE stream; typed errors become the protocol's error shape with the right HTTP status. It is
framework-free: the HTTP app (`clawgym.proxy.app`) turns `JsonReply` / `StreamReply`
into responses. Nothing is recorded for a request refused here.

The edge's order is the cheap checks first: the API key before the body is read (an unknown
caller costs no upload), the declared `Content-Length` against `proxy.max_body_bytes` before
reading, the running size while reading (chunked bodies declare none), then JSON and text
validity (lone UTF-16 surrogates are refused here, not found by the tokenizer or the store), then
how deeply it nests (`proxy/nesting.py`). A prompt's text longer than the context could hold is
refused before it is tokenized (`ChatTemplate.encode`), and one rollout holds at most
`proxy.render_per_rollout` render threads (`proxy/pools.py`).
"""

import asyncio
import json
import logging
import re
import socket
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json
from transformers import PreTrainedTokenizerBase

from clawgym.errors import ClawgymError, InvalidArgument, Unavailable
from clawgym.inference.interface import Engine, EngineStatus, SamplingParams
from clawgym.protocols.anthropic_messages import AnthropicMessages
from clawgym.protocols.wire import WireProtocol, WireRequest
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.generation import DISCONNECT_POLL_S, CallRun, CallSetup, Disconnected
from clawgym.proxy.held import HeldTurns
from clawgym.proxy.identity import RolloutResolver, api_key
from clawgym.proxy.live import LiveState
from clawgym.proxy.metrics import ProxyMetrics
from clawgym.proxy.nesting import check_arguments_depth, check_body_depth
from clawgym.proxy.pools import WorkerPools
from clawgym.proxy.teacher import Teacher, TeacherEngine
from clawgym.records import Rollout
from clawgym.rendering.detokenize import IncrementalDetokenizer
from clawgym.rendering.splice import PromptBuilder, chain_keys
from clawgym.rendering.template import ChatTemplate
from clawgym.rendering.tool_formats import DEFAULT_FORMAT
from clawgym.store.interface import TrajectoryStore
from clawgym.store.validate import EncodedJSON

log = logging.getLogger(__name__)

STATUS_TTL_S = 1.0  # engine status (context size, policy version) is re-read at most this often
MAX_SEED = 2**63 - 1


@dataclass
class JsonReply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamReply:
    chunks: AsyncIterator[bytes]
    on_close: Callable[[], None]  # call when the client is gone or the stream ended
    # True while output the stream has not framed yet is already waiting: the shell then joins
    # the frames into one socket write (under load, one write a burst instead of one an event)
    more_waiting: Callable[[], bool] = lambda: False


Body = bytes | AsyncIterable[bytes]  # the whole body, or its chunks as they arrive (read only if needed)

# A JSON `\ud800`-`\udfff` escape or the UTF-8 bytes of a surrogate (json.loads decodes bytes with
# surrogatepass): only bodies with one are checked for lone surrogates, paired ones being valid.
MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


class PayloadTooLarge(InvalidArgument):
    """The request body is over `proxy.max_body_bytes` (HTTP 413)."""

    http_status = 413


async def read_body(body: Body, headers: Mapping[str, str], limit: int) -> bytes | bytearray:
    """The request body, refused before reading when its declared length is over `limit` and
    as soon as what arrived is: never more than `limit` bytes are held."""
    declared = headers.get("content-length", "").strip()
    if declared.isdigit() and (len(declared) > 18 or int(declared) > limit):
        raise PayloadTooLarge(f"request body is {declared[:24]} bytes; the limit is {limit}")
    if isinstance(body, bytes):
        if len(body) > limit:
            raise PayloadTooLarge(f"request body is {len(body)} bytes; the limit is {limit}")
        return body
    data = bytearray()
    async for chunk in body:
        data += chunk
        if len(data) > limit:
            raise PayloadTooLarge(f"request body is over the limit of {limit} bytes")
    return data


def parse_body(body: bytes | bytearray) -> Any:
    """The JSON value of a body; InvalidArgument if it is not JSON or holds text that is not
    Unicode (a lone UTF-16 surrogate, which no tokenizer, store or reply can encode).

    pydantic-core's parser first (~10x the stdlib's speed on a 100 kB body, and it refuses lone
    surrogates itself, so no scan of the body follows). It gives the stdlib's values wherever it
    accepts (NaN/Infinity and big integers included); anything it refuses (surrogates, a BOM,
    UTF-16, deep nesting, bad JSON) goes through `parse_body_stdlib` for the error message the
    stdlib gives. An object it parsed comes back as an `EncodedJSON` holding the body's own text,
    the request as recorded: a ~100 kB request is never encoded again (one that holds NaN or
    Infinity, which the store refuses, is left to the store's check)."""
    try:
        value = from_json(body, allow_inf_nan=True)
    except ValueError:
        return parse_body_stdlib(body)  # rare: the stdlib decides, with its own error messages
    if isinstance(value, dict) and b"NaN" not in body and b"Infinity" not in body:
        return EncodedJSON(value, body.decode())
    return value


def parse_body_stdlib(body: bytes | bytearray) -> Any:
    """The stdlib's parse of a body: json.loads, then a scan for surrogates (what pydantic-core
    refuses is answered here)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as e:
        raise InvalidArgument(f"request body is not JSON: {e}") from None
    if MAYBE_SURROGATE.search(body):
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise InvalidArgument(
                "request body holds text that is not Unicode: a lone UTF-16 surrogate (\\ud800-\\udfff)"
            ) from None
        except RecursionError as e:
            raise InvalidArgument(f"request body is not JSON: {e}") from None
    return value


class Gateway:
    """Everything a proxy replica needs, built once per app and passed in (no module-level state)."""

    def __init__(
        self,
        cfg: ProxyConfig,
        engine: Engine,
        store: TrajectoryStore,
        tokenizer: PreTrainedTokenizerBase,
        live: LiveState,
        metrics: ProxyMetrics,
        *,
        supports_tools: bool | None = None,
        tool_call_format: str | None = None,
        teacher: Teacher | None = None,
    ) -> None:
        self.cfg = cfg
        self.teacher = teacher  # answers every call instead of the engine (`proxy/teacher.py`)
        self.instance = cfg.instance or socket.gethostname()
        self.engine = engine
        self.store = store
        self.tokenizer = tokenizer
        self.live = live
        self.metrics = metrics
        self.template = ChatTemplate(
            tokenizer,
            supports_tools,
            cfg.token_run_cache,
            cfg.token_run_cache_mb * 2**20,
            cfg.max_chars_per_token,
        )
        self.builder = PromptBuilder(self.template)
        # a template that renders no tools gets them described in the default format (`template`)
        taught = tool_call_format if self.template.info.renders_tools else None
        self.tool_format = cfg.tool_call_format or taught or DEFAULT_FORMAT
        self.pools = WorkerPools(cfg.store_threads, cfg.render_threads, cfg.render_per_rollout)
        self.resolver = RolloutResolver(store, live, cfg.token_cache_ttl_s, self.pools)
        self.held = HeldTurns(cfg.held_turns_mb * 2**20) if cfg.held_turns_mb else None
        self.background: set[asyncio.Task] = set()  # producers of calls still generating
        self._status: EngineStatus | None = None
        self._status_at = 0.0

    # --- engine status ---

    async def engine_status(self, fresh: bool = False) -> EngineStatus:
        """The engine's status, cached briefly; Unavailable if it cannot be reached."""
        now = time.monotonic()
        if fresh or self._status is None or now - self._status_at > STATUS_TTL_S:
            try:
                self._status = await self.engine.status()
            except ClawgymError:
                raise
            except Exception as e:  # a transport error talking to a remote engine
                raise Unavailable(f"inference engine unreachable: {e}") from e
            self._status_at = now
        return self._status

    # --- one call ---

    async def handle(
        self,
        protocol: WireProtocol,
        body: Body,
        headers: Mapping[str, str],
        disconnected: Disconnected | None = None,
    ) -> JsonReply | StreamReply:
        """Answers one model call in `protocol`'s shape; errors are replies, never exceptions."""
        started = time.perf_counter()
        harness = "unknown"
        try:
            rollout = await self.resolver.resolve(api_key(headers))
            harness = rollout.harness or "unknown"
            t0 = time.perf_counter()
            raw = await read_body(body, headers, self.cfg.max_body_bytes)
            t1 = time.perf_counter()
            request = parse_body(raw)
            check_body_depth(raw, request, self.cfg.max_json_depth)  # before anything recurses over it
            del raw  # the request holds its text: the body's bytes are not held while the call runs
            t2 = time.perf_counter()
            wire = protocol.parse(request)
            check_arguments_depth(wire.conversation, self.cfg.max_json_depth)
            t3 = time.perf_counter()
            timings = {"identity": t0 - started, "read_body": t1 - t0, "json": t2 - t1, "validate": t3 - t2}
            run = await self._start(protocol, wire, request, headers, rollout, started, disconnected, timings)
        except ClawgymError as e:
            return self._error(protocol, e, harness)
        except Exception as e:  # a bug: still answered in the protocol's shape, with the traceback logged
            log.exception("%s request failed", protocol.name)
            return self._error(protocol, ClawgymError(f"internal error: {type(e).__name__}"), harness)
        self.metrics.requests.labels(protocol.name, harness, "200").inc()
        if wire.options.stream:
            return StreamReply(run.setup.reply.stream(run.events()), run.abort, run.more_waiting)
        try:
            completion = await self._wait(run, disconnected)
        except ClawgymError as e:
            return self._error(protocol, e, harness)
        return JsonReply(200, run.setup.reply.response(completion))

    async def _wait(self, run: CallRun, disconnected: Disconnected | None) -> Any:
        """A non-streaming call's completion; a client that leaves meanwhile aborts it."""
        if disconnected is None:
            return await run.completion()
        waiter = asyncio.ensure_future(run.completion())
        try:
            while True:
                done, _ = await asyncio.wait({waiter}, timeout=DISCONNECT_POLL_S)
                if done:
                    return waiter.result()
                if await disconnected():
                    run.abort()
                    return await waiter
        finally:
            if not waiter.done():
                waiter.cancel()

    async def _start(
        self,
        protocol: WireProtocol,
        wire: WireRequest,
        request: Any,
        headers: Mapping[str, str],
        rollout: Rollout,
        started: float,
        disconnected: Disconnected | None,
        timings: dict[str, float],
    ) -> CallRun:
        conv, opts = wire.conversation, wire.options
        status = await self.engine_status()  # its context bounds the text worth tokenizing
        t0 = time.perf_counter()
        keys = chain_keys(conv)
        t1 = time.perf_counter()
        candidates = self.builder.candidate_keys(conv, keys)
        # the newest assistant turn held here whole: nothing to fetch (the usual next call)
        held = self.held.get(rollout.id, candidates[-1]) if self.held is not None and candidates else None
        turns = {} if held is not None else await self.live.get_turns(rollout.id, candidates)
        t2 = time.perf_counter()
        # in a worker thread: the tokenizer releases the GIL, so other calls keep streaming meanwhile
        prompt = await self.pools.render(
            self.builder.build, conv, turns, keys, held, status.max_context, owner=rollout.id
        )
        t3 = time.perf_counter()
        room = status.max_context - len(prompt)
        if room < 1:
            raise InvalidArgument(
                f"prompt is too long: {len(prompt)} tokens, the policy's context is {status.max_context}"
            )
        # Claude Code always asks for 128000: clamp to what fits, then to the deployment's cap
        max_new = min(opts.max_tokens or room, room)
        if self.cfg.max_new_tokens:
            max_new = min(max_new, self.cfg.max_new_tokens)
        temperature = self.cfg.temperature if self.cfg.temperature is not None else opts.temperature
        sampling = SamplingParams(
            max_new_tokens=max_new,
            temperature=1.0 if temperature is None else temperature,
            top_p=opts.top_p or 1.0,
            top_k=opts.top_k or 0,
            stop_token_ids=self.template.info.stop_token_ids,
            seed=None if opts.seed is None else opts.seed % MAX_SEED,
        )
        reply = protocol.reply(wire, len(prompt), prompt.segment_start)
        recorded = {k: headers[k] for k in self.cfg.recorded_headers if k in headers}
        setup = CallSetup(
            rollout=rollout,
            protocol=protocol.name,
            request=request,
            headers=recorded,
            conversation=conv,
            options=opts,
            prompt=prompt,
            sampling=sampling,
            reply=reply,
            starts_in_thinking=self.template.info.starts_in_thinking,
            tool_format=self.tool_format,
            policy_version=status.policy_version,
            teacher=self.teacher.name if self.teacher is not None else "",
            started=started,
            timings={**timings, "chain_keys": t1 - t0, "turn_fetch": t2 - t1, "render": t3 - t2},
        )
        engine = self.engine
        if self.teacher is not None:  # the policy's engine still gives the context and version above
            engine = TeacherEngine(
                self.teacher, self.template, self.pools, conv, opts, rollout, status.policy_version
            )
        run = CallRun(
            setup,
            engine,
            IncrementalDetokenizer(self.tokenizer),
            self.store,
            self.live,
            self.metrics,
            self.template.info.stop_token_ids,
            self.background,
            self.pools,
            self.instance,
            self.held,
        )
        await run.start(disconnected)
        return run

    def _error(self, protocol: WireProtocol, error: ClawgymError, harness: str) -> JsonReply:
        status = error.http_status
        self.metrics.requests.labels(protocol.name, harness, str(status)).inc()
        headers = {"retry-after": str(self.cfg.retry_after_s)} if status == 503 else {}
        if status >= 500:
            log.warning("%s call failed: %s", protocol.name, error)
        return JsonReply(status, protocol.error_body(error), headers)

    # --- the other endpoints ---

    async def count_tokens(
        self, protocol: AnthropicMessages, body: Body, headers: Mapping[str, str]
    ) -> JsonReply:
        """`/v1/messages/count_tokens`: the prompt length of a request rendered from scratch."""
        try:
            rollout = await self.resolver.resolve(api_key(headers))
            raw = await read_body(body, headers, self.cfg.max_body_bytes)
            request = parse_body(raw)
            check_body_depth(raw, request, self.cfg.max_json_depth)
            del raw
            conv = protocol.parse_count_tokens(request)
            check_arguments_depth(conv, self.cfg.max_json_depth)
            context = (await self.engine_status()).max_context
            tokens = await self.pools.render(self.builder.count_tokens, conv, context, owner=rollout.id)
            return JsonReply(200, {"input_tokens": tokens})
        except ClawgymError as e:
            return self._error(protocol, e, "unknown")
        except Exception as e:  # a bug: still answered in the protocol's shape, with the traceback logged
            log.exception("count_tokens request failed")
            return self._error(protocol, ClawgymError(f"internal error: {type(e).__name__}"), "unknown")

    async def models(self) -> dict[str, Any]:
        """`/v1/models` in a shape both the OpenAI and the Anthropic SDKs parse."""
        name = self.cfg.served_model_name or (await self.engine_status()).model
        entry = {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "clawgym",
            "type": "model",
            "display_name": name,
            "created_at": "1970-01-01T00:00:00Z",
        }
        return {"object": "list", "data": [entry], "has_more": False, "first_id": name, "last_id": name}

    async def health(self) -> JsonReply:
        try:
            status = await self.engine_status(fresh=True)
            engine_ok = status.ready
        except ClawgymError:
            status, engine_ok = None, False
        live_ok = await self.live.ping()
        body = {
            "status": "ok" if engine_ok and live_ok else "unavailable",
            "engine": {
                "ready": engine_ok,
                "model": status.model if status else "",
                "policy_version": status.policy_version if status else None,
            },
            "live_state": live_ok,
        }
        return JsonReply(200 if engine_ok and live_ok else 503, body)

    async def warm_up(self) -> None:
        """Opens before the first call what it would otherwise open on its own time (bench/proxy.py,
        a fresh process: ~8 ms of identity, ~4 ms of recording): the live state's connection, the
        store's connections, a render thread and the tokenizer. Best effort: a part not reachable
        yet is left to the first call, whose error says so, and to /healthz."""
        parts = (
            self.live.ping(),
            self.pools.store(self.store.warm_up),
            self.pools.render(self.template.encode, "warm up"),
        )
        outcomes = await asyncio.gather(*parts, return_exceptions=True)
        for part, outcome in zip(("live state", "store", "tokenizer"), outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.warning("warming up the %s failed (the first call will try again): %s", part, outcome)

    async def aclose(self, grace_s: float = 5.0) -> None:
        """Lets in-flight producers finish recording (aborted ones included), then closes live state."""
        if self.background:
            await asyncio.wait(set(self.background), timeout=grace_s)
        await self.live.aclose()
        if self.teacher is not None:
            await self.teacher.aclose()
        self.pools.shutdown()
