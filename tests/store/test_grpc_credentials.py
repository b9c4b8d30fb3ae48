"""Who may write to the store: the attacks of issue #16 on the real store service, on loopback.

A caller without credentials could finish a rollout with a reward of its choosing (FinishRollout),
and every service listened on all interfaces. Now each call but the health service's needs the rpc
secret, and `clawgym serve store` without --host listens on loopback only.
"""

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from clawgym.config import ClawgymConfig, StoreConfig, load_config
from clawgym.errors import InvalidArgument, Unauthenticated
from clawgym.generated.v1 import store_pb2 as pb
from clawgym.generated.v1.store_pb2_grpc import StoreStub
from clawgym.records import RolloutSpec
from clawgym.rpc import check_health, open_channel
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.sql import SqlStore
from clawgym_app.runtime.services import free_port
from clawgym_services.store.server import create_server

CLAWGYM = Path(sys.executable).with_name("clawgym")
# 127.0.0.1, ::ffff:127.0.0.1 and ::1 as /proc/net/tcp{,6} write them
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


@pytest.fixture
def served(sqlite_url: str, rpc_secret: str) -> Iterator[tuple[SqlStore, str]]:
    store = SqlStore(sqlite_url, MemoryBus())
    server = create_server(
        StoreConfig(port=0, metrics_port=0), host="127.0.0.1", store=store, secret=rpc_secret
    )
    server.start()
    yield store, f"127.0.0.1:{server.port}"
    server.stop(grace=None)
    store.close()


def test_finish_rollout_without_the_secret_forges_no_reward(served, rpc_secret: str) -> None:
    """The attack: FinishRollout(reward=1) on a running rollout, with no secret and with a wrong one.
    Both are UNAUTHENTICATED and the rollout stays running without a reward; the health service
    answers without a secret; the secret's holder finishes the rollout."""
    store, target = served
    run = store.create_run("forging")
    (reg,) = store.register_rollouts(run.id, [RolloutSpec("g", "task", "reference")])
    store.start_rollout(reg.rollout_id, "sandbox-1")
    forged = pb.FinishRolloutRequest(rollout_id=reg.rollout_id, status="finished", reward=1.0, passed=True)
    codes = {}
    for what, channel in {
        "no secret": grpc.insecure_channel(target),
        "wrong secret": open_channel(target, "not-" + rpc_secret),
    }.items():
        with channel, pytest.raises(grpc.RpcError) as caught:
            StoreStub(channel).FinishRollout(forged, timeout=10)
        codes[what] = caught.value.code()
    assert codes == dict.fromkeys(codes, grpc.StatusCode.UNAUTHENTICATED), codes
    after = store.get_rollout(reg.rollout_id)
    assert (after.status, after.reward) == ("running", None), (
        f"a refused FinishRollout must change nothing: {after}"
    )
    with StoreClient(target, secret="wrong", timeout_s=10) as client, pytest.raises(Unauthenticated):
        client.get_run(run.id)  # the typed client: the same refusal, as its typed error

    assert check_health(target, "clawgym.v1.Store") == "SERVING", "probes carry no secret and must work"
    with StoreClient(target, secret=rpc_secret, timeout_s=10) as client:
        finished = client.finish_rollout(reg.rollout_id, "finished", reward=0.0, passed=False)
    assert (finished.status, finished.reward) == ("finished", 0.0), finished


def _listening(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} write them) of sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def _non_loopback_address() -> str | None:
    """An address of this machine other than loopback (the one a route out would use), if any."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, a route is chosen
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


def test_clawgym_serve_store_listens_on_loopback_only_by_default(sqlite_url: str, rpc_secret: str) -> None:
    """`clawgym serve store` with no --host: gRPC and /metrics listen on 127.0.0.1 and nowhere else,
    and a non-loopback address of this machine (where it has one) is not answered."""
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            str(CLAWGYM),
            "serve",
            "store",
            "--url",
            sqlite_url,
            "--port",
            str(port),
            "--metrics-port",
            str(metrics_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "CLAWGYM_RPC__SECRET": rpc_secret},
    )
    try:
        with StoreClient(f"127.0.0.1:{port}", secret=rpc_secret, timeout_s=60) as client:
            client.create_run("loopback")  # waits until it serves
        for what, listened in {"gRPC": _listening(port), "/metrics": _listening(metrics_port)}.items():
            assert listened and listened <= LOOPBACK, f"{what} must listen on loopback only: {listened}"
        other = _non_loopback_address()
        if other is not None:
            with pytest.raises(OSError), socket.create_connection((other, port), timeout=5):
                pass
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_service_without_a_secret_does_not_start(sqlite_url: str) -> None:
    """No rpc.secret configured: `clawgym serve store` exits 2 saying what to set (fails closed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWGYM_")}
    done = subprocess.run(
        [str(CLAWGYM), "serve", "store", "--url", sqlite_url, "--port", "0", "--metrics-port", "0"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "rpc.secret" in done.stderr, (done.returncode, done.stderr[-2000:])
    with pytest.raises(InvalidArgument):
        create_server(StoreConfig(), store=SqlStore(sqlite_url), secret="")


def test_the_secret_comes_from_a_file_and_is_never_dumped(tmp_path: Path) -> None:
    """rpc.secret_file (a mounted Kubernetes Secret) wins over rpc.secret; CLAWGYM_RPC__SECRET works;
    neither the secret nor its file's content appear in a dumped config or its repr."""
    (tmp_path / "secret").write_text("from-the-file\n")
    from_env = load_config(environ={"CLAWGYM_RPC__SECRET": "from-the-env"})
    assert from_env.rpc.shared_secret() == "from-the-env"
    both = ClawgymConfig(rpc={"secret": "inline", "secret_file": str(tmp_path / "secret")})
    assert both.rpc.shared_secret() == "from-the-file", "the file wins, its trailing newline stripped"
    dumped = f"{from_env.model_dump(mode='json')} {both.model_dump(mode='json')} {from_env!r} {both!r}"
    assert "from-the-env" not in dumped and "inline" not in dumped and "from-the-file" not in dumped, dumped
    with pytest.raises(InvalidArgument):
        ClawgymConfig().rpc.shared_secret()
