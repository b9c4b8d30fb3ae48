"""Group commit of calls (`store.group_commit`, `SqlStore` rule 7): concurrent `record_call`s share
transactions, every one is committed when it returns, and each caller gets its own outcome.

On PostgreSQL a batch is written by one execution of a prepared statement (`store.pg_prepared`), on
SQLite in a Core transaction; both are tested."""

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from sqlalchemy import select

from clawgym.assemble import open_sql_store
from clawgym.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from clawgym.records import RolloutSpec
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.config import StoreConfig
from clawgym.store.group_commit import GroupCommit, Pending
from clawgym.store.models import RolloutRow
from clawgym.store.pg_prepared import PgPreparedWriter
from clawgym.store.sql import SqlStore
from tests.store.batches import hold_first_batch

WRITERS = 16
CALLS_PER_WRITER = 20

BACKENDS = ["postgresql", "sqlite"]  # a batch: one prepared statement; one Core transaction


def path_url(request: pytest.FixtureRequest, backend: str) -> str:
    return request.getfixturevalue("pg_url" if backend == "postgresql" else "sqlite_url")


@pytest.fixture(params=BACKENDS)
def batched_store(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A group-committing SqlStore on each backend, with an in-process bus."""
    store = SqlStore(path_url(request, request.param), MemoryBus())
    assert (store._pg_calls is not None) == (request.param == "postgresql")
    yield store
    store.close()


def count_statements(store: SqlStore) -> list[set[str]]:
    """What each statement of the store's PostgreSQL writer inserted (ids), as it goes."""
    inserted: list[set[str]] = []
    writer = store._pg_calls
    if writer is not None:
        insert = writer.insert

        def counted(values, encoded, created_at):  # type: ignore[no-untyped-def]
            inserted.append(insert(values, encoded, created_at))
            return inserted[-1]

        writer.insert = counted  # type: ignore[method-assign]
    return inserted


@pytest.mark.parametrize("backend", BACKENDS)
def test_sixteen_threads_of_calls_are_all_committed_and_readable(
    request: pytest.FixtureRequest, make_call, backend: str
) -> None:
    """16 threads at once: every call is there, in seq order, with its own arrays, and they shared
    transactions."""
    store = SqlStore(path_url(request, backend), MemoryBus())
    statements = count_statements(store)
    try:
        run = store.create_run("group-commit")
        specs = [RolloutSpec(f"g{w % 4}", f"task{w}", "reference") for w in range(WRITERS)]
        rollouts = [r.rollout_id for r in store.register_rollouts(run.id, specs)]
        start = threading.Barrier(WRITERS)

        def write(w: int) -> list[str]:
            start.wait()
            return [
                store.record_call(make_call(rollouts[w], seq, key=w * 1000 + seq, n_prompt=2000))
                for seq in range(CALLS_PER_WRITER)
            ]

        with ThreadPoolExecutor(WRITERS) as pool:
            ids = [i for batch in pool.map(write, range(WRITERS)) for i in batch]
        assert len(set(ids)) == WRITERS * CALLS_PER_WRITER, "every call gets its own id"

        for w, rollout_id in enumerate(rollouts):
            calls = store.list_calls(rollout_id)
            assert [c.seq for c in calls] == list(range(CALLS_PER_WRITER)), f"writer {w} lost calls"
            for c in calls:
                want = make_call(rollout_id, c.seq, key=w * 1000 + c.seq, n_prompt=2000)
                assert c.prompt_ids.tobytes() == want.prompt_ids.tobytes(), (
                    f"writer {w} call {c.seq} mixed up"
                )
                assert c.temperature == want.temperature and c.headers == want.headers
        if backend == "postgresql":
            assert sum(map(len, statements)) == WRITERS * CALLS_PER_WRITER, (
                "every call went in by the statement"
            )
        assert store.call_batcher.items == WRITERS * CALLS_PER_WRITER
        assert store.call_batcher.batches < store.call_batcher.items, (
            "16 concurrent writers never shared a transaction"
        )
    finally:
        store.close()


def test_one_bad_call_in_a_batch_fails_alone_with_its_own_error(batched_store: SqlStore, make_call) -> None:
    """One batch holding good calls, a seq recorded already, a seq twice, a call of an ended rollout
    and one of an unknown rollout: the good ones (and the first of the twins) commit, each bad one
    gets its own error (AlreadyExists, FailedPrecondition, NotFound). By one statement, the good
    ones went in together and only the bad ones were written again alone."""
    store = batched_store
    statements = count_statements(store)
    run = store.create_run("bad-in-batch")
    live, other, ended = (
        r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")] * 3)
    )
    store.record_call(make_call(live, 0, key=1))
    store.finish_rollout(ended, "finished", reward=0.0)
    before = store.call_batcher.batches
    holding, release = hold_first_batch(store)
    outcomes: dict[str, object] = {}

    def record(name: str, call) -> None:
        try:
            outcomes[name] = store.record_call(call)
        except Exception as e:
            outcomes[name] = e

    first = threading.Thread(target=record, args=("first", make_call(other, 0, key=2)))
    first.start()
    assert holding.wait(30), "the first call never started a batch"
    queue = [
        ("good1", make_call(live, 1, key=3)),
        ("recorded", make_call(live, 0, key=4)),  # seq 0 is in the database already
        ("twin_a", make_call(live, 5, key=5)),
        ("good2", make_call(other, 1, key=6)),
        ("twin_b", make_call(live, 5, key=7)),  # the same seq as twin_a, in the same batch
        ("ended", make_call(ended, 0, key=8)),
        ("unknown", make_call("no-such-rollout", 0, key=9)),
        ("good3", make_call(live, 2, key=10)),
    ]
    threads = []
    for n, (name, call) in enumerate(queue, 1):  # one at a time, so the queue order is this list's
        threads.append(threading.Thread(target=record, args=(name, call)))
        threads[-1].start()
        deadline = time.monotonic() + 30
        while len(store.call_batcher._queue) < n:
            assert time.monotonic() < deadline, f"{name} never queued"
            time.sleep(0.001)
    release.set()
    for t in [first, *threads]:
        t.join(30)
    assert store.call_batcher.batches == before + 2, (
        "the queued calls must have been one batch after the held one"
    )

    for name in ("first", "good1", "twin_a", "good2", "good3"):
        assert isinstance(outcomes[name], str), f"{name} should have committed: {outcomes[name]!r}"
    assert isinstance(outcomes["recorded"], AlreadyExists) and "#0" in str(outcomes["recorded"])
    assert isinstance(outcomes["twin_b"], AlreadyExists) and "#5" in str(outcomes["twin_b"])
    assert isinstance(outcomes["ended"], FailedPrecondition) and ended in str(outcomes["ended"])
    assert isinstance(outcomes["unknown"], NotFound) and "no-such-rollout" in str(outcomes["unknown"])
    if store._pg_calls is not None:
        good = {outcomes[name] for name in ("good1", "twin_a", "good2", "good3")}
        assert statements[-1] == good, "the statement must insert the good calls of the batch, only them"

    by_seq = {c.seq: c for c in store.list_calls(live)}
    assert sorted(by_seq) == [0, 1, 2, 5]
    assert by_seq[5].id == outcomes["twin_a"], "the twin recorded second must not replace the first"
    assert by_seq[0].prompt_ids.tobytes() == make_call(live, 0, key=1).prompt_ids.tobytes(), (
        "the duplicate of seq 0 must not replace the call recorded first"
    )
    assert by_seq[5].prompt_ids.tobytes() == make_call(live, 5, key=5).prompt_ids.tobytes()
    assert [c.id for c in store.list_calls(other)] == [outcomes["first"], outcomes["good2"]]
    assert store.list_calls(ended) == []


def test_a_batch_of_only_refused_calls_writes_nothing_and_the_next_batch_works(
    batched_store: SqlStore, make_call
) -> None:
    store = batched_store
    run = store.create_run("refused")
    (live,) = (r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")]))
    holding, release = hold_first_batch(store)
    errors: list[Exception] = []

    def record(call) -> None:
        try:
            store.record_call(call)
        except Exception as e:
            errors.append(e)

    first = threading.Thread(target=record, args=(make_call(live, 0),))
    first.start()
    assert holding.wait(30)
    bad = [threading.Thread(target=record, args=(make_call(f"nope{i}", 0),)) for i in range(3)]
    for t in bad:
        t.start()
    while len(store.call_batcher._queue) < 3:
        time.sleep(0.001)
    release.set()
    for t in [first, *bad]:
        t.join(30)
    assert sorted(str(e) for e in errors) == [f"unknown rollout 'nope{i}'" for i in range(3)]
    assert all(isinstance(e, NotFound) for e in errors)
    store.record_call(make_call(live, 1))
    assert [c.seq for c in store.list_calls(live)] == [0, 1]


# The writer of the crash test: records calls from 8 threads on a batched store and prints each
# call's id the moment record_call returns (its acknowledgement), until it is killed.
CRASH_WRITER = """
import sys, threading
import numpy as np
from clawgym.records import Call, RolloutSpec
from clawgym.store.sql import SqlStore

store = SqlStore(sys.argv[1])
run = store.create_run("crash")
rollouts = [r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")] * 8)]
lock = threading.Lock()

def write(rollout_id):
    for seq in range(100_000):
        ids = np.arange(3000, dtype=np.int32)
        call_id = store.record_call(Call(
            rollout_id=rollout_id, seq=seq, protocol="anthropic_messages", request={"m": seq},
            response={"r": seq}, prompt_ids=ids, output_ids=ids[:4],
            output_logprobs=np.zeros(4, np.float32), output_versions=np.zeros(4, np.int32),
            policy_version=0, finish_reason="stop", latency_s=0.1))
        with lock:
            print(call_id, flush=True)

for r in rollouts:
    threading.Thread(target=write, args=(r,), daemon=True).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_acknowledged_call_survives_the_store_process_being_killed(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """A store process killed (SIGKILL) while 8 threads write batches: every call whose record_call
    had returned is in the database, opened afresh by another process."""
    store_url = path_url(request, backend)
    writer = subprocess.Popen(
        [sys.executable, "-c", CRASH_WRITER, store_url], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    acked: list[str] = []
    try:
        assert writer.stdout is not None
        deadline = time.monotonic() + 120
        while len(acked) < 200:
            assert time.monotonic() < deadline and writer.poll() is None, "the writer stopped acknowledging"
            acked.append(writer.stdout.readline().strip())
    finally:
        writer.send_signal(signal.SIGKILL)  # mid-batch: the other threads are waiting on a transaction
        rest, _ = writer.communicate(timeout=30)
    acked += [line.strip() for line in rest.splitlines() if line.strip()]  # printed before the kill

    reopened = SqlStore(store_url, MemoryBus())
    try:
        (run,) = reopened.list_runs()
        stored = {c.id for r in reopened.list_rollouts(run.id) for c in reopened.list_calls(r.id)}
    finally:
        reopened.close()
    missing = set(acked) - stored
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged calls are not in the database"
    assert len(stored) >= len(acked)


def test_a_failing_write_batch_fails_each_of_its_callers_and_the_next_batch_runs() -> None:
    """A write_batch that raises settles every item of its batch with the error: no caller hangs."""
    calls: list[list[int]] = []

    def write_batch(batch: list[Pending]) -> None:
        calls.append([p.value for p in batch])
        if any(p.value < 0 for p in batch):
            raise ValueError("bad batch")
        for p in batch:
            p.settle(p.value * 10)

    commit = GroupCommit(write_batch)
    with pytest.raises(ValueError, match="bad batch"):
        commit.submit(-1, 0)
    assert commit.submit(4, 0) == 40
    assert calls == [[-1], [4]]


@pytest.mark.parametrize("max_inflight", [1, 2])
def test_no_more_batches_than_max_inflight_are_written_at_once(max_inflight: int) -> None:
    """Many submitters: batches respect max_inflight, max_items and max_bytes, and all settle."""
    lock = threading.Lock()
    now, peak, sizes = 0, 0, []

    def write_batch(batch: list[Pending]) -> None:
        nonlocal now, peak
        with lock:
            now += 1
            peak = max(peak, now)
            sizes.append((len(batch), sum(p.size for p in batch)))
        time.sleep(0.01)
        with lock:
            now -= 1
        for p in batch:
            p.settle(p.value)

    commit = GroupCommit(write_batch, max_items=5, max_bytes=350, max_inflight=max_inflight)
    with ThreadPoolExecutor(24) as pool:
        got = list(pool.map(lambda i: commit.submit(i, 100), range(200)))
    assert got == list(range(200))
    assert peak <= max_inflight and all(n <= 3 and b <= 350 for n, b in sizes), (peak, sizes)
    assert commit.items == 200 and commit.batches == len(sizes) < 200


def test_store_pg_batches_in_flight_reaches_the_store(pg_url: str, sqlite_url: str) -> None:
    """PostgreSQL writes a batch by the prepared statement, `store.pg_batches_in_flight` batches at once;
    SQLite, a single writer, one at a time."""
    for url, writer, inflight in ((pg_url, PgPreparedWriter, 3), (sqlite_url, type(None), 1)):
        store = open_sql_store(StoreConfig(url=url, pg_batches_in_flight=3))
        try:
            assert type(store._pg_calls) is writer
            assert store.call_batcher.max_inflight == inflight
        finally:
            store.close()
    assert StoreConfig().pg_batches_in_flight == 2
    with pytest.raises(InvalidArgument, match="pg_batches_in_flight"):
        SqlStore(pg_url, MemoryBus(), pg_batches_in_flight=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_calls_racing_the_end_of_their_rollout_are_all_committed_before_it_or_refused(
    request: pytest.FixtureRequest, make_call, backend: str
) -> None:
    """8 threads record calls while the rollout is finished (rule 4): each call is either
    acknowledged and stored, written before the rollout ended, or refused (FailedPrecondition)
    and not stored; nothing is acknowledged yet lost, nothing stored after the end."""
    store = SqlStore(path_url(request, backend), MemoryBus())
    try:
        run = store.create_run("race")
        (rollout,) = (r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")]))
        acked: list[str] = []
        errors: list[Exception] = []
        going = threading.Barrier(9)

        def write(w: int) -> None:
            going.wait()
            for i in range(10_000):
                try:
                    acked.append(store.record_call(make_call(rollout, w * 10_000 + i, key=i)))
                except FailedPrecondition as e:
                    errors.append(e)
                    return

        threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
        for t in threads:
            t.start()
        going.wait()
        time.sleep(0.3)  # calls in flight
        ended = store.finish_rollout(rollout, "finished", reward=1.0)
        for t in threads:
            t.join(60)
        stored = store.list_calls(rollout)
        assert len(errors) == 8, "every writer must have been refused once the rollout ended"
        assert len(acked) > 8, "the writers never got going"
        assert {c.id for c in stored} == set(acked), "stored calls must be exactly the acknowledged ones"
        finished = store.get_rollout(rollout)
        assert finished.status == ended.status == "finished"
        with store._engine.connect() as conn:  # ended_at is not in the Rollout record
            ended_at = conn.scalar(select(RolloutRow.ended_at).where(RolloutRow.id == rollout))
        assert all(c.created_at <= ended_at for c in stored), "a call was stored after its rollout ended"
    finally:
        store.close()


def idle_connection(store: SqlStore) -> psycopg.Connection:
    """The one idle connection of the store's PostgreSQL writer."""
    assert store._pg_calls is not None
    (idle,) = store._pg_calls._idle
    return idle.conn


def test_a_broken_statement_connection_costs_one_batch_its_fast_path(pg_url: str, make_call) -> None:
    """The statement's connection dies (the server ended it): the next call is still recorded
    (written again alone), and the call after it goes in by the statement on a fresh connection."""
    store = SqlStore(pg_url, MemoryBus())
    try:
        statements = count_statements(store)
        run = store.create_run("broken")
        (rollout,) = (r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")]))
        first = store.record_call(make_call(rollout, 0))
        assert statements == [{first}]
        assert store._pg_calls is not None
        conn = idle_connection(store)
        killed = conn.info.backend_pid
        with store._engine.connect() as admin:
            admin.exec_driver_sql(f"SELECT pg_terminate_backend({killed})")
        deadline = time.monotonic() + 10
        while not conn.closed and time.monotonic() < deadline:
            try:  # wait until the client sees it: a poll on the dead connection fails
                conn.execute("SELECT 1")
            except Exception:
                break
            time.sleep(0.05)
        second = store.record_call(make_call(rollout, 1))
        third = store.record_call(make_call(rollout, 2))
        assert [c.id for c in store.list_calls(rollout)] == [first, second, third]
        assert statements[-1] == {third}, "the call after the broken one must take the statement path again"
        assert idle_connection(store).info.backend_pid != killed
    finally:
        store.close()
