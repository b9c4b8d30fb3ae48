"""The store service on a loopback port: the typed client against the real gRPC server, both backends."""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from clawgym.config import StoreConfig
from clawgym.errors import AlreadyExists, ClawgymError, InvalidArgument, NotFound, Unavailable
from clawgym.generated.v1 import store_pb2 as pb
from clawgym.generated.v1.store_pb2_grpc import StoreStub
from clawgym.records import Checkpoint, GroupReady, RolloutSpec
from clawgym.rpc import check_health, open_channel
from clawgym.store import convert
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.sql import SqlStore
from clawgym_app.runtime.services import free_port as unused_port
from clawgym_services.store.server import create_server

MAX_CALL_MB = 1


@pytest.fixture
def service(store_url: str, free_port: int, rpc_secret: str) -> Iterator[tuple[SqlStore, str]]:
    """A started store service on 127.0.0.1:free_port over a fresh database; yields (store, target)."""
    cfg = StoreConfig(url=store_url, port=free_port, max_call_mb=MAX_CALL_MB, metrics_port=0)
    store = SqlStore(store_url, MemoryBus(), max_call_bytes=MAX_CALL_MB * 2**20)
    server = create_server(cfg, host="127.0.0.1", store=store, secret=rpc_secret)
    server.start()
    yield store, f"127.0.0.1:{free_port}"
    server.stop(grace=None)
    store.close()


@pytest.fixture
def client(service: tuple[SqlStore, str], rpc_secret: str) -> Iterator[StoreClient]:
    with StoreClient(service[1], secret=rpc_secret, timeout_s=30) as c:
        yield c


def test_a_run_goes_through_the_grpc_store_and_its_group_comes_back(client: StoreClient, make_call) -> None:
    """Create run, register, record calls (one with a 20k-token prompt), finish, watch, read the group back."""
    run = client.create_run("over-grpc", {"algo": "grpo"})
    assert client.get_run(run.id) == run, "a run must round-trip through the service unchanged"
    registered = client.register_rollouts(
        run.id, [RolloutSpec("g", "task", "reference", 2) for _ in range(3)]
    )
    watched: list[GroupReady] = []

    def watch() -> None:
        for ready in client.watch_groups(run.id, timeout_s=20):
            watched.append(ready)
            return  # leaving the loop cancels the stream

    watcher = threading.Thread(target=watch)
    watcher.start()

    sent = {}
    for i, reg in enumerate(registered):
        assert client.resolve_token(reg.token).id == reg.rollout_id, (
            "a token must resolve to its rollout over gRPC"
        )
        client.start_rollout(reg.rollout_id, sandbox=f"local:{i}")
        for seq in range(3):
            n_prompt = 20_000 if (i, seq) == (0, 2) else 200
            call = make_call(reg.rollout_id, seq, key=10 * i + seq, n_prompt=n_prompt, n_output=32)
            client.record_call(call)
            sent[(reg.rollout_id, seq)] = call
    for i, reg in enumerate(registered):
        client.finish_rollout(
            reg.rollout_id, "finished", reward=float(i), passed=i > 0, timings={"harness_s": 1.0}
        )

    watcher.join(timeout=30)
    assert [(w.group_id, w.run_id) for w in watched] == [("g", run.id)], (
        "watch_groups must stream the ready group"
    )
    group = client.get_group("g")
    assert [r.rollout.id for r in group.rollouts] == [r.rollout_id for r in registered], (
        "rollouts in registration order"
    )
    assert [r.rollout.reward for r in group.rollouts] == [0.0, 1.0, 2.0], "rewards must survive the wire"
    assert [r.rollout.passed for r in group.rollouts] == [False, True, True], "passed must survive the wire"
    for member in group.rollouts:
        assert [c.seq for c in member.calls] == [0, 1, 2], "calls in seq order"
        for c in member.calls:
            original = sent[(c.rollout_id, c.seq)]
            assert (c.request, c.response, c.headers, c.temperature) == (
                original.request,
                original.response,
                original.headers,
                original.temperature,  # None (not recorded) stays None, 0.0 (greedy) stays 0.0
            )
            for field in ("prompt_ids", "output_ids", "output_logprobs", "output_versions"):
                assert getattr(c, field).tobytes() == getattr(original, field).tobytes(), (
                    f"{field} changed on the wire"
                )

    resumed = list(client.watch_groups(run.id, after_id=watched[0].message_id, timeout_s=1.5))
    assert resumed == [], "watching after the group's message id must not repeat it"
    client.record_checkpoint(Checkpoint(run.id, 1, 5, "file:///ckpt/1", {"loss": 0.1}))
    assert [c.uri for c in client.list_checkpoints(run.id)] == ["file:///ckpt/1"], "checkpoints over gRPC"
    client.record_train_step(run.id, 5, {"loss": 0.1})
    client.record_eval(run.id, 1, "mini", "reference", {"pass@1": 0.5})
    assert [(e.version, e.harness, e.metrics) for e in client.list_evals(run.id)] == [
        (1, "reference", {"pass@1": 0.5})
    ], "evaluations over gRPC"
    assert client.set_run_status(run.id, "finished").status == "finished", "run status over gRPC"


