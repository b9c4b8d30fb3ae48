"""A batch of calls in one round trip of a prepared statement: `SqlStore.record_call`'s default path on PostgreSQL.

Owns the prepared statement and its connections; not the encoding (`pg_encode`), batching
(`group_commit`) or errors (`sql`).

The statement is `pg_calls`' (`INSERT … SELECT … FROM unnest(…)`: rollouts share-locked in
heartbeat order, calls of unknown or ended rollouts and repeated (rollout, seq) left out, the
ids it inserted returned), with the same outcome per call; what differs is how it travels:

- prepared once per connection, so a batch is one Bind/Execute (no parse or plan per batch);
- each call's row arrives encoded by its caller (`pg_encode.encode_row`), so the leader only
  joins bytes into one binary array per column;
- sent through libpq's `PQexecPrepared`, which releases the GIL for the whole round trip (the
  send of a batch's megabytes, the server's insert and its commit), so the other threads
  validate and encode the next batch meanwhile.

Autocommitted, and it returns only after the commit (synchronous_commit stays on): a returned id
is durable.
"""

import threading
from typing import Any

import psycopg
from psycopg import pq
from sqlalchemy import Engine

from clawgym.records import ENDED_ROLLOUT_STATES
from clawgym.store import pg_encode
from clawgym.store.pg_calls import insert_statement

NAME = b"clawgym_insert_calls"
INSERT_CALLS = insert_statement(lambda i, _: f"${i + 1}").encode()
PARAM_TYPES = [*pg_encode.ARRAY_OIDS, pg_encode.TEXT_ARRAY_OID, pg_encode.TEXT_ARRAY_OID]
ENDED = pg_encode.text_array(sorted(ENDED_ROLLOUT_STATES))


class PgPreparedWriter:
    """Inserts batches of encoded calls, each by one execution of a prepared statement; thread-safe.

    Keeps its idle connections (one per batch in flight) and drops any that saw an error, so a
    broken connection costs one batch its fast path, never a second.
    """

    def __init__(self, engine: Engine) -> None:
        _, connect_args = engine.dialect.create_connect_args(engine.url)
        connect_args.pop("context", None)  # SQLAlchemy's adapters: this path needs none
        self._connect_args = connect_args
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    @staticmethod
    def encode(values: dict[str, Any]) -> tuple[bytes, ...]:
        """What `insert` needs of a call, made in the caller's thread."""
        return pg_encode.encode_row(values)

    def insert(self, values: list[dict[str, Any]], encoded: list[Any], created_at: float) -> set[str]:
        """Writes what it can of the calls in one transaction; returns the ids it committed.

        Raises a `psycopg.Error` (the database's refusal, or a lost connection) and commits nothing."""
        params = [
            *pg_encode.batch_arrays(encoded, created_at),
            pg_encode.text_array(sorted({v["rollout_id"] for v in values})),
            ENDED,
        ]
        conn = self._take()
        try:
            result = conn.pgconn.exec_prepared(NAME, params, [1] * len(params))
            if result.status != pq.ExecStatus.TUPLES_OK:
                raise _error(conn, result)
        except BaseException:
            conn.close()
            raise
        self._give_back(conn)
        return {result.get_value(row, 0).decode() for row in range(result.ntuples)}  # type: ignore[union-attr]

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> "psycopg.Connection[Any]":
        with self._lock:
            if self._idle:
                return self._idle.pop()
        conn = psycopg.connect(**self._connect_args, autocommit=True)
        try:
            result = conn.pgconn.prepare(NAME, INSERT_CALLS, PARAM_TYPES)
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise _error(conn, result)
        except BaseException:
            conn.close()
            raise
        return conn

    def _give_back(self, conn: "psycopg.Connection[Any]") -> None:
        with self._lock:
            self._idle.append(conn)


def _error(conn: "psycopg.Connection[Any]", result: pq.abc.PGresult) -> psycopg.Error:
    """The psycopg error a failed libpq call stands for (the connection's own, where it broke)."""
    if conn.pgconn.status == pq.ConnStatus.BAD or result.status != pq.ExecStatus.FATAL_ERROR:
        return psycopg.OperationalError(conn.pgconn.get_error_message() or result.get_error_message())
    return psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
