"""The in-process store end to end, the same tests on PostgreSQL and SQLite (`store_url`)."""

import threading

import numpy as np
import pytest
from sqlalchemy import create_engine, pool, text

from clawgym.assemble import open_sql_store, open_store
from clawgym.config import ClawgymConfig
from clawgym.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from clawgym.records import Checkpoint, RolloutSpec
from clawgym.store.bus import CHECKPOINTS, GROUPS_READY, ROLLOUTS_DONE
from clawgym.store.config import StoreConfig
from clawgym.store.sql import SqlStore, hash_token


def assert_same_call(got, sent) -> None:
    for field in (
        "rollout_id",
        "seq",
        "protocol",
        "request",
        "response",
        "policy_version",
        "finish_reason",
        "headers",
        "temperature",
    ):
        assert getattr(got, field) == getattr(sent, field), f"{field} changed on its way through the store"
    for field in ("prompt_ids", "output_ids", "output_logprobs", "output_versions"):
        a, b = getattr(got, field), np.asarray(getattr(sent, field))
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (
            f"{field} is not bit-identical after the round trip"
        )


def test_a_run_round_trips_runs_rollouts_calls_groups_and_checkpoints(store: SqlStore, make_call) -> None:
    """Everything written comes back as written, groups in registration and seq order."""
    run = store.create_run("roundtrip", {"algo": "grpo", "lr": 1e-6})
    assert store.get_run(run.id) == run, "get_run must return the created run unchanged"
    assert store.set_run_status(run.id, "running").status == "running", (
        "set_run_status must persist the status"
    )

    specs = [RolloutSpec("g1", "task-a", "reference", 3), RolloutSpec("g1", "task-a", "reference", 3)]
    specs.append(RolloutSpec("g2", "task-b", "claude-code", 3))
    registered = store.register_rollouts(run.id, specs)
    assert len({r.token for r in registered}) == 3, "every rollout must get its own token"

    sent = {}
    for i, reg in enumerate(registered):
        rollout = store.resolve_token(reg.token)
        assert rollout.id == reg.rollout_id and rollout.status == "registered", (
            "a token must resolve to its rollout"
        )
        store.start_rollout(reg.rollout_id, sandbox=f"local:{i}")
        # Recorded out of order, read back in seq order.
        for seq in (1, 0, 2):
            call = make_call(reg.rollout_id, seq, key=10 * i + seq, n_prompt=300 + seq, n_output=20)
            assert store.record_call(call), "record_call must return the new call's id"
            sent[(reg.rollout_id, seq)] = call

    calls = store.list_calls(registered[0].rollout_id)
    assert [c.seq for c in calls] == [0, 1, 2], "list_calls must return calls in seq order"
    for c in calls:
        assert_same_call(c, sent[(c.rollout_id, c.seq)])

    store.finish_rollout(
        registered[0].rollout_id, "finished", reward=1.0, passed=True, timings={"harness_s": 2.5}
    )
    assert store.bus.read(GROUPS_READY) == [], "g1 is not ready while one of its rollouts still runs"
    store.finish_rollout(
        registered[1].rollout_id, "failed", reward=0.0, passed=False, error="harness crashed"
    )
    ready = store.bus.read(GROUPS_READY)
    assert [m.fields for m in ready] == [{"group_id": "g1", "run_id": run.id}], (
        "g1 must be announced once, when complete"
    )
    assert len(store.bus.read(ROLLOUTS_DONE)) == 2, "every ended rollout is announced on rollouts.done"

    group = store.get_group("g1")
    assert group.run_id == run.id and [r.rollout.id for r in group.rollouts] == [
        registered[0].rollout_id,
        registered[1].rollout_id,
    ], "a group's rollouts come back in registration order"
    first, second = group.rollouts
    assert (first.rollout.status, first.rollout.reward, first.rollout.passed) == ("finished", 1.0, True)
    assert first.rollout.timings == {"harness_s": 2.5} and first.rollout.sandbox == "local:0", (
        "finish data is kept"
    )
    assert (second.rollout.status, second.rollout.error) == ("failed", "harness crashed"), (
        "failures keep their error"
    )
    for member in group.rollouts:
        assert [c.seq for c in member.calls] == [0, 1, 2], "a group's calls come back in seq order"
        for c in member.calls:
            assert_same_call(c, sent[(c.rollout_id, c.seq)])

    assert store.resolve_token(registered[0].token).status == "finished", (
        "an ended rollout's token still resolves"
    )

    cp = store.record_checkpoint(
        Checkpoint(run.id, version=1, step=10, uri="file:///ckpt/1", metrics={"loss": 0.5})
    )
    store.record_checkpoint(Checkpoint(run.id, version=2, step=20, uri="file:///ckpt/2", metrics={}))
    assert [c.version for c in store.list_checkpoints(run.id)] == [1, 2], "checkpoints are listed by version"
    assert store.list_checkpoints(run.id)[0] == cp, "a checkpoint round-trips unchanged"
    assert [m.fields["version"] for m in store.bus.read(CHECKPOINTS)] == ["1", "2"], (
        "checkpoints are announced"
    )
    store.record_train_step(run.id, 10, {"loss": 0.5, "kl": 0.01})
    store.record_eval(run.id, 2, "mini", "reference", {"pass@1": 0.4})
    store.record_eval(run.id, 0, "mini", "reference", {"pass@1": 0.1})
    assert [(e.version, e.metrics) for e in store.list_evals(run.id)] == [
        (2, {"pass@1": 0.4}), (0, {"pass@1": 0.1})
    ], "evaluations are listed in the order they were recorded, their metrics unchanged"  # fmt: skip
    with pytest.raises(AlreadyExists):
        store.record_train_step(run.id, 10, {"loss": 0.4})