def test_bad_input_over_grpc_gets_its_status_code_and_writes_nothing(
    service: tuple[SqlStore, str], client: StoreClient, make_call, rpc_secret: str
) -> None:
    """Unknown rollout → NOT_FOUND, bad arrays/names/size → INVALID_ARGUMENT, duplicate → ALREADY_EXISTS."""
    store, target = service
    run = client.create_run("bad-input")
    (reg,) = client.register_rollouts(run.id, [RolloutSpec("g", "t", "h")])
    good = make_call(reg.rollout_id, 0, key=1)
    client.record_call(good)

    def raw(**changes) -> pb.Call:
        message = convert.call_to_proto(make_call(reg.rollout_id, 1, key=2))
        for field, value in changes.items():
            setattr(message, field, value)
        return message

    cases = {
        "unknown rollout": (grpc.StatusCode.NOT_FOUND, raw(rollout_id="f" * 32)),
        "ids not a multiple of 4 bytes": (grpc.StatusCode.INVALID_ARGUMENT, raw(prompt_ids=b"\x01\x02\x03")),
        "logprobs shorter than output": (grpc.StatusCode.INVALID_ARGUMENT, raw(output_logprobs=b"\x00" * 4)),
        "versions longer than output": (grpc.StatusCode.INVALID_ARGUMENT, raw(output_versions=b"\x00" * 400)),
        "unknown protocol": (grpc.StatusCode.INVALID_ARGUMENT, raw(protocol="smtp")),
        "unknown finish reason": (grpc.StatusCode.INVALID_ARGUMENT, raw(finish_reason="")),
        "request not JSON": (grpc.StatusCode.INVALID_ARGUMENT, raw(request_json="{not json")),
        "oversized": (grpc.StatusCode.INVALID_ARGUMENT, raw(prompt_ids=b"\x00" * (MAX_CALL_MB * 2**20 + 4))),
        "duplicate seq": (grpc.StatusCode.ALREADY_EXISTS, raw(seq=0)),
    }
    with open_channel(target, rpc_secret, [("grpc.max_send_message_length", 64 * 2**20)]) as channel:
        stub = StoreStub(channel)
        for what, (code, message) in cases.items():
            with pytest.raises(grpc.RpcError) as caught:
                stub.RecordCall(message, timeout=30)
            assert caught.value.code() == code, (
                f"{what}: expected {code.name}, got {caught.value.code().name}"
            )
        with pytest.raises(grpc.RpcError) as caught:
            stub.RegisterRollouts(
                pb.RegisterRolloutsRequest(
                    run_id="nope", rollouts=[pb.RolloutSpec(group_id="x", task_id="t", harness="h")]
                )
            )
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND, (
            "registering under an unknown run is NOT_FOUND"
        )

    # The typed client raises the same typed errors as the in-process store.
    for error, call in (
        (InvalidArgument, make_call(reg.rollout_id, 1, prompt_ids=np.zeros(4, np.float64))),
        (NotFound, make_call("0" * 32, 0)),
        (AlreadyExists, make_call(reg.rollout_id, 0, key=3)),
    ):
        with pytest.raises(error):
            client.record_call(call)
    with pytest.raises(NotFound):
        client.get_group("no-such-group")
    with pytest.raises(NotFound):
        next(iter(client.watch_groups("no-such-run", timeout_s=10)))

    (only,) = store.list_calls(reg.rollout_id)
    assert only.seq == 0 and only.prompt_ids.tobytes() == good.prompt_ids.tobytes(), (
        "rejected calls must write nothing and leave the recorded call untouched"
    )
    assert [g.id for g in [store.get_group("g")]] == ["g"] and len(store.get_group("g").rollouts) == 1, (
        "a rejected registration must not add rollouts"
    )


