"""A batch of calls in one round trip of a prepared statement: `SqlStore.record_call` on PostgreSQL.

Owns the statement, its preparation and its connections; not the encoding (`pg_encode`), batching
(`group_commit`) or errors (`sql`).

One autocommitted `INSERT … SELECT` per batch, on a psycopg connection of its own (no pool checkout,
ping, BEGIN or COMMIT round trips, no SQLAlchemy per-row work). In the same statement, so in the
same transaction:

- the batch's open rollouts are share-locked in the order `orchestrator_heartbeat` takes its
  exclusive locks (group, id), so none can end before the calls commit (`SqlStore` rule 4);
  calls of unknown or ended rollouts are left out;
- `ON CONFLICT DO NOTHING` leaves out a call whose (rollout, seq) is recorded already, or repeats
  an earlier call of the batch (rows go in queue order, so the first one wins).

It returns the ids it inserted; the caller writes each call left out again on its own, whose
outcome names why (`NotFound`, `FailedPrecondition`, `AlreadyExists`). How it travels:

- the calls come as `VALUES` rows of one binary parameter per column, so the packed arrays are
  sent as they are (no array to build around them, on either side);
- it is prepared once per connection and batch size, so a batch is one Bind/Execute (no parse
  or plan per batch);
- each call's parameters are made by its caller (`pg_encode.encode_row`), so the leader only
  lists them;
- libpq's `PQexecPrepared` releases the GIL for the whole round trip (the send of a batch's
  megabytes, the server's insert and its commit), so other threads validate and encode the
  next batch meanwhile.

The statement returns only after its commit (synchronous_commit stays on): a returned id is
durable. Prepared statements are named and live on their server connection, so a
transaction-pooling proxy in front of PostgreSQL must keep them (PgBouncer: max_prepared_statements).
"""

import threading
from typing import Any

import psycopg
from psycopg import pq
from sqlalchemy import Engine

from clawgym.records import ENDED_ROLLOUT_STATES
from clawgym.store import pg_encode

ENDED = pg_encode.text_array(sorted(ENDED_ROLLOUT_STATES))
WIDTH = len(pg_encode.COLUMNS)


def insert_statement(rows: str, rollout_ids: str, ended: str) -> str:
    """`INSERT INTO calls … SELECT … FROM rows` with the rollout locks and filters above.

    `rows`: a FROM item of the calls, one column per column of the model (in its order) then
    `ord`, their queue order; `rollout_ids` and `ended`: the two `text[]` parameters."""
    names = ", ".join(pg_encode.COLUMNS)
    return (
        f"WITH v AS (SELECT * FROM {rows} AS v({names}, ord)),"
        " open AS MATERIALIZED (SELECT id FROM rollouts"
        f"   WHERE id = ANY({rollout_ids}::text[]) AND status <> ALL({ended}::text[])"
        "   ORDER BY group_id, id FOR SHARE)"
        f" INSERT INTO calls ({names})"
        f" SELECT {names} FROM v WHERE rollout_id IN (SELECT id FROM open) ORDER BY ord"
        " ON CONFLICT DO NOTHING RETURNING id"
    )


def statement(n: int) -> bytes:
    """The statement for a batch of `n` calls: parameters $1… row by row, then the two arrays."""
    rows = ", ".join(
        "(" + ", ".join(f"${r * WIDTH + i + 1}" for i in range(WIDTH)) + f", {r})" for r in range(n)
    )
    return insert_statement(f"(VALUES {rows})", f"${n * WIDTH + 1}", f"${n * WIDTH + 2}").encode()


def statement_name(n: int) -> bytes:
    return b"clawgym_insert_calls_%d" % n


class _Connection:
    """A connection of the writer and the batch sizes it has prepared the statement for."""

    def __init__(self, conn: "psycopg.Connection[Any]") -> None:
        self.conn = conn
        self.prepared: set[int] = set()


class PgPreparedWriter:
    """Inserts batches of encoded calls, each by one execution of a prepared statement; thread-safe.

    Keeps its idle connections (one per batch in flight) and drops any that saw an error, so a
    broken connection costs one batch its fast path, never a second.
    """

    def __init__(self, engine: Engine) -> None:
        _, connect_args = engine.dialect.create_connect_args(engine.url)
        connect_args.pop("context", None)  # SQLAlchemy's adapters: this path needs none
        self._connect_args = connect_args
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    @staticmethod
    def encode(values: dict[str, Any]) -> tuple[bytes | None, ...]:
        """What `insert` needs of a call, made in the caller's thread."""
        return pg_encode.encode_row(values)

    def insert(self, values: list[dict[str, Any]], encoded: list[Any], created_at: float) -> set[str]:
        """Writes what it can of the calls in one transaction; returns the ids it committed.

        Raises a `psycopg.Error` (the database's refusal, or a lost connection) and commits nothing."""
        stamp = pg_encode.FLOAT8.pack(created_at)
        params: list[bytes | None] = []
        for row in encoded:
            params += row
            params[len(params) - WIDTH + pg_encode.CREATED_AT] = stamp
        params += [pg_encode.text_array(sorted({v["rollout_id"] for v in values})), ENDED]
        n = len(encoded)
        c = self._take()
        try:
            if n not in c.prepared:
                types = pg_encode.OIDS * n + [pg_encode.TEXT_ARRAY_OID] * 2
                _check(
                    c.conn,
                    c.conn.pgconn.prepare(statement_name(n), statement(n), types),
                    pq.ExecStatus.COMMAND_OK,
                )
                c.prepared.add(n)
            result = c.conn.pgconn.exec_prepared(statement_name(n), params, [1] * len(params))
            _check(c.conn, result, pq.ExecStatus.TUPLES_OK)
        except BaseException:
            c.conn.close()
            raise
        self._give_back(c)
        return {result.get_value(row, 0).decode() for row in range(result.ntuples)}  # type: ignore[union-attr]

    def warm_up(self, connections: int) -> None:
        """Opens the connections `connections` batches in flight use, ahead of the first batch."""
        with self._lock:
            missing = connections - len(self._idle)
        for c in [self._take() for _ in range(max(0, missing))]:
            self._give_back(c)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.conn.close()

    def _take(self) -> _Connection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Connection(psycopg.connect(**self._connect_args, autocommit=True))

    def _give_back(self, c: _Connection) -> None:
        with self._lock:
            self._idle.append(c)


def _check(conn: "psycopg.Connection[Any]", result: pq.abc.PGresult, ok: pq.ExecStatus) -> None:
    """Raises the psycopg error a failed libpq call stands for (the connection's own, where it broke)."""
    if result.status == ok:
        return
    if conn.pgconn.status == pq.ConnStatus.BAD or result.status != pq.ExecStatus.FATAL_ERROR:
        raise psycopg.OperationalError(conn.pgconn.get_error_message() or result.get_error_message())
    raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
