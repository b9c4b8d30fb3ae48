"""Orchestrator leases in the store: a lost instance's unended rollouts are failed, once, by a live one.

Both backends (PostgreSQL, SQLite) through `SqlStore`, the concurrent case on PostgreSQL (row
locks), and the RPC through the real store service on a loopback port.
"""

import threading
import time
from collections.abc import Iterator

import pytest

from clawgym.config import StoreConfig
from clawgym.errors import FailedPrecondition, InvalidArgument
from clawgym.records import RolloutSpec
from clawgym.store.bus import GROUPS_READY, ROLLOUTS_DONE
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.sql import SqlStore
from clawgym_services.store.server import create_server

LEASE_S = 30.0


def _register(store: SqlStore, run_id: str, group: str, n: int, instance: str) -> list[str]:
    specs = [RolloutSpec(group, "task", "oracle", 0, instance) for _ in range(n)]
    return [r.rollout_id for r in store.register_rollouts(run_id, specs)]


def test_a_restarted_instance_fails_its_predecessors_unended_rollouts_and_completes_their_group(store):
    """Instance a1 registers a group of 3 and starts two (one of them finishes). a2, same name (a restart),
    heartbeats: the two unended ones are failed as infrastructure failures with no reward, the group
    completes and is announced once; another name's rollouts and a finished one are left alone."""
    bus = store.bus
    assert isinstance(bus, MemoryBus)
    run = store.create_run("leases")
    assert store.orchestrator_heartbeat("a1", "orch-a", LEASE_S) == []
    assert store.orchestrator_heartbeat("b1", "orch-b", LEASE_S) == []
    mine = _register(store, run.id, "g-a", 3, "a1")
    theirs = _register(store, run.id, "g-b", 1, "b1")
    store.start_rollout(mine[0], "sbx-0")
    store.start_rollout(mine[1], "sbx-1")
    store.finish_rollout(mine[1], "finished", reward=1.0, passed=True)
    store.start_rollout(theirs[0], "sbx-2")

    failed = store.orchestrator_heartbeat("a2", "orch-a", LEASE_S)
    again = store.orchestrator_heartbeat("a2", "orch-a", LEASE_S)

    assert sorted(failed) == sorted([mine[0], mine[2]]), f"a1's unended rollouts must be failed: {failed}"
    assert again == [], f"a lost instance's rollouts are failed once: {again}"
    for rid in failed:
        r = store.get_rollout(rid)
        assert r.status == "failed" and r.reward is None and r.passed is None, r
        assert "orchestrator orch-a (a1) was lost (restarted)" in r.error, r.error
    assert store.get_rollout(mine[1]).reward == 1.0, "a finished rollout keeps its outcome"
    assert store.get_rollout(theirs[0]).status == "running", "another live instance's rollout is not taken"
    assert store.list_unconsumed_groups(run.id) == ["g-a"], "the group completes (and only that one)"
    ready = [e.fields["group_id"] for e in bus.read(GROUPS_READY)]
    done = sorted(e.fields["rollout_id"] for e in bus.read(ROLLOUTS_DONE) if e.fields["status"] == "failed")
    assert ready == ["g-a"] and done == sorted(failed), f"announced: ready {ready}, failed {done}"
    with pytest.raises(FailedPrecondition):  # the lost instance, if it was only partitioned, cannot overwrite
        store.finish_rollout(mine[0], "finished", reward=1.0, passed=True)


def test_an_instance_whose_lease_ran_out_loses_its_rollouts_to_a_live_peer_and_not_before(store):
    """Two live replicas: b's heartbeats take nothing of a while a's lease holds; once a is silent for
    longer than the lease, b's next heartbeat fails a's rollouts."""
    run = store.create_run("leases")
    store.orchestrator_heartbeat("a1", "orch-a", LEASE_S)
    mine = _register(store, run.id, "g-a", 2, "a1")
    assert store.orchestrator_heartbeat("b1", "orch-b", LEASE_S) == [], "a's lease holds: nothing is taken"
    time.sleep(0.3)
    failed = store.orchestrator_heartbeat("b1", "orch-b", 0.2)
    assert sorted(failed) == sorted(mine), f"a silent past the lease: its rollouts are failed: {failed}"
    assert "sent no heartbeat" in store.get_rollout(mine[0]).error


def test_bad_heartbeats_are_refused(store):
    for args in (("", "n", 1.0), ("i", "", 1.0), ("i", "n", 0.0), ("i", "n", float("nan"))):
        with pytest.raises(InvalidArgument):
            store.orchestrator_heartbeat(*args)


def test_two_survivors_racing_fail_each_lost_rollout_exactly_once(pg_url):
    """PostgreSQL, two stores (two connections) heartbeating at once after a's lease ran out: every one
    of a's rollouts is failed by exactly one of them and every group ends exactly once."""
    stores = [SqlStore(pg_url, MemoryBus()) for _ in range(2)]
    try:
        run = stores[0].create_run("race")
        stores[0].orchestrator_heartbeat("a1", "orch-a", LEASE_S)
        lost = [rid for g in range(8) for rid in _register(stores[0], run.id, f"g{g}", 3, "a1")]
        time.sleep(0.3)
        results: list[list[str]] = [[], []]
        barrier = threading.Barrier(2)

        def beat(i: int) -> None:
            barrier.wait()
            results[i] = stores[i].orchestrator_heartbeat(f"s{i}", f"orch-s{i}", 0.2)

        threads = [threading.Thread(target=beat, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        both = results[0] + results[1]
        assert sorted(both) == sorted(lost), f"each lost rollout failed exactly once: {len(both)} of {len(lost)}"
        assert len(stores[0].list_unconsumed_groups(run.id)) == 8
        ready = [e.fields["group_id"] for s in stores for e in s.bus.read(GROUPS_READY)]
        assert sorted(ready) == sorted(f"g{g}" for g in range(8)), f"each group announced once: {ready}"
    finally:
        for s in stores:
            s.close()


@pytest.fixture
def client(pg_url: str, free_port: int, rpc_secret: str) -> Iterator[StoreClient]:
    store = SqlStore(pg_url, MemoryBus())
    server = create_server(StoreConfig(url=pg_url, port=free_port, metrics_port=0), host="127.0.0.1",
                           store=store, secret=rpc_secret)  # fmt: skip
    server.start()
    try:
        with StoreClient(f"127.0.0.1:{free_port}", secret=rpc_secret, timeout_s=30) as c:
            yield c
    finally:
        server.stop(grace=None)
        store.close()


def test_the_heartbeat_and_the_rollouts_owner_travel_over_grpc(client):
    """Through the store service: the rollout spec carries its orchestrator, the heartbeat RPC fails a
    restarted instance's rollouts, and a bad lease is INVALID_ARGUMENT."""
    c = client
    run = c.create_run("leases-grpc")
    c.orchestrator_heartbeat("a1", "orch-a", LEASE_S)
    [reg] = c.register_rollouts(run.id, [RolloutSpec("g", "task", "oracle", 0, "a1")])
    c.start_rollout(reg.rollout_id, "sbx")
    assert c.orchestrator_heartbeat("a2", "orch-a", LEASE_S) == [reg.rollout_id]
    assert c.get_rollout(reg.rollout_id).status == "failed"
    assert c.list_unconsumed_groups(run.id) == ["g"]
    with pytest.raises(InvalidArgument):
        c.orchestrator_heartbeat("a3", "orch-a", -1.0)