class BrokenStore:
    """A store whose every read fails with an untyped error: what the shell does with a bug."""

    def get_run(self, run_id: str):
        raise KeyError(run_id)


def test_an_untyped_failure_is_internal_and_the_service_keeps_serving(free_port: int, rpc_secret: str) -> None:
    cfg = StoreConfig(port=free_port, metrics_port=0)
    server = create_server(cfg, host="127.0.0.1", store=BrokenStore(), secret=rpc_secret)  # type: ignore[arg-type]
    server.start()
    try:
        with StoreClient(f"127.0.0.1:{free_port}", secret=rpc_secret, timeout_s=10) as c:
            for _ in range(2):
                with pytest.raises(ClawgymError) as caught:
                    c.get_run("r")
                assert type(caught.value) is ClawgymError and "INTERNAL" in str(caught.value), (
                    f"an untyped server error must arrive as INTERNAL, got {caught.value!r}"
                )
    finally:
        server.stop(grace=None)


def test_clawgym_serve_store_serves_until_sigterm(sqlite_url: str, free_port: int, rpc_secret: str) -> None:
    """`clawgym serve store --url … --port N` answers the typed client, and exits 0 on SIGTERM."""
    cli = Path(sys.executable).with_name("clawgym")
    proc = subprocess.Popen(
        [str(cli), "serve", "store", "--url", sqlite_url, "--port", str(free_port), "--host", "127.0.0.1",
         "--metrics-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "CLAWGYM_RPC__SECRET": rpc_secret},
    )
    try:
        with StoreClient(f"127.0.0.1:{free_port}", secret=rpc_secret, timeout_s=60) as c:
            run = c.create_run("from-the-cli")
            assert c.get_run(run.id).name == "from-the-cli", "the served store must persist runs"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (
            f"the service must exit 0 on SIGTERM; output:\n{proc.stdout.read()}"
        )  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_store_service_exports_its_rpcs_on_metrics_and_answers_grpc_health(
    sqlite_url: str, free_port: int, make_call, rpc_secret: str
) -> None:
    """/metrics counts RPCs by method and status code and the calls and tokens recorded; health is
    SERVING while it serves and NOT_SERVING from the start of shutdown."""
    cfg = StoreConfig(url=sqlite_url, port=free_port, metrics_port=unused_port())
    store = SqlStore(sqlite_url, MemoryBus())
    server = create_server(cfg, host="127.0.0.1", store=store, secret=rpc_secret)
    target = f"127.0.0.1:{free_port}"
    with pytest.raises(grpc.RpcError):
        check_health(target, timeout_s=1)  # not started: nothing listens
    server.start()
    try:
        assert check_health(target) == "SERVING" and check_health(target, "clawgym.v1.Store") == "SERVING"
        with StoreClient(target, secret=rpc_secret, timeout_s=30) as c:
            run = c.create_run("metrics")
            rollout = c.register_rollouts(run.id, [RolloutSpec("g", "task", "reference", 1)])[0]
            call = make_call(rollout.rollout_id, 0, n_prompt=300, n_output=20)
            c.record_call(call)
            for _ in range(2):
                with pytest.raises(NotFound):
                    c.get_run("no-such-run")
        text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("clawgym_store_requests_total", (("code", "OK"), ("method", "CreateRun")))] == 1
        assert samples[("clawgym_store_requests_total", (("code", "NOT_FOUND"), ("method", "GetRun")))] == 2
        assert samples[("clawgym_store_request_seconds_count", (("method", "RecordCall"),))] == 1
        assert samples[("clawgym_store_calls_recorded_total", ())] == 1
        assert samples[("clawgym_store_tokens_recorded_total", ())] == 320
    finally:
        server.health.shutting_down()
        assert check_health(target) == "NOT_SERVING", "draining: load balancers must stop sending"
        server.stop(grace=None)
        store.close()


def test_warm_up_connects_to_a_store_and_gives_up_quietly_on_one_not_up(
    client: StoreClient, rpc_secret: str
) -> None:
    """`StoreClient.warm_up`: the channel is ready after it; against a port nobody serves it returns
    after its timeout without raising, and the call made then gets the store's own error."""
    client.warm_up()
    assert client.list_runs() == []
    with StoreClient(f"127.0.0.1:{unused_port()}", secret=rpc_secret, timeout_s=0.5) as down:
        t0 = time.monotonic()
        down.warm_up()  # waits the client's 0.5 s
        assert time.monotonic() - t0 < 2
        with pytest.raises(Unavailable):
            down.list_runs()
