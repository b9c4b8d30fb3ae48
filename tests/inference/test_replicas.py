"""`ReplicatedEngine` over real inference services on loopback: rollout affinity, load spreading,
failover, and a checkpoint that counts as served only once every replica serves it.

Each replica is the real gRPC server (`create_server`, port 0) around its own tiny-qwen3
TorchEngine; where requests landed is read off each server's own Prometheus registry and engine.
"""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from clawgym.assemble import open_engine
from clawgym.config import ClawgymConfig
from clawgym.errors import FailedPrecondition, InvalidArgument
from clawgym.inference.config import InferenceConfig
from clawgym.inference.grpc_client import GrpcEngine
from clawgym.inference.interface import SamplingParams
from clawgym.inference.replicas import ReplicatedEngine
from clawgym.inference.torch_engine import TorchEngine
from clawgym.policies import load_model
from clawgym.policies.tiny_qwen3 import ASSETS
from clawgym.trainer.config import TrainerConfig
from clawgym.trainer.loop import Trainer
from clawgym.trainer.loop_thread import LoopThread
from clawgym_services.inference.server import InferenceServer, create_server

SHORT = SamplingParams(max_new_tokens=3, temperature=0.0)
LONG = SamplingParams(max_new_tokens=5000, temperature=0.0)


SECRET = "replicas-test-secret"


def _server(model: torch.nn.Module, port: int = 0) -> InferenceServer:
    cfg = InferenceConfig(
        model="tiny-qwen3", host="127.0.0.1", port=port, metrics_port=0, checkpoint_root=tempfile.gettempdir()
    )
    return create_server(cfg, engine=TorchEngine(model, name="tiny-qwen3"), secret=SECRET)


@contextlib.asynccontextmanager
async def _replicas(
    *models: torch.nn.Module,
) -> AsyncIterator[tuple[ReplicatedEngine, list[InferenceServer]]]:
    """One started server per model (each model private: reloads change it) and a ReplicatedEngine over them."""
    servers = [_server(m) for m in models]
    try:
        ports = [await s.start() for s in servers]
        engine = ReplicatedEngine.from_targets(
            [f"127.0.0.1:{p}" for p in ports], secret=SECRET, max_message_mb=64
        )
        try:
            yield engine, servers
        finally:
            await engine.aclose()
    finally:
        for s in servers:
            await s.stop(grace=1)


def _ended(server: InferenceServer) -> float:
    """Generate requests this server has ended (any finish reason), from its own Prometheus registry."""
    registry = server.metrics.registry
    return sum(
        registry.get_sample_value("clawgym_inference_requests_total", {"finish_reason": r}) or 0.0
        for r in ("stop", "length", "abort")
    )


async def _drain(stream) -> int:
    return sum([len(chunk.token_ids) async for chunk in stream])


async def _until(condition, timeout_s: float = 30.0) -> bool:
    for _ in range(int(timeout_s / 0.02)):
        if await condition():
            return True
        await asyncio.sleep(0.02)
    return False


def _two_layer_model() -> torch.nn.Module:
    """A tiny-qwen3 with 2 layers instead of 4: another model, which a tiny-qwen3 checkpoint does not fit."""
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(ASSETS, num_hidden_layers=2))


def test_grpc_url_listing_several_replicas_connects_a_replicated_engine():
    """The composition root: comma-separated targets give a ReplicatedEngine, one target a GrpcEngine (nothing connects yet)."""
    rpc = {"secret": SECRET}
    several = open_engine(
        ClawgymConfig(inference=InferenceConfig(grpc_url=" 127.0.0.1:1, 127.0.0.1:2 ,"), rpc=rpc)
    )
    one = open_engine(ClawgymConfig(inference=InferenceConfig(grpc_url="127.0.0.1:1,"), rpc=rpc))
    assert isinstance(several, ReplicatedEngine) and several.names == ["127.0.0.1:1", "127.0.0.1:2"], (
        f"two listed replicas must give a ReplicatedEngine over both: {several!r}"
    )
    assert isinstance(one, GrpcEngine) and one.target == "127.0.0.1:1", f"one target is one client: {one!r}"


