"""The prepared-statement path of calls on PostgreSQL (`store.pg_prepared`, rows encoded by
`store.pg_encode`): what it writes reads back as it was recorded, a failed batch commits and
acknowledges nothing, and the statement is prepared once per connection."""

import threading
import time
from typing import Any

import numpy as np
import psycopg
import pytest

from clawgym.records import Call, RolloutSpec
from clawgym.store import pg_encode, validate
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.pg_prepared import PgPreparedWriter, statement_name
from clawgym.store.sql import SqlStore
from tests.store.batches import hold_first_batch


def odd_calls(rollout_id: str, make_call) -> list[Call]:  # type: ignore[no-untyped-def]
    """Calls at the edges of every column's encoding: NULL and zero temperatures, empty arrays,
    int32 and int64 extremes, non-ASCII and nested JSON, empty headers."""
    empty = np.zeros(0, np.int32)
    return [
        make_call(rollout_id, 0, key=1, temperature=None),
        make_call(rollout_id, 1, key=2, temperature=0.0, headers={}),
        make_call(
            rollout_id, 2**31 - 1, key=3, n_output=0, prompt_ids=empty, output_ids=empty,
            output_logprobs=np.zeros(0, np.float32), output_versions=empty, policy_version=2**63 - 1,
        ),
        make_call(
            rollout_id, 3, key=4, prompt_ids=np.array([0, 2**31 - 1, 151_000], np.int32),
            request={"messages": [{"role": "user", "content": "é ü 中文 🙂 \"quoted\" \\ \n\t"}], "n": [1, 2.5, None]},
            response={"nested": {"deep": [{"x": True}, {"y": False}]}}, latency_s=1e-9, temperature=1.5,
        ),
    ]  # fmt: skip


def written(store: SqlStore, writer: Any, calls: list[Call]) -> set[str]:
    """The calls written by `writer` as one batch (one statement), with the store's checks and ids."""
    values = [validate.call_values(c) | {"id": f"{c.rollout_id[:8]}{c.seq:024d}"} for c in calls]
    return writer.insert(values, [writer.encode(v) for v in values], time.time())


def test_a_batch_by_the_prepared_statement_reads_back_as_it_was_recorded(pg_url: str, make_call) -> None:
    """Odd calls in one batch: every field of each reads back as it was recorded."""
    store = SqlStore(pg_url, MemoryBus())
    try:
        run = store.create_run("encode")
        (a,) = (r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")]))
        prepared = PgPreparedWriter(store._engine)
        try:
            assert len(written(store, prepared, odd_calls(a, make_call))) == 4
        finally:
            prepared.close()
        want_calls = sorted(odd_calls(a, make_call), key=lambda c: c.seq)  # list_calls: in seq order
        for got, want in zip(store.list_calls(a), want_calls, strict=True):
            for field in ("prompt_ids", "output_ids", "output_logprobs", "output_versions"):
                assert getattr(got, field).tobytes() == getattr(want, field).tobytes(), field
            for field in ("seq", "protocol", "request", "response", "headers", "policy_version", "finish_reason",
                          "latency_s", "temperature"):  # fmt: skip
                assert getattr(got, field) == getattr(want, field), field
            assert got.created_at == pytest.approx(time.time(), abs=60)
    finally:
        store.close()


def test_every_calls_column_has_a_binary_encoding() -> None:
    """A column added to the model without an encoding fails at import; NULL is None, created_at
    the batch's, and the packed arrays are passed on as the very bytes validate made."""
    values = validate.call_values(Call(
        rollout_id="r", seq=0, protocol="anthropic_messages", request={}, response={},
        prompt_ids=np.arange(3, dtype=np.int32), output_ids=np.arange(1, dtype=np.int32),
        output_logprobs=np.zeros(1, np.float32), output_versions=np.zeros(1, np.int32),
        policy_version=0, finish_reason="stop", latency_s=0.0,
    )) | {"id": "x"}  # fmt: skip
    row = pg_encode.encode_row(values)
    assert len(row) == len(pg_encode.OIDS) == len(pg_encode.COLUMNS)
    assert row[pg_encode.COLUMNS.index("temperature")] is None
    assert row[pg_encode.CREATED_AT] == b"", "created_at is the batch's, set by its leader"
    assert row[pg_encode.COLUMNS.index("prompt_ids")] is values["prompt_ids"], "no copy of the arrays"


def refuse_seq(store: SqlStore, seq: int) -> None:
    """Makes PostgreSQL refuse any call numbered `seq` (a trigger in the test's schema)."""
    with store._engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION refuse_call() RETURNS trigger LANGUAGE plpgsql AS"
            f" $$BEGIN IF NEW.seq = {seq} THEN RAISE EXCEPTION 'refused call %%', NEW.seq; END IF; RETURN NEW; END$$"
        )
        conn.exec_driver_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON calls FOR EACH ROW EXECUTE FUNCTION refuse_call()"
        )


