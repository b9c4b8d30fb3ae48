"""Group commit of calls (`store.group_commit`, `SqlStore` rule 7): concurrent `record_call`s share
transactions, every one is committed when it returns, and each caller gets its own outcome."""

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clawgym.assemble import open_sql_store
from clawgym.errors import AlreadyExists, FailedPrecondition, NotFound
from clawgym.records import RolloutSpec
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.config import StoreConfig
from clawgym.store.group_commit import GroupCommit, Pending
from clawgym.store.sql import SqlStore

WRITERS = 16
CALLS_PER_WRITER = 20


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "single"])
def test_sixteen_threads_of_calls_are_all_committed_and_readable(store_url: str, make_call, batched: bool) -> None:
    """16 threads at once, batched or one transaction per call: every call is there, in seq order,
    with its own arrays; batched, they shared transactions."""
    store = SqlStore(store_url, MemoryBus(), batch_writes=batched)
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
                assert c.prompt_ids.tobytes() == want.prompt_ids.tobytes(), f"writer {w} call {c.seq} mixed up"
                assert c.temperature == want.temperature and c.headers == want.headers
        if batched:
            assert store.call_batcher.items == WRITERS * CALLS_PER_WRITER
            assert store.call_batcher.batches < store.call_batcher.items, "16 concurrent writers never shared a transaction"
        else:
            assert store.call_batcher.batches == 0, "batch_writes=False must take the one-transaction path"
    finally:
        store.close()


def hold_first_batch(store: SqlStore) -> tuple[threading.Event, threading.Event]:
    """Makes the store's next batch wait for `release` (after setting `holding`), so the calls that
    arrive meanwhile queue up and are written together in the batch after it."""
    holding, release = threading.Event(), threading.Event()
    write_batch = store.call_batcher._write_batch

    def held(batch: list[Pending]) -> None:
        if not holding.is_set():
            holding.set()
            assert release.wait(30), "the test never released the first batch"
        write_batch(batch)

    store.call_batcher._write_batch = held
    return holding, release


def test_one_bad_call_in_a_batch_fails_alone_with_its_own_error(store: SqlStore, make_call) -> None:
    """One batch holding good calls, a seq recorded already, a seq twice, a call of an ended rollout
    and one of an unknown rollout: the good ones (and the first of the twins) commit, each bad one
    gets its own error (AlreadyExists, FailedPrecondition, NotFound)."""
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
    assert store.call_batcher.batches == before + 2, "the queued calls must have been one batch after the held one"

    for name in ("first", "good1", "twin_a", "good2", "good3"):
        assert isinstance(outcomes[name], str), f"{name} should have committed: {outcomes[name]!r}"
    assert isinstance(outcomes["recorded"], AlreadyExists) and "#0" in str(outcomes["recorded"])
    assert isinstance(outcomes["twin_b"], AlreadyExists) and "#5" in str(outcomes["twin_b"])
    assert isinstance(outcomes["ended"], FailedPrecondition) and ended in str(outcomes["ended"])
    assert isinstance(outcomes["unknown"], NotFound) and "no-such-rollout" in str(outcomes["unknown"])

    by_seq = {c.seq: c for c in store.list_calls(live)}
    assert sorted(by_seq) == [0, 1, 2, 5]
    assert by_seq[5].id == outcomes["twin_a"], "the twin recorded second must not replace the first"
    assert by_seq[0].prompt_ids.tobytes() == make_call(live, 0, key=1).prompt_ids.tobytes(), (
        "the duplicate of seq 0 must not replace the call recorded first"
    )
    assert by_seq[5].prompt_ids.tobytes() == make_call(live, 5, key=5).prompt_ids.tobytes()
    assert [c.id for c in store.list_calls(other)] == [outcomes["first"], outcomes["good2"]]
    assert store.list_calls(ended) == []


def test_a_batch_of_only_refused_calls_writes_nothing_and_the_next_batch_works(store: SqlStore, make_call) -> None:
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


def test_every_acknowledged_call_survives_the_store_process_being_killed(store_url: str) -> None:
    """A store process killed (SIGKILL) while 8 threads write batches: every call whose record_call
    had returned is in the database, opened afresh by another process."""
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



def test_store_batch_writes_reaches_the_store(sqlite_url: str) -> None:
    """`store.batch_writes` (config, env, flag) is what open_sql_store gives SqlStore."""
    for flag in (True, False):
        store = open_sql_store(StoreConfig(url=sqlite_url, batch_writes=flag))
        try:
            assert store.batch_writes is flag
        finally:
            store.close()
    assert StoreConfig().batch_writes is True, "batching is the default"