def test_tokens_are_stored_only_as_sha256(store_url: str, store: SqlStore) -> None:
    """The database holds the token's hash, never the token."""
    run = store.create_run("tokens")
    (reg,) = store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")])
    assert len(reg.token) > 40, "a rollout token must carry at least 256 random bits"
    engine = create_engine(store_url, poolclass=pool.NullPool)
    with engine.connect() as conn:
        (stored,) = conn.execute(text("SELECT token_hash FROM rollouts")).one()
        dump = " ".join(str(v) for row in conn.execute(text("SELECT * FROM rollouts")) for v in row)
    engine.dispose()
    assert stored == hash_token(reg.token), "the stored value must be the token's sha256"
    assert reg.token not in dump, "the token itself must not be stored anywhere in the row"
    with pytest.raises(NotFound):
        store.resolve_token(reg.token + "x")


def test_bad_calls_are_rejected_with_typed_errors_and_write_nothing(store: SqlStore, make_call) -> None:
    """Unknown rollout, wrong dtypes or lengths, bad names, oversize, duplicates: typed errors, nothing written."""
    run = store.create_run("bad")
    (reg,) = store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")])
    rid = reg.rollout_id
    store.record_call(make_call(rid, 0))
    store.max_call_bytes = 100_000
    bad = {
        "unknown rollout": (NotFound, make_call("0" * 32, 0)),
        "float ids": (InvalidArgument, make_call(rid, 1, prompt_ids=np.zeros(5, np.float32))),
        "2-D ids": (InvalidArgument, make_call(rid, 1, output_ids=np.zeros((2, 4), np.int32))),
        "int logprobs": (InvalidArgument, make_call(rid, 1, output_logprobs=np.zeros(8, np.int32))),
        "short logprobs": (InvalidArgument, make_call(rid, 1, output_logprobs=np.zeros(7, np.float32))),
        "long versions": (InvalidArgument, make_call(rid, 1, output_versions=np.zeros(9, np.int32))),
        "ids over int32": (InvalidArgument, make_call(rid, 1, prompt_ids=np.array([2**31], np.int64))),
        "bad protocol": (InvalidArgument, make_call(rid, 1, protocol="smtp")),
        "bad finish reason": (InvalidArgument, make_call(rid, 1, finish_reason="bored")),
        "negative temperature": (InvalidArgument, make_call(rid, 1, temperature=-0.5)),
        "NaN temperature": (InvalidArgument, make_call(rid, 1, temperature=float("nan"))),
        "negative seq": (InvalidArgument, make_call(rid, -1)),
        "NaN in JSON": (InvalidArgument, make_call(rid, 1, response={"x": float("nan")})),
        "oversized": (InvalidArgument, make_call(rid, 1, n_prompt=30_000)),
        "duplicate seq": (AlreadyExists, make_call(rid, 0, key=99)),
    }
    for what, (error, call) in bad.items():
        with pytest.raises(error):
            store.record_call(call)
            pytest.fail(f"{what}: the store accepted a bad call")
    (only,) = store.list_calls(rid)
    assert only.prompt_ids.tobytes() == make_call(rid, 0).prompt_ids.tobytes(), (
        "a rejected duplicate must not overwrite the recorded call"
    )


