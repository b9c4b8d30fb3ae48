"""A batch of calls in one statement on PostgreSQL: the earlier path of `SqlStore.record_call` there
(`store.pg_batch: statement`); its `insert_statement` is also the one `pg_prepared` (the default)
prepares, over `VALUES` rows instead of `unnest`ed arrays.

Owns the statement and its connections; not batching (`group_commit`) or errors (`sql`).

One autocommitted statement per batch, on a psycopg connection of its own (no pool checkout, ping,
BEGIN or COMMIT round trips, no SQLAlchemy per-row work): the columns travel as one array
parameter each (the packed token arrays as a binary `bytea[]`) and are `unnest`ed into
`INSERT … SELECT`. In the same statement, so in the same transaction:

- the batch's open rollouts are share-locked in the order `orchestrator_heartbeat` takes its
  exclusive locks (group, id), so none can end before the calls commit (`SqlStore` rule 4);
  calls of unknown or ended rollouts are left out;
- `ON CONFLICT DO NOTHING` leaves out a call whose (rollout, seq) is recorded already, or repeats
  an earlier call of the batch (rows go in queue order, so the first one wins).

It returns the ids it inserted; the caller writes each call left out again on its own, whose
outcome names why (`NotFound`, `FailedPrecondition`, `AlreadyExists`). The statement returns only
after its commit (synchronous_commit stays on), so a returned id is durable.
"""

import json
import threading
from typing import Any

import psycopg
from sqlalchemy import Engine
from sqlalchemy.dialects import postgresql

from clawgym.records import ENDED_ROLLOUT_STATES
from clawgym.store.models import CallRow
from clawgym.store.validate import EncodedJSON

JSON_COLUMNS = ("request", "response", "headers")


COLUMNS = [c.name for c in CallRow.__table__.columns]


def insert_statement(rows: str, rollout_ids: str, ended: str) -> str:
    """`INSERT INTO calls … SELECT … FROM rows` with the rollout locks and filters above.

    `rows`: a FROM item of the calls, one column per column of the model (in its order) then
    `ord`, their queue order; `rollout_ids` and `ended`: the two `text[]` parameters."""
    names = ", ".join(COLUMNS)
    return (
        f"WITH v AS (SELECT * FROM {rows} AS v({names}, ord)),"
        " open AS MATERIALIZED (SELECT id FROM rollouts"
        f"   WHERE id = ANY({rollout_ids}::text[]) AND status <> ALL({ended}::text[])"
        "   ORDER BY group_id, id FOR SHARE)"
        f" INSERT INTO calls ({names})"
        f" SELECT {names} FROM v WHERE rollout_id IN (SELECT id FROM open) ORDER BY ord"
        " ON CONFLICT DO NOTHING RETURNING id"
    )


def _unnest_statement() -> str:
    """The statement with one binary array parameter per column, `unnest`ed, types from the model."""
    dialect = postgresql.dialect()
    arrays = ", ".join(
        f"%({c.name})b::{c.type.compile(dialect=dialect)}[]" for c in CallRow.__table__.columns
    )
    return insert_statement(f"unnest({arrays}) WITH ORDINALITY", "%(rollout_ids)s", "%(ended)s")


INSERT_CALLS = _unnest_statement()


def statement_params(values: list[dict[str, Any]], created_at: float) -> dict[str, Any]:
    """One array per column, in queue order (`values`: `validate.call_values` rows with their id)."""
    params: dict[str, Any] = {}
    for column in CallRow.__table__.columns:
        name = column.name
        if name == "created_at":
            params[name] = [created_at] * len(values)
        elif name in JSON_COLUMNS:  # encoded once, when checked; else what SQLAlchemy's JSON type sends
            params[name] = [
                v[name].text if isinstance(v[name], EncodedJSON) else json.dumps(v[name]) for v in values
            ]
        else:
            params[name] = [v[name] for v in values]
    params["rollout_ids"] = sorted({v["rollout_id"] for v in values})
    params["ended"] = list(ENDED_ROLLOUT_STATES)
    return params


class PgCallWriter:
    """Inserts batches of calls, each in one autocommitted statement; thread-safe.

    Keeps its idle connections (one per batch in flight) and drops any that saw an error, so a
    broken connection costs one batch its fast path, never a second.
    """

    def __init__(self, engine: Engine) -> None:
        _, self._connect_args = engine.dialect.create_connect_args(engine.url)
        self._connect_args.pop("context", None)  # SQLAlchemy's adapters: this path needs none
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    @staticmethod
    def encode(values: dict[str, Any]) -> None:
        """Nothing is made in the caller's thread: `insert` adapts the columns (psycopg)."""
        return None

    def insert(self, values: list[dict[str, Any]], encoded: list[Any], created_at: float) -> set[str]:
        """Writes what it can of `values` in one transaction; returns the ids it committed."""
        conn = self._take()
        try:
            rows = conn.execute(INSERT_CALLS, statement_params(values, created_at)).fetchall()
        except BaseException:
            conn.close()
            raise
        self._give_back(conn)
        return {row[0] for row in rows}

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take(self) -> "psycopg.Connection[Any]":
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return psycopg.connect(**self._connect_args, autocommit=True)

    def _give_back(self, conn: "psycopg.Connection[Any]") -> None:
        with self._lock:
            self._idle.append(conn)
