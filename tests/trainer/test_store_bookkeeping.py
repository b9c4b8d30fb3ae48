"""The store's resume bookkeeping the trainer relies on: a checkpoint consumes its groups atomically.

Registering checkpoint v with `group_ids` marks those groups consumed in the same transaction; a
group that is incomplete, of another run, or consumed already makes the whole registration fail
with nothing written. `list_unconsumed_groups` is what a restarted trainer still owes. Both
backends, in-process and through the real store service on a loopback port.
"""

from collections.abc import Iterator

import pytest

from clawgym.config import StoreConfig
from clawgym.errors import AlreadyExists, FailedPrecondition
from clawgym.records import Checkpoint, RolloutSpec
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.interface import TrajectoryStore
from clawgym.store.sql import SqlStore
from clawgym_services.store.server import create_server


@pytest.fixture(params=["in-process", "grpc"])
def store(request, store_url: str, free_port: int, rpc_secret: str) -> Iterator[TrajectoryStore]:
    sql = SqlStore(store_url, MemoryBus())
    if request.param == "in-process":
        yield sql
        sql.close()
        return
    cfg = StoreConfig(url=store_url, port=free_port, metrics_port=0)
    server = create_server(cfg, host="127.0.0.1", store=sql, secret=rpc_secret)
    server.start()
    client = StoreClient(f"127.0.0.1:{free_port}", secret=rpc_secret, timeout_s=30)
    yield client
    client.close()
    server.stop(grace=None)
    sql.close()


def _complete_group(store: TrajectoryStore, run_id: str, group_id: str, size: int = 2) -> None:
    for r in store.register_rollouts(run_id, [RolloutSpec(group_id, "t", "reference")] * size):
        store.finish_rollout(r.rollout_id, "finished", reward=1.0, passed=True)


def test_a_checkpoint_consumes_its_groups_and_they_leave_the_unconsumed_list(store: TrajectoryStore):
    """Complete groups are owed until a checkpoint names them; then they are listed with it."""
    run = store.create_run("bookkeeping")
    for g in ("g1", "g2", "g3"):
        _complete_group(store, run.id, g)
    store.register_rollouts(run.id, [RolloutSpec("g4", "t", "reference")])  # incomplete
    assert store.list_unconsumed_groups(run.id) == ["g1", "g2", "g3"], (
        "complete groups, in order of completion"
    )
    store.record_checkpoint(Checkpoint(run.id, 1, 1, "/ckpt/v1", {"loss": 0.5}, group_ids=("g2", "g1")))
    assert store.list_unconsumed_groups(run.id) == ["g3"], "consumed groups must no longer be owed"
    (ckpt,) = store.list_checkpoints(run.id)
    assert ckpt.group_ids == ("g1", "g2"), f"the checkpoint must list the groups it consumed, got {ckpt}"


def test_consuming_a_group_twice_fails_and_writes_nothing(store: TrajectoryStore):
    """A second checkpoint naming a consumed group is refused whole: no checkpoint row, g3 still owed."""
    run = store.create_run("twice")
    for g in ("g1", "g2", "g3"):
        _complete_group(store, run.id, g)
    store.record_checkpoint(Checkpoint(run.id, 1, 1, "/ckpt/v1", {}, group_ids=("g1", "g2")))
    with pytest.raises(FailedPrecondition, match="consumed by checkpoint 1"):
        store.record_checkpoint(Checkpoint(run.id, 2, 2, "/ckpt/v2", {}, group_ids=("g3", "g2")))
    assert [c.version for c in store.list_checkpoints(run.id)] == [1], (
        "a refused checkpoint must not be recorded"
    )
    assert store.list_unconsumed_groups(run.id) == ["g3"], "a refused checkpoint must not consume any group"


def test_incomplete_or_foreign_groups_cannot_be_consumed(store: TrajectoryStore):
    """Only complete groups of the checkpoint's own run can be consumed."""
    run, other = store.create_run("mine"), store.create_run("other")
    _complete_group(store, other.id, "theirs")
    store.register_rollouts(run.id, [RolloutSpec("open", "t", "reference")])
    with pytest.raises(FailedPrecondition, match="not a group of run"):
        store.record_checkpoint(Checkpoint(run.id, 1, 1, "/v1", {}, group_ids=("theirs",)))
    with pytest.raises(FailedPrecondition, match="not complete"):
        store.record_checkpoint(Checkpoint(run.id, 1, 1, "/v1", {}, group_ids=("open",)))
    assert store.list_checkpoints(run.id) == [], "refused checkpoints must leave no row"
    assert store.list_unconsumed_groups(other.id) == ["theirs"], "another run's group must stay owed"


def test_a_repeated_version_is_refused_without_consuming(store: TrajectoryStore):
    """A version registered twice is AlreadyExists, and its groups stay owed."""
    run = store.create_run("repeat")
    _complete_group(store, run.id, "g1")
    store.record_checkpoint(Checkpoint(run.id, 1, 1, "/v1", {}))
    with pytest.raises(AlreadyExists):
        store.record_checkpoint(Checkpoint(run.id, 1, 1, "/v1", {}, group_ids=("g1",)))
    assert store.list_unconsumed_groups(run.id) == ["g1"], "the failed registration must not consume g1"