def test_a_failed_prepared_batch_commits_none_of_its_calls(pg_url: str, make_call) -> None:
    """The database refuses one call of a batch: the statement raises, no id is returned and none
    of the batch's calls is stored (the statement is its own transaction)."""
    store = SqlStore(pg_url, MemoryBus())
    try:
        run = store.create_run("refused")
        (rollout,) = (r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")]))
        refuse_seq(store, 2)
        writer = PgPreparedWriter(store._engine)
        try:
            with pytest.raises(psycopg.errors.RaiseException, match="refused call 2"):
                written(store, writer, [make_call(rollout, seq, key=seq) for seq in range(4)])
            assert written(store, writer, [make_call(rollout, 7, key=7)]), "the next batch goes in"
        finally:
            writer.close()
        assert [c.seq for c in store.list_calls(rollout)] == [7]
    finally:
        store.close()


def test_the_callers_of_a_failed_batch_are_acknowledged_only_by_their_own_commits(
    pg_url: str, make_call
) -> None:
    """A batch of five calls, one of which the database refuses: the statement fails, so each call
    is written again alone; the four good ones are acknowledged and stored, the refused one gets
    its error and is not stored. No caller returned before its call was in the database."""
    store = SqlStore(pg_url, MemoryBus())
    try:
        run = store.create_run("refused-batch")
        (rollout,) = (r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")]))
        refuse_seq(store, 3)
        failures: list[BaseException] = []
        assert isinstance(store._pg_calls, PgPreparedWriter)
        insert = store._pg_calls.insert

        def watched(values, encoded, created_at):  # type: ignore[no-untyped-def]
            try:
                return insert(values, encoded, created_at)
            except BaseException as e:
                failures.append(e)
                raise

        store._pg_calls.insert = watched  # type: ignore[method-assign]
        holding, release = hold_first_batch(store)
        outcomes: dict[int, object] = {}

        def record(seq: int) -> None:
            try:
                call_id = store.record_call(make_call(rollout, seq, key=seq))
                with store._engine.connect() as conn:  # acknowledged: it must be committed already
                    outcomes[seq] = (
                        call_id,
                        conn.exec_driver_sql(f"SELECT count(*) FROM calls WHERE id = '{call_id}'").scalar(),
                    )
            except Exception as e:
                outcomes[seq] = e

        first = threading.Thread(target=record, args=(10,))  # its batch holds the others back
        first.start()
        assert holding.wait(30), "the first call never started a batch"
        threads = [threading.Thread(target=record, args=(seq,)) for seq in range(5)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(store.call_batcher._queue) < 5:  # all five queued: they are the next batch
            assert time.monotonic() < deadline, "the calls never queued"
            time.sleep(0.001)
        release.set()
        for t in [first, *threads]:
            t.join(30)
        assert store.call_batcher.batches == 2 and store.call_batcher.items == 6, (
            "the five calls were one batch"
        )
        assert len(failures) == 1 and isinstance(failures[0], psycopg.errors.RaiseException)
        assert isinstance(outcomes[3], Exception) and "refused call 3" in str(outcomes[3])
        for seq in (0, 1, 2, 4, 10):
            assert isinstance(outcomes[seq], tuple) and outcomes[seq][1] == 1, (seq, outcomes[seq])  # type: ignore[index]
        assert [c.seq for c in store.list_calls(rollout)] == [0, 1, 2, 4, 10]
    finally:
        store.close()


def test_the_statement_is_prepared_once_per_connection(pg_url: str, make_call) -> None:
    """Batches reuse their connection's prepared statement: one connection after sequential calls
    (batches of one), holding the statement for one call once."""
    store = SqlStore(pg_url, MemoryBus())
    try:
        run = store.create_run("prepared")
        (rollout,) = (r.rollout_id for r in store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")]))
        for seq in range(3):
            store.record_call(make_call(rollout, seq, key=seq))
        assert isinstance(store._pg_calls, PgPreparedWriter)
        (conn,) = store._pg_calls._idle
        names = conn.conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
        assert names == [(statement_name(1).decode(),)] and conn.prepared == {1}
    finally:
        store.close()


def test_warm_up_opens_the_connections_of_the_batches_in_flight_and_the_first_record_uses_them(
    pg_url: str, make_call
) -> None:
    """A proxy's store opens its writer's connections at startup (`SqlStore.warm_up`), not on its
    first call: one per batch in flight, alive, and the first record takes one of them."""
    store = SqlStore(pg_url, MemoryBus(), pg_batches_in_flight=2)
    try:
        writer = store._pg_calls
        assert isinstance(writer, PgPreparedWriter) and writer._idle == []
        store.warm_up()
        store.warm_up()  # idempotent: no more connections than batches in flight
        opened = list(writer._idle)
        assert len(opened) == 2 and all(c.conn.pgconn.status == psycopg.pq.ConnStatus.OK for c in opened)
        run = store.create_run("warm")
        (r,) = store.register_rollouts(run.id, [RolloutSpec("g", "t", "h")])
        store.record_call(make_call(r.rollout_id, 0))
        assert {id(c) for c in writer._idle} == {id(c) for c in opened}, "no connection opened by the call"
        assert [c.seq for c in store.list_calls(r.rollout_id)] == [0]
    finally:
        store.close()