def test_each_rollouts_calls_stay_on_one_replica_while_rollouts_spread_over_both(prompts):
    """12 rollouts × 3 calls, interleaved (odd rounds in reverse, so that placing each call afresh
    would split rollouts): every call of a rollout lands on the replica of its first."""

    async def body():
        async with _replicas(load_model("tiny-qwen3"), load_model("tiny-qwen3")) as (engine, servers):
            landed: dict[int, list[int]] = {r: [] for r in range(12)}
            for seq in range(3):
                for r in range(12) if seq % 2 == 0 else reversed(range(12)):
                    before = [_ended(s) for s in servers]
                    await _drain(engine.generate(prompts[r % 8], SHORT, f"rollout{r}:{seq}"))
                    grew = [i for i, s in enumerate(servers) if _ended(s) == before[i] + 1]
                    assert len(grew) == 1, (
                        f"call {seq} of rollout {r} must end on exactly one replica: {grew}"
                    )
                    landed[r] += grew
            return landed, [_ended(s) for s in servers]

    landed, totals = asyncio.run(body())
    split = {r: sorted(set(replicas)) for r, replicas in landed.items() if len(set(replicas)) > 1}
    assert not split, f"a rollout's calls were split over replicas (its prefix cache is lost): {split}"
    assert sorted(totals) == [18.0, 18.0], f"rollouts must spread evenly over both replicas: {totals}"


def test_new_rollouts_go_to_the_replica_with_fewer_requests_in_flight(prompts):
    """Rollout p holds three long calls on its replica; three new rollouts then all go to the other one,
    even though it already has more rollouts assigned (load first, then count of rollouts)."""

    async def body():
        async with _replicas(load_model("tiny-qwen3"), load_model("tiny-qwen3")) as (engine, servers):
            first = []
            for key in ("p", "q"):
                before = [_ended(s) for s in servers]
                await _drain(engine.generate(prompts[0], SHORT, f"{key}:0"))
                first += [i for i, s in enumerate(servers) if _ended(s) > before[i]]

            async def running() -> list[int]:
                return [(await s.engine.status()).running for s in servers]

            def start(key: str) -> asyncio.Task:
                return asyncio.create_task(_drain(engine.generate(prompts[1], LONG, key)))

            tasks = [start(f"p:{seq}") for seq in (1, 2, 3)]
            busy = await _until(lambda: _equals(running, 3))
            tasks += [start(f"{key}:0") for key in ("c", "d", "e")]
            both = await _until(lambda: _equals(running, 6))
            per_replica = await running()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return first, busy and both, per_replica

    first, started, per_replica = asyncio.run(body())
    assert sorted(first) == [0, 1], f"test setup: rollouts p and q must start on different replicas: {first}"
    assert started, f"the six long requests never ran together: {per_replica}"
    p = first[0]
    assert per_replica[p] == 3 and per_replica[1 - p] == 3, (
        f"p's calls must stay on its replica and new rollouts go to the less loaded one: {per_replica}"
    )


async def _equals(running, total: int) -> bool:
    return sum(await running()) == total


def test_closing_a_stream_aborts_the_request_on_its_replica(prompts):
    """Closing the ReplicatedEngine's iterator after one chunk cancels the request on the replica serving it."""

    async def body():
        async with _replicas(load_model("tiny-qwen3"), load_model("tiny-qwen3")) as (engine, servers):
            stream = engine.generate(prompts[1], LONG, "r0:0")
            await anext(stream)
            await stream.aclose()

            async def aborted() -> bool:
                idle = all([(await s.engine.status()).running == 0 for s in servers])
                return idle and sum(s.engine.counters().finished["abort"] for s in servers) == 1

            return await _until(aborted), [s.engine.counters().finished for s in servers]

    aborted, finished = asyncio.run(body())
    assert aborted, f"closing the stream must abort exactly that request on its replica: {finished}"


def test_a_rollout_moves_off_an_unreachable_replica_and_other_errors_pass_through(prompts, free_port):
    """A replica refusing connections (Unavailable before any token) sends its rollouts elsewhere; an
    InvalidArgument is the caller's fault and propagates unchanged, without trying another replica."""

    async def body():
        live = _server(load_model("tiny-qwen3"))
        await live.start()
        dead = f"127.0.0.1:{free_port}"
        engine = ReplicatedEngine.from_targets(
            [dead, f"127.0.0.1:{live.port}"], secret=SECRET, max_message_mb=64
        )
        try:
            tokens = [
                await _drain(engine.generate(prompts[r], SHORT, f"rollout{r}:{seq}"))
                for seq in range(2)
                for r in range(4)
            ]
            with pytest.raises(InvalidArgument) as caught:
                await _drain(engine.generate([], SHORT, "rollout0:2"))
            return tokens, _ended(live), caught.value
        finally:
            await engine.aclose()
            await live.stop(grace=1)

    tokens, ended, invalid = asyncio.run(body())
    assert tokens == [3] * 8, f"every call must be served despite the dead replica: {tokens}"
    assert ended == 8, f"the live replica must have served all 8 calls: {ended}"
    assert "empty" in str(invalid).lower() or "prompt" in str(invalid).lower(), (
        f"InvalidArgument must keep the server's message: {invalid}"
    )


