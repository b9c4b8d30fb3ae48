"""The store's listing reads (runs, a run's rollouts, groups and train steps), in process and over gRPC.

Both backends, both implementations: what the rollout browser and `clawgym export` see must not
depend on whether they hold a `SqlStore` or a `StoreClient`.
"""

from collections.abc import Iterator

import numpy as np
import pytest

from clawgym.config import StoreConfig
from clawgym.errors import NotFound
from clawgym.records import Checkpoint, RolloutSpec
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.grpc_client import StoreClient
from clawgym.store.interface import TrajectoryStore
from clawgym.store.sql import SqlStore
from clawgym_services.store.server import create_server


@pytest.fixture(params=["sql", "grpc"])
def any_store(request: pytest.FixtureRequest, store_url: str, rpc_secret: str) -> Iterator[TrajectoryStore]:
    """A SqlStore on a fresh database of each backend, used directly or through the store service."""
    store = SqlStore(store_url, MemoryBus())
    if request.param == "sql":
        yield store
        store.close()
        return
    port = request.getfixturevalue("free_port")
    cfg = StoreConfig(url=store_url, port=port, metrics_port=0)
    server = create_server(cfg, host="127.0.0.1", store=store, secret=rpc_secret)
    server.start()
    with StoreClient(f"127.0.0.1:{port}", secret=rpc_secret, timeout_s=30) as client:
        yield client
    server.stop(grace=None)
    store.close()


def test_listings_show_runs_groups_rollouts_with_rewards_and_steps(any_store: TrajectoryStore, make_call) -> None:
    """Two runs; one has two groups (one complete and consumed by a checkpoint, one open) and a step."""
    assert any_store.list_runs() == [], "a fresh store lists no runs"
    first = any_store.create_run("first")
    run = any_store.create_run("second", {"algo": "grpo"})
    assert [r.id for r in any_store.list_runs()] == [run.id, first.id], "runs are listed newest first"

    done = any_store.register_rollouts(run.id, [RolloutSpec("g-done", "t1", "reference", 0) for _ in range(2)])
    open_ = any_store.register_rollouts(run.id, [RolloutSpec("g-open", "t2", "codex", 1)])
    any_store.register_rollouts(first.id, [RolloutSpec("g-other", "t1", "reference", 0)])
    for i, r in enumerate(done):
        any_store.record_call(make_call(r.rollout_id, 0, key=i))
        any_store.finish_rollout(r.rollout_id, "finished", reward=float(i), passed=bool(i))
    any_store.record_checkpoint(Checkpoint(run.id, 1, 0, "file:///ckpt/1", {"loss": 0.5}, group_ids=("g-done",)))
    any_store.record_train_step(run.id, 1, {"loss": 0.25})
    any_store.record_train_step(run.id, 0, {"loss": 0.5})

    groups = any_store.list_groups(run.id)
    assert [g.id for g in groups] == ["g-done", "g-open"], "a run's groups, in creation order, not another run's"
    g_done, g_open = groups
    assert (g_done.size, g_done.ended, g_done.consumed_version) == (2, 2, 1), g_done
    assert g_done.ready_at is not None, "a group whose rollouts all ended has a ready time"
    assert (g_open.size, g_open.ended, g_open.ready_at, g_open.consumed_version) == (1, 0, None, None), g_open

    rollouts = any_store.list_rollouts(run.id)
    assert [r.id for r in rollouts] == [done[0].rollout_id, done[1].rollout_id, open_[0].rollout_id]
    assert [(r.status, r.reward, r.passed) for r in rollouts] == [
        ("finished", 0.0, False), ("finished", 1.0, True), ("registered", None, None),
    ], "each rollout comes with its status and reward (None while unrewarded)"  # fmt: skip
    assert rollouts[2] == any_store.get_rollout(open_[0].rollout_id), "a listed rollout equals the one read alone"
    only = any_store.list_rollouts(run.id, "g-open")
    assert [r.id for r in only] == [open_[0].rollout_id], "group_id narrows the listing to that group"
    assert any_store.list_rollouts(run.id, "g-other") == [], "another run's group is not this run's"

    steps = any_store.list_train_steps(run.id)
    assert [(s.step, s.metrics) for s in steps] == [(0, {"loss": 0.5}), (1, {"loss": 0.25})], steps
    assert all(s.created_at > 0 for s in steps), "the store stamps each step's time"
    assert any_store.list_train_steps(first.id) == [] and any_store.list_groups(first.id)[0].id == "g-other"


@pytest.mark.parametrize("read", ["list_groups", "list_rollouts", "list_train_steps"])
def test_listing_an_unknown_run_is_not_found(any_store: TrajectoryStore, read: str) -> None:
    with pytest.raises(NotFound, match="unknown run"):
        getattr(any_store, read)("no-such-run")


def test_open_group_versions_give_each_open_groups_oldest_generating_version(
    any_store: TrajectoryStore, make_call
) -> None:
    """The trainer's staleness read: per open group of the run with a generated token recorded, the
    oldest version that generated one, whatever version the group was requested under. Complete
    groups, groups with no call or only calls without output, failed rollouts' calls and another
    run's groups are left out."""
    run = any_store.create_run("run")
    other = any_store.create_run("other")

    def call(rollout_id: str, seq: int, version: int, n_output: int = 4):
        return make_call(rollout_id, seq, n_output=n_output, policy_version=version,
                         output_versions=np.full(n_output, version, np.int32))  # fmt: skip

    late = any_store.register_rollouts(run.id, [RolloutSpec("g-late", "t", "reference", 0)] * 2)
    any_store.record_call(call(late[0].rollout_id, 0, 5))
    any_store.record_call(call(late[0].rollout_id, 1, 6))
    any_store.record_call(call(late[1].rollout_id, 0, 3))
    any_store.finish_rollout(late[1].rollout_id, "finished", reward=1.0, passed=True)
    failed = any_store.register_rollouts(run.id, [RolloutSpec("g-failed", "t", "reference", 0)] * 2)
    any_store.record_call(call(failed[0].rollout_id, 0, 1))
    any_store.finish_rollout(failed[0].rollout_id, "failed", error="sandbox lost")
    any_store.record_call(call(failed[1].rollout_id, 0, 2))
    empty = any_store.register_rollouts(run.id, [RolloutSpec("g-empty", "t", "reference", 0)])
    any_store.record_call(call(empty[0].rollout_id, 0, 0, n_output=0))
    any_store.register_rollouts(run.id, [RolloutSpec("g-none", "t", "reference", 0)])
    done = any_store.register_rollouts(run.id, [RolloutSpec("g-done", "t", "reference", 0)])
    any_store.record_call(call(done[0].rollout_id, 0, 0))
    any_store.finish_rollout(done[0].rollout_id, "finished", reward=0.0, passed=False)
    theirs = any_store.register_rollouts(other.id, [RolloutSpec("g-theirs", "t", "reference", 0)])
    any_store.record_call(call(theirs[0].rollout_id, 0, 0))

    assert any_store.open_group_versions(run.id) == {"g-late": 3, "g-failed": 2}, (
        "an open group counts from its oldest generated token (an ended rollout's included, a failed "
        "one's not); groups complete, without output or of another run are left out"
    )
    assert any_store.open_group_versions(other.id) == {"g-theirs": 0}
    with pytest.raises(NotFound, match="unknown run"):
        any_store.open_group_versions("no-such-run")
