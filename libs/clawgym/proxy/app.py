"""The proxy's HTTP app: `create_app(cfg, engine, store, tokenizer)` → a FastAPI app.

A thin shell around `clawgym.proxy.gateway.Gateway`: each route hands the gateway the raw body
as it arrives (the gateway checks the API key and the size before reading it; malformed bodies
are the protocol's 400, never FastAPI's 422), calls one gateway method and turns its
`JsonReply` / `StreamReply` into a response. How it is served (read deadline): `clawgym.proxy.serving`;
who serves it: `clawgym serve proxy` (`clawgym_services.proxy`) and the embedded run
(`clawgym.assemble.open_embedded_proxy`). Routes exist with and without the `/v1`
prefix because harnesses differ in how they join base URL and path (HARNESSES.md).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.requests import ClientDisconnect
from transformers import PreTrainedTokenizerBase

from clawgym.errors import InvalidArgument
from clawgym.inference.interface import Engine
from clawgym.protocols.anthropic_messages import AnthropicMessages
from clawgym.protocols.openai_chat import OpenAIChat
from clawgym.protocols.openai_responses import OpenAIResponses
from clawgym.protocols.wire import WireProtocol
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.gateway import Gateway, JsonReply, StreamReply
from clawgym.proxy.live import LiveState, make_live_state
from clawgym.proxy.metrics import ProxyMetrics
from clawgym.proxy.teacher import Teacher, make_teacher
from clawgym.store.interface import TrajectoryStore


async def body_of(request: Request) -> AsyncIterator[bytes]:
    """The request body as it arrives; read only as far as the gateway asks."""
    try:
        async for chunk in request.stream():
            yield chunk
    except ClientDisconnect:  # the client left (or was cut off) mid-body: a 400 nobody reads
        raise InvalidArgument("the client disconnected before sending the whole body") from None


def to_response(reply: JsonReply | StreamReply) -> Response:
    if isinstance(reply, JsonReply):
        return JSONResponse(reply.body, reply.status, headers=reply.headers)

    async def body() -> AsyncIterator[bytes]:
        frames: list[bytes] = []
        try:
            async for chunk in reply.chunks:
                frames.append(chunk)
                if not reply.more_waiting():  # nothing more ready: send what there is now
                    yield b"".join(frames)
                    frames.clear()
            if frames:
                yield b"".join(frames)
        finally:  # also when the client disconnected and this stream was cancelled
            reply.on_close()

    headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def create_app(
    cfg: ProxyConfig,
    engine: Engine,
    store: TrajectoryStore,
    tokenizer: PreTrainedTokenizerBase,
    *,
    live: LiveState | None = None,
    registry: CollectorRegistry | None = None,
    supports_tools: bool | None = None,
    tool_call_format: str | None = None,
    teacher: Teacher | None = None,
) -> FastAPI:
    """The proxy app; `live` defaults to Redis when `cfg.redis_url` is set, else in-process; `teacher`
    to the one `cfg.teacher` names (none: the engine answers)."""
    metrics = ProxyMetrics(registry)
    if live is None:
        live = make_live_state(cfg.redis_url, cfg.redis_prefix, cfg.turn_cache_ttl_s, cfg.memory_max_rollouts)
    gateway = Gateway(
        cfg,
        engine,
        store,
        tokenizer,
        live,
        metrics,
        supports_tools=supports_tools,
        tool_call_format=tool_call_format,
        teacher=teacher if teacher is not None else make_teacher(cfg.teacher),
    )
    anthropic, chat, responses = AnthropicMessages(), OpenAIChat(), OpenAIResponses()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await gateway.warm_up()
        yield
        await gateway.aclose()

    app = FastAPI(title="clawgym proxy", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.gateway = gateway

    def model_call(protocol: WireProtocol):
        async def handler(request: Request) -> Response:
            reply = await gateway.handle(protocol, body_of(request), request.headers, request.is_disconnected)
            return to_response(reply)

        return handler

    for prefix in ("/v1", ""):
        app.add_api_route(f"{prefix}/messages", model_call(anthropic), methods=["POST"])
        app.add_api_route(f"{prefix}/chat/completions", model_call(chat), methods=["POST"])
        app.add_api_route(f"{prefix}/responses", model_call(responses), methods=["POST"])

        async def count_tokens(request: Request) -> Response:
            return to_response(await gateway.count_tokens(anthropic, body_of(request), request.headers))

        async def models() -> dict:
            return await gateway.models()

        app.add_api_route(f"{prefix}/messages/count_tokens", count_tokens, methods=["POST"])
        app.add_api_route(f"{prefix}/models", models, methods=["GET"])

    @app.get("/healthz")
    async def healthz() -> Response:
        return to_response(await gateway.health())

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.api_route("/api/hello", methods=["GET", "HEAD"])
    @app.api_route("/", methods=["GET", "HEAD"])
    async def probe() -> dict:
        """Harmless reachability probes (Claude Code's `HEAD /api/hello`)."""
        return {"status": "ok"}

    return app