def test_a_checkpoint_counts_as_served_only_once_every_replica_serves_it(other_checkpoint):
    """Both replicas in service at 0, then version 1 on one of them: the replicated status still says
    0 (the other still takes traffic at 0); after load_weights on all, 1."""
    folder, _ = other_checkpoint

    async def body():
        async with _replicas(load_model("tiny-qwen3"), load_model("tiny-qwen3")) as (engine, servers):
            assert (await engine.status()).extra["ready_replicas"] == 2, "test setup: both in service"
            await engine.engines[0].load_weights(1, str(folder))
            half = await engine.status()
            seconds = await engine.load_weights(1, str(folder))
            return (
                half,
                seconds,
                await engine.status(),
                [(await s.engine.status()).policy_version for s in servers],
            )

    half, seconds, after, versions = asyncio.run(body())
    assert half.policy_version == 0 and half.extra["max_version"] == 1, (
        f"a version served by one replica of two must not count as served: {half}"
    )
    assert versions == [1, 1], f"load_weights must reach every replica: {versions}"
    assert seconds > 0 and after.policy_version == 1 and after.ready, (
        f"both serve 1, so must the whole: {after}"
    )
    assert after.extra["replicas"] == 2 and after.extra["min_version"] == 1, (
        f"merged extras wrong: {after.extra}"
    )


def test_a_replica_refusing_the_checkpoint_fails_the_load_naming_it_and_the_old_version_stays_served(
    other_checkpoint,
):
    """One replica serves another model: the tiny-qwen3 checkpoint loads on the first and is refused by
    the second; the error is FailedPrecondition naming both, and the served version stays 0."""
    folder, _ = other_checkpoint

    async def body():
        async with _replicas(load_model("tiny-qwen3"), _two_layer_model()) as (engine, servers):
            with pytest.raises(FailedPrecondition) as caught:
                await engine.load_weights(1, str(folder))
            versions = [(await s.engine.status()).policy_version for s in servers]
            return caught.value, engine.names, await engine.status(), versions

    error, (good, bad), status, versions = asyncio.run(body())
    failed, _, loaded = str(error).partition("loaded it:")
    assert bad in failed and good not in failed, f"the error must name the refusing replica only: {error}"
    assert good in loaded, f"the error must say which replica did load the checkpoint: {error}"
    assert versions == [1, 0], f"test setup: one replica loads, the other refuses: {versions}"
    assert status.policy_version == 0 and status.extra["max_version"] == 1, (
        f"a checkpoint one replica refused must not count as served: {status}"
    )


def test_the_trainer_fails_loudly_when_a_replica_refuses_its_checkpoint(other_checkpoint):
    """The trainer's publish raises, naming version and uri, instead of training on while one replica lags."""
    folder, _ = other_checkpoint
    runner = LoopThread()
    servers = [_server(load_model("tiny-qwen3")), _server(_two_layer_model())]
    try:
        ports = [runner.run(s.start(), timeout_s=60) for s in servers]
        engine = ReplicatedEngine.from_targets(
            [f"127.0.0.1:{p}" for p in ports], secret=SECRET, max_message_mb=64
        )
        trainer = Trainer(
            TrainerConfig(model="tiny-qwen3"),
            store=None, bus=None, source=None, tokenizer=None, engines=[engine], runner=runner,
        )  # fmt: skip
        with pytest.raises(FailedPrecondition) as caught:
            trainer._reload_engines(1, str(folder))
        runner.run(engine.aclose())
    finally:
        for s in servers:
            runner.run(s.stop(grace=1), timeout_s=60)
        runner.close()
    assert "checkpoint 1" in str(caught.value) and str(folder) in str(caught.value), (
        f"the trainer's error must name the version and uri it failed to publish: {caught.value}"
    )


