"""Who may swap the served weights: the attacks of issue #16 on the real inference server, on loopback.

An unauthenticated LoadWeights once swapped zeroed weights into a serving engine, and any path or
http:// URI was read. Now every call but the health service's needs the rpc secret, and LoadWeights
reads only under `inference.checkpoint_root`.
"""

import asyncio
import http.server
import threading
from pathlib import Path

import grpc
import pytest
import torch

from clawgym.errors import InvalidArgument, PermissionDenied
from clawgym.generated.v1 import inference_pb2 as pb
from clawgym.generated.v1.inference_pb2_grpc import InferenceStub
from clawgym.inference.checkpoint import within_root
from clawgym.inference.config import InferenceConfig
from clawgym.policies import load_model
from clawgym.rpc import check_health, open_aio_channel
from clawgym_services.inference.server import create_server


@pytest.fixture(scope="module")
def zeroed(tmp_path_factory) -> Path:
    """The checkpoint root, holding `zeroed/`: a tiny-qwen3 checkpoint of all-zero weights (the attack's)."""
    root = tmp_path_factory.mktemp("checkpoint-root")
    model = load_model("tiny-qwen3")
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    model.save_pretrained(root / "zeroed")
    return root


def _serve(engine, root: Path | str, secret: str):
    cfg = InferenceConfig(
        model="tiny-qwen3", host="127.0.0.1", port=0, metrics_port=0, checkpoint_root=str(root)
    )
    return create_server(cfg, engine=engine, secret=secret)


async def _load(target: str, secret: str | None, uri: str) -> grpc.StatusCode:
    """LoadWeights(1, uri) as a caller holding `secret` (None: a plain channel, no metadata)."""
    channel = grpc.aio.insecure_channel(target) if secret is None else open_aio_channel(target, secret)
    async with channel:
        try:
            await InferenceStub(channel).LoadWeights(pb.LoadWeightsRequest(version=1, uri=uri), timeout=60)
        except grpc.aio.AioRpcError as e:
            return e.code()
    return grpc.StatusCode.OK


async def _version(target: str, secret: str) -> int:
    async with open_aio_channel(target, secret) as channel:
        status = await InferenceStub(channel).Status(pb.InferenceStatusRequest(), timeout=30)
    return status.policy_version


def test_load_weights_without_the_secret_is_unauthenticated_and_the_served_weights_stay(
    engine_factory, fresh_model, zeroed, rpc_secret
):
    """The attack: LoadWeights of zeroed weights with no secret, then with a wrong one. Both are
    UNAUTHENTICATED and version 0 stays served; health answers without a secret; the holder of the
    secret loads the same checkpoint."""

    async def body():
        server = _serve(engine_factory(fresh_model), zeroed, rpc_secret)
        port = await server.start()
        target = f"127.0.0.1:{port}"
        try:
            codes = {
                "no secret": await _load(target, None, str(zeroed / "zeroed")),
                "wrong secret": await _load(target, rpc_secret + "x", str(zeroed / "zeroed")),
            }
            version_after_attack = await _version(target, rpc_secret)
            health = await asyncio.to_thread(check_health, target, "clawgym.v1.Inference")
            with_secret = await _load(target, rpc_secret, str(zeroed / "zeroed"))
            version_after_load = await _version(target, rpc_secret)
        finally:
            await server.stop(grace=1, close_engine=False)
        return codes, version_after_attack, health, with_secret, version_after_load

    codes, attacked, health, with_secret, loaded = asyncio.run(body())
    assert codes == {
        "no secret": grpc.StatusCode.UNAUTHENTICATED,
        "wrong secret": grpc.StatusCode.UNAUTHENTICATED,
    }, codes
    assert attacked == 0, f"a refused LoadWeights must leave version 0 served, got {attacked}"
    assert health == "SERVING", "the standard health service must answer probes that carry no secret"
    assert with_secret == grpc.StatusCode.OK and loaded == 1, (
        f"the secret's holder loads a checkpoint under the root: {with_secret.name}, version {loaded}"
    )


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    requests = 0

    def do_GET(self) -> None:
        type(self).requests += 1
        self.send_error(404)

    def log_message(self, *args) -> None:
        pass


def test_load_weights_outside_the_checkpoint_root_is_refused_and_nothing_is_read(
    engine_factory, fresh_model, zeroed, other_checkpoint, tmp_path, rpc_secret
):
    """With the secret: a folder outside the root, a `..` escape, a symlink out of the root and an
    http:// URI are refused (PERMISSION_DENIED; an http server sees no request); a server with no
    root refuses every load; version 0 stays served throughout."""
    outside, _ = other_checkpoint  # a valid checkpoint, outside the root
    (zeroed / "escape").symlink_to(outside, target_is_directory=True)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    attempts = {
        "outside": str(outside),
        "dot-dot": f"{zeroed}/../{outside.name}",
        "symlink out": str(zeroed / "escape"),
        "http": f"http://127.0.0.1:{httpd.server_address[1]}/ckpt",
        "file:// outside": f"file://{outside}",
    }

    async def body():
        server = _serve(engine_factory(fresh_model), zeroed, rpc_secret)
        rootless = _serve(engine_factory(fresh_model), "", rpc_secret)
        target = f"127.0.0.1:{await server.start()}"
        rootless_target = f"127.0.0.1:{await rootless.start()}"
        try:
            codes = {what: await _load(target, rpc_secret, uri) for what, uri in attempts.items()}
            codes["no root configured"] = await _load(rootless_target, rpc_secret, str(zeroed / "zeroed"))
            versions = [await _version(target, rpc_secret), await _version(rootless_target, rpc_secret)]
        finally:
            await server.stop(grace=1, close_engine=False)
            await rootless.stop(grace=1, close_engine=False)
        return codes, versions

    try:
        codes, versions = asyncio.run(body())
    finally:
        httpd.shutdown()
        (zeroed / "escape").unlink()
    assert codes == dict.fromkeys([*attempts, "no root configured"], grpc.StatusCode.PERMISSION_DENIED), codes
    assert _CountingHandler.requests == 0, "a refused http:// URI must not be fetched"
    assert versions == [0, 0], f"refused loads must leave version 0 served: {versions}"


def test_remote_checkpoint_roots_admit_only_uris_under_their_prefix():
    """An s3:// or https:// root admits its own scheme, host and prefix only, and no dot segments."""
    root = "s3://bucket/clawgym"
    assert within_root("s3://bucket/clawgym/run/v000001", root) == "s3://bucket/clawgym/run/v000001"
    for uri in ("s3://bucket/clawgym-evil/v1", "s3://other/clawgym/v1", "gs://bucket/clawgym/v1",
                "https://bucket/clawgym/v1", "/bucket/clawgym/v1"):  # fmt: skip
        with pytest.raises(PermissionDenied):
            within_root(uri, root)
    with pytest.raises(InvalidArgument):
        within_root("s3://bucket/clawgym/../secrets/v1", root)
    assert (
        within_root("https://ckpt.example/run/v2", "https://ckpt.example/") == "https://ckpt.example/run/v2"
    )
    with pytest.raises(PermissionDenied):
        within_root("http://ckpt.example/run/v2", "https://ckpt.example/")