def test_bad_rollout_and_run_requests_are_typed_errors(store: SqlStore) -> None:
    """Unknown ids are NotFound; bad names InvalidArgument; ended rollouts take no calls or second finish."""
    with pytest.raises(NotFound):
        store.register_rollouts("nope", [RolloutSpec("g", "t", "h")])
    with pytest.raises(NotFound):
        store.get_group("nope")
    with pytest.raises(NotFound):
        store.finish_rollout("nope", "finished")
    run = store.create_run("states")
    with pytest.raises(InvalidArgument):
        store.set_run_status(run.id, "sleeping")
    with pytest.raises(InvalidArgument):
        store.register_rollouts(run.id, [RolloutSpec("g", "", "h")])
    with pytest.raises(InvalidArgument):
        store.register_rollouts(run.id, [RolloutSpec("g", "t\x00", "h")])  # PostgreSQL text holds no NUL
    (reg,) = store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")])
    with pytest.raises(InvalidArgument):
        store.finish_rollout(reg.rollout_id, "running")
    store.finish_rollout(reg.rollout_id, "cancelled")
    with pytest.raises(FailedPrecondition):
        store.finish_rollout(reg.rollout_id, "finished")
    with pytest.raises(FailedPrecondition):
        store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")])  # g is complete
    other = store.create_run("other")
    with pytest.raises(InvalidArgument):
        store.register_rollouts(other.id, [RolloutSpec("g", "t", "h")])  # g belongs to `run`
    with pytest.raises(InvalidArgument):
        store.register_rollouts(other.id, [RolloutSpec("a-new", "t", "h"), RolloutSpec("g", "t", "h")])
    with pytest.raises(NotFound):
        store.get_group("a-new")  # created first in that transaction, then rolled back with it
    assert [m.fields["group_id"] for m in store.bus.read(GROUPS_READY)] == ["g"], (
        "g is announced exactly once"
    )


def test_a_watcher_gets_ready_groups_through_redis_and_can_resume(pg_url: str, redis_url: str) -> None:
    """The production wiring (PostgreSQL + Redis): watch_groups streams ready groups, resumable by id."""
    store = open_sql_store(StoreConfig(url=pg_url, bus_url=redis_url))
    try:
        run = store.create_run("redis-watch")
        regs = store.register_rollouts(run.id, [RolloutSpec("ga", "t", "h"), RolloutSpec("gb", "t", "h")])
        watched: list = []
        watcher = threading.Thread(target=lambda: watched.extend(store.watch_groups(run.id, timeout_s=3)))
        watcher.start()
        for reg in regs:
            store.finish_rollout(reg.rollout_id, "finished", reward=1.0)
        watcher.join()
        assert [w.group_id for w in watched] == ["ga", "gb"], "both groups must reach the watcher, in order"
        resumed = list(store.watch_groups(run.id, after_id=watched[0].message_id, timeout_s=0.5))
        assert [w.group_id for w in resumed] == ["gb"], "resuming after a message id gives only later groups"
    finally:
        store.close()


def test_a_group_committed_but_never_announced_is_announced_when_a_store_starts(
    pg_url: str, redis_url: str
) -> None:
    """A store killed between commit and publish leaves a ready group no bus message names; the next
    store to start announces it (and no group of an ended run, nor a consumed one)."""
    cut_off = open_sql_store(StoreConfig(url=pg_url, bus_url="redis://127.0.0.1:1/0"))  # nothing listens
    try:
        run = cut_off.create_run("lost-announcement")
        cut_off.set_run_status(run.id, "running")
        regs = cut_off.register_rollouts(run.id, [RolloutSpec("lost", "t", "h"), RolloutSpec("trained", "t", "h")])
        ended = cut_off.create_run("ended")
        done = cut_off.register_rollouts(ended.id, [RolloutSpec("old", "t", "h")])[0]
        # each is committed, then its publish fails: the caller hears Unavailable
        for reg in regs:
            with pytest.raises(Unavailable):
                cut_off.finish_rollout(reg.rollout_id, "finished", reward=1.0)
        with pytest.raises(Unavailable):
            cut_off.record_checkpoint(Checkpoint(run.id, 1, 1, "/c/1", metrics={}, group_ids=["trained"]))
        with pytest.raises(Unavailable):
            cut_off.finish_rollout(done.rollout_id, "finished", reward=0.0)
        cut_off.set_run_status(ended.id, "finished")
    finally:
        cut_off.close()
    store = open_sql_store(StoreConfig(url=pg_url, bus_url=redis_url))
    try:
        assert list(store.watch_groups(run.id, timeout_s=0.5)) == [], "the announcement was lost"
        assert store.reannounce_ready_groups() == 1
        assert [w.group_id for w in store.watch_groups(run.id, timeout_s=2)] == ["lost"]
        assert list(store.watch_groups(ended.id, timeout_s=0.5)) == []
    finally:
        store.close()


def test_open_store_gives_the_in_process_store_without_a_service_address(sqlite_url: str) -> None:
    store = open_store(ClawgymConfig(store=StoreConfig(url=sqlite_url)))
    try:
        assert isinstance(store, SqlStore), "no grpc_url means the in-process SqlStore"
        assert store.get_run(store.create_run("x").id).name == "x", "the opened store must work"
    finally:
        store.close()
