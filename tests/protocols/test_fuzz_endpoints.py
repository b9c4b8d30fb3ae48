"""Fuzzed request bodies for every model endpoint: never a 5xx nor a hang, nothing recorded for a refusal.

The bodies are `fuzz_bodies`' (hostile text, mutated and arbitrary JSON, bytes, JSON nested up to
5,000 levels where it is rendered, prompts of up to 1 MB against a 4k context). The app is the real one
(scripted engine, real tokenizer, real SQLite store) served by uvicorn as `clawgym serve proxy`
serves it, over loopback HTTP.
"""

from datetime import timedelta

import httpx
import pytest
from hypothesis import HealthCheck, given, settings

from clawgym.proxy.serving import ServerThread
from tests.protocols.fuzz_bodies import BASES, TOOL_CALL_REPLY, bodies, scripted_proxy


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    proxy = scripted_proxy(str(tmp_path_factory.mktemp("fuzz") / "store.db"), [TOOL_CALL_REPLY])
    store, reg = proxy.store, proxy.rollout
    # a request that takes over 30 s has hung (a scripted answer takes milliseconds)
    with (
        ServerThread(proxy.app) as server,
        httpx.Client(base_url=server.url, headers={"x-api-key": reg.token}, timeout=30) as c,
    ):
        yield c, store, reg.rollout_id
    store.close()


@pytest.mark.parametrize("endpoint", list(BASES))
def test_fuzzed_bodies_never_cause_a_server_error_nor_a_record(client, endpoint):
    c, store, rollout_id = client

    # 75 examples × 4 endpoints; the deadline (generous for a loaded 2-core machine) catches a hang
    @settings(
        max_examples=75,
        deadline=timedelta(seconds=15),
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(body=bodies(endpoint))
    def check(body: bytes):
        before = len(store.list_calls(rollout_id))
        r = c.post(endpoint, content=body, headers={"content-type": "application/json"})
        assert r.status_code < 500, f"{endpoint} answered {r.status_code} to {body[:300]!r}: {r.text[:300]}"
        after = len(store.list_calls(rollout_id))
        if r.status_code != 200:
            assert after == before, f"a refused request ({r.status_code}) recorded a call: {body[:200]!r}"
            assert "error" in r.json(), f"refusals are in the protocol's error shape: {r.text[:200]}"
        elif endpoint != "/v1/messages/count_tokens":
            assert after == before + 1, "an answered call is recorded exactly once"

    check()