async def _versions(engine, prompt: list[int], request_id: str) -> list[int]:
    """The policy version of every token one request generated."""
    return [v async for chunk in engine.generate(prompt, SHORT, request_id) for v in chunk.policy_versions]


def test_a_replica_leaving_moves_only_its_own_rollouts(prompts):
    """12 rollouts over 3 replicas; one replica stops: its rollouts move (to the other two), every other
    rollout stays where it was, and the stopped replica is out of service for the next placements."""

    async def body():
        models = [load_model("tiny-qwen3") for _ in range(3)]
        async with _replicas(*models) as (engine, servers):

            async def call(r: int, seq: int) -> int:
                before = [_ended(s) for s in servers]
                await _drain(engine.generate(prompts[r % 8], SHORT, f"rollout{r}:{seq}"))
                [i] = [i for i, s in enumerate(servers) if _ended(s) == before[i] + 1]
                return i

            first = [await call(r, 0) for r in range(12)]
            await servers[2].stop(grace=0)
            second = [await call(r, 1) for r in range(12)]
            return first, second, [r.ready for r in engine.replicas]

    first, second, ready = asyncio.run(body())
    assert sorted(first.count(i) for i in range(3)) == [4, 4, 4], f"12 rollouts spread over 3: {first}"
    moved = [r for r in range(12) if first[r] != second[r]]
    assert moved == [r for r in range(12) if first[r] == 2], (
        f"only the stopped replica's rollouts may move: before {first}, after {second}"
    )
    assert 2 not in second and ready == [True, True, False], f"the stopped replica is out: {second} {ready}"


def test_a_replica_starting_late_gets_the_published_checkpoint_before_any_traffic(
    prompts, other_checkpoint, free_port
):
    """The trainer publishes version 1 while replica B is still down (the publish goes on without it).
    B then starts at version 0: the trainer's engine loads version 1 on it in the background, and the
    proxy's engine sends B nothing until it serves 1, then spreads new rollouts onto it. Every token
    any rollout got carries version 1."""
    folder, _ = other_checkpoint

    async def body():
        a = _server(load_model("tiny-qwen3"))
        await a.start()
        targets = [f"127.0.0.1:{a.port}", f"127.0.0.1:{free_port}"]
        probes = {"probe_interval_s": 0.2, "probe_timeout_s": 2.0}
        trainer_side = ReplicatedEngine.from_targets(targets, secret=SECRET, load_timeout_s=60, **probes)
        proxy_side = ReplicatedEngine.from_targets(targets, secret=SECRET, **probes)
        b = None
        try:
            await trainer_side.load_weights(1, str(folder))
            published = await trainer_side.status()
            versions = [v for r in range(4) for v in await _versions(proxy_side, prompts[r], f"early{r}:0")]
            b = _server(load_model("tiny-qwen3"), port=free_port)
            await b.start()
            b_at_start = (await b.engine.status()).policy_version
            while not proxy_side.replicas[1].ready:  # meanwhile traffic goes on, never to B at version 0
                versions += await _versions(proxy_side, prompts[0], f"early0:{len(versions)}")
                await asyncio.sleep(0.05)
            b_before = _ended(b)
            versions += [v for r in range(8) for v in await _versions(proxy_side, prompts[r], f"late{r}:0")]
            return published, b_at_start, b_before, _ended(b), versions, (await b.engine.status()).policy_version
        finally:
            await trainer_side.aclose()
            await proxy_side.aclose()
            for server in (a, b):
                if server is not None:
                    await server.stop(grace=1)

    published, b_at_start, b_before, b_after, versions, b_version = asyncio.run(asyncio.wait_for(body(), 120))
    assert published.policy_version == 1 and published.extra["ready_replicas"] == 1, (
        f"the publish must go on without the replica that is down: {published}"
    )
    assert b_at_start == 0 and b_version == 1, f"the late replica must get version 1: {b_at_start} -> {b_version}"
    assert b_before == 0, f"the late replica took {b_before} requests before it served the published version"
    assert b_after >= 2, f"new rollouts must spread onto the late replica once it is current: {b_after}"
    assert versions and set(versions) == {1}, f"every token must come from version 1: {sorted(set(versions))}"


