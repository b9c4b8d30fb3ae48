"""The proxy in front of the real torch engine under attack (issue #16): poisoning sampling
parameters and clients that leave before their first token.

Real parts only: tiny-qwen3 served by the torch engine, the real proxy over loopback HTTP, a real
SQLite store. Each test reproduces an attack and asserts it now fails: a temperature or top_p the
engine cannot sample with is a 400 in the caller's protocol while another rollout's 30 streams
complete; a client that leaves before its first token aborts the engine request, and its call is
recorded as aborted with no output (never as a completion).
"""

import asyncio
import json
import time

import httpx
import pytest

from clawgym.inference.torch_engine import TorchEngine

USER = [{"role": "user", "content": "Say hello."}]


def _anthropic(token: str, **sampling) -> tuple[str, dict, dict]:
    body = {"model": "tiny-qwen3", "max_tokens": 8, "messages": USER, **sampling}
    return "/v1/messages", body, {"x-api-key": token, "anthropic-version": "2023-06-01"}


def _chat(token: str, **sampling) -> tuple[str, dict, dict]:
    body = {"model": "tiny-qwen3", "max_tokens": 8, "messages": USER, **sampling}
    return "/v1/chat/completions", body, {"authorization": f"Bearer {token}"}


def _responses(token: str, **sampling) -> tuple[str, dict, dict]:
    body = {"model": "tiny-qwen3", "max_output_tokens": 8, "input": "Say hello.", **sampling}
    return "/v1/responses", body, {"authorization": f"Bearer {token}"}


def _error_message(protocol: str, body: dict) -> str:
    """The message of a 400 in the protocol's own error shape (AssertionError if it is not that shape)."""
    if protocol == "anthropic":
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        return body["error"]["message"]
    assert body["error"]["type"] == "invalid_request_error" and "message" in body["error"], body
    return body["error"]["message"]


@pytest.fixture
def engine():
    engine = TorchEngine.from_spec("tiny-qwen3", max_batch=32)
    yield engine
    asyncio.run(engine.aclose())


@pytest.mark.slow
def test_unsampleable_temperature_or_top_p_is_a_400_in_each_protocol_while_30_streams_complete(
    proxy_factory, engine
):
    """temperature 1e-320 (0 in float32: NaN in the sampler, which used to fail every running
    request) and top_p 1e-320 (a nucleus that keeps nothing) → 400 in the Anthropic, OpenAI Chat
    and OpenAI Responses error shapes, nothing recorded for them; another rollout's 30 concurrent
    streams, in the same batch meanwhile, all complete and are recorded."""
    p = proxy_factory(engine=engine, rollouts=2)
    attacker, victim = p.tokens

    async def stream(client: httpx.AsyncClient) -> str | None:
        path, body, headers = _chat(victim, stream=True, temperature=1.0)
        finish = None
        async with client.stream("POST", path, json=body, headers=headers) as reply:
            assert reply.status_code == 200
            async for line in reply.aiter_lines():
                if line.startswith("data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    finish = choices[0].get("finish_reason") or finish
        return finish

    async def poison(client: httpx.AsyncClient, protocol: str, make, field: str):
        path, body, headers = make(attacker, **{field: 1e-320})
        # a refusal is immediate; the timeout only turns the old hang (no answer ever) into a failure
        reply = await client.post(path, json=body, headers=headers, timeout=60)
        return protocol, field, reply.status_code, reply.json()

    async def body():
        async with httpx.AsyncClient(base_url=p.url, timeout=300) as client:
            streams = [asyncio.create_task(stream(client)) for _ in range(30)]
            while (await engine.status()).running == 0:  # the streams are being served
                await asyncio.sleep(0.01)
            refused = await asyncio.gather(
                *(
                    poison(client, protocol, make, field)
                    for protocol, make in (
                        ("anthropic", _anthropic),
                        ("chat", _chat),
                        ("responses", _responses),
                    )
                    for field in ("temperature", "top_p")
                )
            )
            return refused, await asyncio.gather(*streams)

    refused, finishes = asyncio.run(body())
    for protocol, field, status, reply in refused:
        assert status == 400, f"{protocol} {field}=1e-320 answered {status}: {reply}"
        message = _error_message(protocol, reply)
        assert field in message, f"the {protocol} error must name {field}: {message!r}"
    assert all(f in ("stop", "length") for f in finishes), f"a stream of the other rollout failed: {finishes}"
    calls = p.calls(1)
    assert len(calls) == 30 and all(c.finish_reason in ("stop", "length") for c in calls), (
        f"the other rollout's streams must all be recorded as completed: {[c.finish_reason for c in calls]}"
    )
    assert p.calls(0) == [], "a refused call must not be recorded"
    assert engine.counters().finished["error"] == 0, "a poisoning request reached the decode loop"


async def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_a_client_gone_before_its_first_token_aborts_the_engine_request_and_is_recorded_aborted(
    proxy_factory, stream
):
    """The engine is full (one row, busy with another rollout's long stream), so the call waits
    for its first token; its client closes the connection 50 ms after sending. The engine request
    is aborted while still queued, and the call is recorded with finish_reason 'abort' and no
    output, instead of the completion the proxy used to record once the engine got to it."""
    engine = TorchEngine.from_spec("tiny-qwen3", max_batch=1)
    p = proxy_factory(engine=engine, rollouts=2)
    busy, leaving = p.tokens
    host, port = p.url.removeprefix("http://").split(":")

    async def leave_early() -> None:
        path, body, headers = _chat(leaving, stream=stream, temperature=1.0)
        payload = json.dumps(body).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        _, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n{head}"
            f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        await _wait_for(lambda: _waiting(engine), 30, "the call to reach the engine's queue")
        await asyncio.sleep(0.05)
        writer.close()
        await writer.wait_closed()

    async def body():
        async with httpx.AsyncClient(base_url=p.url, timeout=300) as client:
            path, payload, headers = _chat(busy, stream=True, temperature=0, max_tokens=20_000)
            async with client.stream("POST", path, json=payload, headers=headers) as blocker:
                lines = blocker.aiter_lines()
                while not (await anext(lines)).startswith("data: {"):  # the blocker is generating
                    pass
                await leave_early()
                await _wait_for(lambda: _recorded(p, 1), 30, "the leaving client's call to be recorded")
                # the loop drops an aborted request at its next step boundary
                await _wait_for(lambda: _aborted(engine), 30, "the engine to drop the aborted request")
                status = await engine.status()
                aborted = engine.counters().finished["abort"]
            return status, aborted

    try:
        status, aborted = asyncio.run(body())
    finally:
        asyncio.run(engine.aclose())
    (call,) = p.calls(1)
    assert call.finish_reason == "abort" and len(call.output_ids) == 0, (
        f"a client gone before its first token must be recorded as aborted, got {call.finish_reason} "
        f"with {len(call.output_ids)} tokens"
    )
    assert len(call.prompt_ids) > 0, "the aborted call keeps the prompt it asked with"
    assert status.waiting == 0 and status.running == 1 and aborted == 1, (
        f"the engine request must be aborted while the other rollout keeps its row: {status}, aborts {aborted}"
    )


async def _waiting(engine: TorchEngine) -> bool:
    return (await engine.status()).waiting == 1


async def _aborted(engine: TorchEngine) -> bool:
    return engine.counters().finished["abort"] > 0


async def _recorded(p, i: int) -> bool:
    return bool(p.calls(i))
