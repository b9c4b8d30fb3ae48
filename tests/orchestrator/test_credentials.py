"""Who may run rollouts, and where their keys go: the attacks of issue #16 on the real orchestrator service.

RunRollouts needed no credentials and took a caller-chosen proxy URL, so a caller could have rollout
API keys sent to an address of its choosing. Now every call but the health service's needs the rpc
secret, and a batch may name no proxy but the configured one.
"""

from __future__ import annotations

import asyncio
import dataclasses

import grpc
import pytest
from sqlalchemy import create_engine, pool, text

from clawgym.errors import PermissionDenied, Unauthenticated
from clawgym.generated.v1.orchestrator_pb2_grpc import OrchestratorStub
from clawgym.orchestrator import convert
from clawgym.orchestrator.grpc_client import OrchestratorClient
from clawgym.orchestrator.interface import Batch, RolloutRequest, collect
from clawgym.rpc import check_health
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.suites import resolve_suite


def _a_mini_task() -> str:
    return load_tasks(resolve_suite("mini"), split="train")[0].id


def _rollouts_of(pg_url: str, run_id: str) -> int:
    """Rollouts registered under `run_id` (each registration mints an API key)."""
    engine = create_engine(pg_url, poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            return conn.execute(
                text("SELECT count(*) FROM rollouts WHERE run_id = :r"), {"r": run_id}
            ).scalar_one()
    finally:
        engine.dispose()


def test_run_rollouts_without_the_secret_is_unauthenticated_and_registers_nothing(make_orchestrator, pg_url):
    """The attack: RunRollouts with no secret (a plain channel) and with a wrong one (the typed
    client). Both are refused before any rollout is registered; health answers without a secret."""
    served = make_orchestrator()
    run = served.store.create_run("unauthenticated")
    batch = Batch(run.id, [RolloutRequest(_a_mini_task(), "oracle")], batch_id="b-unauth")

    async def attack() -> tuple[grpc.StatusCode, type[Exception]]:
        async with grpc.aio.insecure_channel(served.target) as channel:
            request = convert.batch_to_proto(dataclasses.replace(batch, batch_id="b-raw"))
            try:
                [m async for m in OrchestratorStub(channel).RunRollouts(request)]
                raw = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as e:
                raw = e.code()
        client = OrchestratorClient(served.target, secret="not-the-secret")
        try:
            await collect(client, batch)
            typed: type[Exception] = type(None)
        except Exception as e:
            typed = type(e)
        finally:
            await client.close()
        return raw, typed

    raw, typed = asyncio.run(attack())
    assert raw == grpc.StatusCode.UNAUTHENTICATED, f"no secret: {raw.name}"
    assert typed is Unauthenticated, f"a wrong secret must raise Unauthenticated, got {typed}"
    assert _rollouts_of(pg_url, run.id) == 0, (
        "a refused RunRollouts must register (and mint keys for) nothing"
    )
    assert check_health(served.target, "clawgym.v1.Orchestrator") == "SERVING", "probes carry no secret"


def test_run_rollouts_sends_keys_only_to_the_configured_proxy(make_orchestrator, pg_url):
    """With the secret: a batch naming another proxy is PERMISSION_DENIED before anything is
    registered; one naming the configured proxy (or none) runs."""
    served = make_orchestrator(proxy_url="http://127.0.0.1:18080")
    run = served.store.create_run("proxy-url")
    task = _a_mini_task()

    async def body():
        client = served.client()
        try:
            with pytest.raises(PermissionDenied) as refused:
                await collect(
                    client,
                    Batch(run.id, [RolloutRequest(task, "oracle")], proxy_url="http://attacker.invalid:9"),
                )
            registered_after_refusal = _rollouts_of(pg_url, run.id)
            ok = await collect(
                client, Batch(run.id, [RolloutRequest(task, "oracle")], proxy_url="http://127.0.0.1:18080/")
            )
        finally:
            await client.close()
        return refused.value, registered_after_refusal, ok

    refused, registered, ok = asyncio.run(body())
    assert "attacker.invalid" in str(refused) and "orchestrator.proxy_url" in str(refused), str(refused)
    assert registered == 0, "a batch refused for its proxy URL must register (and mint keys for) nothing"
    assert [(s.state, s.reward) for s in ok] == [("finished", 1.0)], f"the configured proxy runs: {ok}"