def _inference_process(port: int) -> subprocess.Popen:
    """`clawgym serve inference` (tiny-qwen3) as its own process, answering Status before it returns."""
    env = {**os.environ, "CLAWGYM_RPC__SECRET": SECRET}
    argv = [sys.executable, "-m", "clawgym_services.inference", "--host", "127.0.0.1", "--port", str(port),
            "--metrics-port", "0", "--model", "tiny-qwen3", "--checkpoint-root", tempfile.gettempdir()]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    probe = GrpcEngine(f"127.0.0.1:{port}", secret=SECRET, status_timeout_s=2)

    async def answers() -> bool:
        with contextlib.suppress(Exception):
            return (await probe.status()).ready
        return proc.poll() is not None

    async def wait() -> bool:
        ok = await _until(answers, timeout_s=120)
        await probe.aclose()
        return ok

    if not asyncio.run(wait()) or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"the inference service did not start: {proc.communicate()[1].decode()[-3000:]}")
    return proc


LOAD_S = 8.0  # the hang test's load deadline


def test_a_replica_that_hangs_or_dies_never_holds_the_trainers_publish(other_checkpoint, free_port):
    """Replica B is a real `clawgym serve inference` process. Frozen (SIGSTOP: connections open, no
    answer), the trainer's publish of version 1 ends after the load deadline without it, and the
    publish of version 2 does not wait for it again (it answered no probe since); thawed, B is given
    version 2 by the watch; killed, the publish of version 3 goes on at once without it."""
    folder, _ = other_checkpoint
    proc = _inference_process(free_port)
    runner = LoopThread()
    a = _server(load_model("tiny-qwen3"))
    try:
        runner.run(a.start(), timeout_s=60)
        engine = ReplicatedEngine.from_targets(
            [f"127.0.0.1:{a.port}", f"127.0.0.1:{free_port}"], secret=SECRET,
            load_timeout_s=LOAD_S, probe_timeout_s=1.0, probe_interval_s=0.5,
        )  # fmt: skip
        trainer = Trainer(
            TrainerConfig(model="tiny-qwen3"),
            store=None, bus=None, source=None, tokenizer=None, engines=[engine], runner=runner,
        )  # fmt: skip
        both = runner.run(engine.status(), timeout_s=30)
        os.kill(proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        trainer._reload_engines(1, str(folder))
        frozen_s = time.monotonic() - started
        frozen = runner.run(engine.status(), timeout_s=30)
        frozen_gauge = trainer.metrics.registry.get_sample_value("clawgym_trainer_inference_ready_replicas")
        started = time.monotonic()
        trainer._reload_engines(2, str(folder))
        again_s = time.monotonic() - started
        os.kill(proc.pid, signal.SIGCONT)

        async def caught_up() -> bool:
            return engine.replicas[1].ready and engine.replicas[1].version == 2

        thawed = runner.run(_until(caught_up, timeout_s=60), timeout_s=90)
        proc.kill()
        proc.wait(timeout=30)
        started = time.monotonic()
        trainer._reload_engines(3, str(folder))
        dead_s = time.monotonic() - started
        dead = runner.run(engine.status(), timeout_s=30)
        print(f"publish with a frozen replica {frozen_s:.1f} s, again {again_s:.1f} s, a killed one {dead_s:.1f} s")
        runner.run(engine.aclose(), timeout_s=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        runner.run(a.stop(grace=1), timeout_s=60)
        runner.close()
    assert both.extra["ready_replicas"] == 2, f"test setup: both replicas in service: {both}"
    assert LOAD_S <= frozen_s < 30, f"a frozen replica held the publish {frozen_s:.1f}s (deadline {LOAD_S}s)"
    assert again_s < LOAD_S / 2, f"the next publish waited {again_s:.1f}s for the replica known silent"
    assert frozen.policy_version == 1 and frozen.extra["ready_replicas"] == 1, (
        f"the frozen replica must be out of service and the live one serve version 1: {frozen}"
    )
    assert frozen.extra["excluded_total"] >= 1, f"the exclusion must be counted: {frozen.extra}"
    assert frozen_gauge == 1.0, f"the trainer's metrics must show one ready replica: {frozen_gauge}"
    assert thawed, "the thawed replica must be given the published version 2 and come back"
    assert dead_s < LOAD_S / 2, f"a killed replica held the publish {dead_s:.1f}s"
    assert dead.policy_version == 3 and dead.extra["ready_replicas"] == 1, (
        f"the publish must go on without the killed replica: {dead}"
    )
