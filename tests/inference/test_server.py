"""The inference gRPC server as a service: raw status codes, cancellation, metrics, and its entry point."""

import asyncio
import os
import re
import signal
import subprocess
import sys
import urllib.request

import grpc
import pytest

from clawgym import arrays
from clawgym.generated.v1 import inference_pb2 as pb
from clawgym.generated.v1.inference_pb2_grpc import InferenceStub
from clawgym.inference import convert
from clawgym.inference.config import InferenceConfig
from clawgym.inference.grpc_client import GrpcEngine
from clawgym.inference.interface import SamplingParams
from clawgym.rpc import check_health, open_aio_channel
from clawgym_services.inference.server import create_server


@pytest.fixture
def server(engine_factory, tiny_model, free_port, rpc_secret):
    """The real server around a TorchEngine on 127.0.0.1:<free>, with metrics on a free port, in-loop."""
    cfg = InferenceConfig(model="tiny-qwen3", host="127.0.0.1", port=0, metrics_port=free_port)
    return lambda: create_server(cfg, engine=engine_factory(tiny_model), secret=rpc_secret)


def _request(prompt, **params) -> pb.GenerateRequest:
    return convert.request_to_proto(prompt, SamplingParams(**params), "raw")


def test_bad_requests_get_invalid_argument_status_codes(server, prompts, rpc_secret):
    """Malformed packed arrays and out-of-range requests are INVALID_ARGUMENT on the wire."""

    async def body():
        srv = server()
        port = await srv.start()
        codes = {}
        try:
            async with open_aio_channel(f"127.0.0.1:{port}", rpc_secret) as channel:
                stub = InferenceStub(channel)
                bad = {
                    "odd bytes": pb.GenerateRequest(prompt_ids=b"\x01\x02\x03"),
                    "empty": _request([]),
                    "vocab": _request([5, 999_999]),
                    "context": _request(prompts[0], max_new_tokens=70_000),
                }
                for name, req in bad.items():
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        [m async for m in stub.Generate(req)]
                    codes[name] = caught.value.code()
                ok = [m async for m in stub.Generate(_request(prompts[0], max_new_tokens=4, temperature=0))]
        finally:
            await srv.stop(grace=1)
        return codes, ok

    codes, ok = asyncio.run(body())
    assert all(c == grpc.StatusCode.INVALID_ARGUMENT for c in codes.values()), f"wrong codes: {codes}"
    assert len(arrays.unpack_ids(b"".join(m.token_ids for m in ok))) == 4, (
        "a good request failed after bad ones"
    )


def test_client_cancel_aborts_the_request_on_the_server(server, engine_factory, prompts, rpc_secret):
    """Cancelling the Generate call frees the engine slot and counts an abort."""

    async def body():
        srv = server()
        port = await srv.start()
        try:
            client = GrpcEngine(f"127.0.0.1:{port}", secret=rpc_secret)
            task = asyncio.create_task(
                _drain(client.generate(prompts[1], SamplingParams(max_new_tokens=20_000, temperature=0)))
            )
            await asyncio.sleep(0.5)
            task.cancel()
            for _ in range(200):
                if srv.engine.counters().finished["abort"] == 1 and (await srv.engine.status()).running == 0:
                    break
                await asyncio.sleep(0.02)
            await client.aclose()
            return srv.engine.counters(), await srv.engine.status()
        finally:
            await srv.stop(grace=1)

    counters, status = asyncio.run(body())
    assert counters.finished["abort"] == 1 and status.running == 0, (
        f"cancel did not abort: {counters}, {status}"
    )


async def _drain(stream) -> None:
    async for _ in stream:
        pass


def test_metrics_endpoint_reports_tokens_batch_and_version(server, prompts, rpc_secret):
    """/metrics on the server's own registry counts generated tokens and shows running/version/reload."""

    async def body():
        srv = server()
        port = await srv.start()
        try:
            client = GrpcEngine(f"127.0.0.1:{port}", secret=rpc_secret)
            await asyncio.gather(
                *(
                    _drain(client.generate(p, SamplingParams(max_new_tokens=10, temperature=0)))
                    for p in prompts[:4]
                )
            )
            await client.status()
            await client.aclose()
            health = await asyncio.to_thread(check_health, f"127.0.0.1:{port}", "clawgym.v1.Inference")
            url = f"http://127.0.0.1:{srv.metrics_port}/metrics"
            return health, await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read().decode())
        finally:
            await srv.stop(grace=1)

    health, text = asyncio.run(body())
    assert health == "SERVING", "the standard gRPC health service answers for the inference service"
    assert "clawgym_inference_generated_tokens_total 40.0" in text, "40 generated tokens were not counted"
    assert 'clawgym_inference_requests_total{finish_reason="length"} 4.0' in text, (
        "finished requests not counted"
    )
    for name in (
        "running_requests",
        "waiting_requests",
        "batch_size",
        "policy_version",
        "reload_seconds_count",
    ):
        assert f"clawgym_inference_{name}" in text, f"metric clawgym_inference_{name} missing"


def test_serve_inference_entry_point_serves_until_sigterm(rpc_secret):
    """`python -m clawgym_services.inference --model tiny-qwen3 --port 0` serves Generate, then exits on SIGTERM."""
    cmd = [sys.executable, "-m", "clawgym_services.inference", "--model", "tiny-qwen3", "--host", "127.0.0.1"]
    proc = subprocess.Popen(
        [*cmd, "--port", "0", "--metrics-port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "CLAWGYM_RPC__SECRET": rpc_secret},
    )
    try:
        port = None
        for line in proc.stderr:
            if found := re.search(r"on 127\.0\.0\.1:(\d+)", line):
                port = int(found.group(1))
                break
        assert port, "the service never reported its port"

        async def generate():
            client = GrpcEngine(f"127.0.0.1:{port}", secret=rpc_secret)
            chunks = [
                c async for c in client.generate([1, 2, 3], SamplingParams(max_new_tokens=5, temperature=0))
            ]
            await client.aclose()
            return chunks

        chunks = asyncio.run(generate())
        assert sum(len(c.token_ids) for c in chunks) == 5 and chunks[-1].finish_reason == "length", chunks
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, "the service did not exit cleanly on SIGTERM"
    finally:
        if proc.poll() is None:
            proc.kill()
